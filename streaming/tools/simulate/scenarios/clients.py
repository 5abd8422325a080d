"""Controller, client and consumer-group scenarios: failover, epoch regressions, rebootstrap
problems (KIP-899 / KIP-1102), connection-setup-timeout storms (KIP-601), commit epochs."""

from __future__ import annotations

from streaming import events
from streaming.tools.simulate.kip601 import setup_timeout_ms
from streaming.tools.simulate.scenarios.base import Script
from streaming.tools.simulate.scenarios.brokers import _stopping_ms

PROXY_NODE_ID = 9000


def other_cluster_id(cluster_id: str) -> str:
    return cluster_id[:-2] + "-b" if cluster_id.endswith("-a") else cluster_id + "-b"


def controller_failover(x: Script) -> None:
    sim = x.sim
    t0 = sim.next_update_at(x.incident_at)  # the new controller publishes right away
    x.incident_at = t0
    x.at(t0, sim.fail_over_controller)
    x.expect("ControllerFailover", not_before=t0, not_after=t0 + x.slack, max_count=1,
             why="events carry a higher controller_epoch from a new controller_id")
    x.end_after(t0 + x.slack)


def metadata_epoch_regression(x: Script) -> None:
    sim, update, lag = x.sim, x.shape.metadata_update_interval_ms, x.shape.max_apply_lag_ms
    t0 = sim.next_update_at(x.incident_at)
    x.incident_at = t0

    def regress() -> None:
        sim.regress_next_update_by = 2  # the next update is numbered two below the previous one

    x.at(t0, regress)
    x.expect("MetadataEpochRegression", not_before=t0, not_after=t0 + lag + x.slack,
             resolves_by=t0 + update + lag + x.slack,
             why="an update within the same controller_epoch is numbered below the previous one")
    x.allow("StaleMetadataResponse", why="brokers serve the lower epoch until the next update")
    x.allow("BrokerMetadataLag", why="brokers applied an epoch below the cluster's newest")
    x.end_after(t0 + update + lag + x.settings.stale_incident_quiet_ms + x.slack)


def all_brokers_replaced(x: Script) -> None:
    s, sim, shape, t0 = x.settings, x.sim, x.shape, x.incident_at
    gone = t0 + _stopping_ms(x)
    old_ids = list(x.broker_ids)
    new_ids = [max(old_ids) + 1 + i for i in range(len(old_ids))]
    for bid in old_ids:
        x.at(t0, lambda bid=bid: sim.set_target_state(x.broker(bid), "STOPPING"))
        x.at(gone, lambda bid=bid: sim.stop_process(x.broker(bid)))
    for i, bid in enumerate(new_ids):
        x.at(gone + 200 + 50 * i, lambda bid=bid: sim.start_process(bid))
    x.allow_lag_while_silent(old_ids, s.controller_heartbeat_timeout_ms)
    # every client's next refresh finds no known broker: "none" clients stay stuck
    overdue_by = gone + s.metadata_max_age_ms + s.rebootstrap_trigger_ms + shape.metadata_retry_ms + x.slack

    def truth() -> None:
        stuck = [(f[1], f[2]) for f in x.facts("metadata_failing") if f[3] == "none" and f[1] >= gone]
        x.require(bool(stuck), "--clients", "no client uses metadata.recovery.strategy=none",
                  "simulate at least one client")
        for first_failure, client_id in stuck:
            x.expect("ClientRebootstrapOverdue", client_id=client_id, not_before=first_failure,
                     not_after=first_failure + s.rebootstrap_trigger_ms + shape.metadata_retry_ms + x.slack,
                     why="recovery strategy none: no metadata for metadata.recovery.rebootstrap.trigger.ms")
        fenced_by = max(f[4] for f in x.facts("process_stopped")) + s.controller_heartbeat_timeout_ms
        if x.end_ms >= fenced_by + s.not_returned_grace_ms:
            for bid in old_ids:
                x.allow("BrokerNotReturned", broker_id=bid, why="decommissioned for good")
    x.after_run(truth)
    x.end_after(overdue_by)


def proxy_rebootstrap_required(x: Script) -> None:
    sim, t0, window = x.sim, x.incident_at, x.settings.storm_window_ms
    behind_proxy = sim.clients[::2]
    spacing = max(1, x.settings.metadata_max_age_ms // (2 * len(behind_proxy)))
    asked = [t0 + i * spacing for i in range(len(behind_proxy))]
    for i, (c, t) in enumerate(zip(behind_proxy, asked)):
        healthy = x.broker_ids[i % len(x.broker_ids)]
        x.at(t, lambda c=c: sim.emit_metadata_response(c, PROXY_NODE_ID, -1, events.REBOOTSTRAP_REQUIRED, 0,
                                                      sim.cluster_id))
        x.at(t + 20, lambda c=c: sim.rebootstrap(c, "REBOOTSTRAP_REQUIRED"))
        x.at(t + 50, lambda c=c, b=healthy: sim.force_refresh(c, x.broker(b)))
    x.expect("RebootstrapRequired", node_id=PROXY_NODE_ID, not_before=asked[0], not_after=asked[0] + x.slack,
             resolves_by=asked[-1] + window + x.slack, why="a node answers MetadataResponse error 129")
    x.end_after(asked[-1] + window + x.slack)


def wrong_cluster_rebootstrap(x: Script) -> None:
    sim, shape, t0 = x.sim, x.shape, x.incident_at
    members = {id(g.member) for g in sim.groups}
    loners = [c for c in sim.clients if id(c) not in members]
    c = (loners or sim.clients)[-1]
    other = other_cluster_id(sim.cluster_id)
    rebootstrap_at = t0 + shape.reconnect_backoff_max_ms
    answered_at = rebootstrap_at + 50

    def drop_connections() -> None:
        sim.stop_client(c)  # from here on the script speaks for this client
        sim.emit_metadata_failed(c, x.pick, "DISCONNECTED")

    x.at(t0, drop_connections)
    x.at(rebootstrap_at, lambda: sim.rebootstrap(c, "NO_NODE_AVAILABLE", cluster_id_after=other))
    # the other cluster numbers its metadata on its own: an epoch below ours must not read as stale
    other_epoch = max(0, sim.metadata_epoch // 3)
    x.at(answered_at, lambda: sim.emit_metadata_response(c, 201, other_epoch, 0, 3, other))
    x.expect("ClusterIdMismatch", client_id=c.client_id, not_before=rebootstrap_at,
             not_after=answered_at + x.slack, why="rebootstrap landed on a cluster with another cluster id")
    x.end_after(answered_at + x.slack)


def connection_storm(x: Script) -> None:
    s, sim, n, t0 = x.settings, x.sim, x.pick, x.incident_at
    base, ceiling = s.connection_setup_timeout_ms, s.connection_setup_timeout_max_ms
    wanted = max(2 * s.storm_min_clients, s.storm_min_timeouts)
    x.require(len(sim.clients) >= wanted, "--clients", f"needs {wanted} clients (2x connection.storm.min.clients "
              f"and one per connection.storm.min.timeouts)", f"pass --clients {wanted} or more")
    storm_end = t0 + s.storm_window_ms + x.slack
    timeouts: list[tuple[int, str]] = []
    x.at(t0, lambda: sim.set_client_reachable(x.broker(n), False))
    x.at(storm_end, lambda: sim.set_client_reachable(x.broker(n), True))

    def attempt(c, failures: int, start: int) -> None:
        timeout = setup_timeout_ms(failures, base, ceiling, x.rng)
        if start + timeout < storm_end:
            x.at(start + timeout, lambda: timed_out(c, failures, timeout))
        else:  # the node is back before this attempt times out
            x.at(max(start, storm_end) + 5, lambda: sim.emit_connection_attempt(c, n, "CONNECTED", timeout, failures))

    def timed_out(c, failures: int, timeout: int) -> None:
        sim.emit_connection_attempt(c, n, "SETUP_TIMEOUT", timeout, failures)
        timeouts.append((sim.now, c.client_id))
        if failures == 0:  # its metadata request was waiting on that connection
            sim.emit_metadata_failed(c, n, "CONNECTION_SETUP_TIMEOUT")
        backoff = min(x.shape.reconnect_backoff_max_ms, 50 * 2 ** failures)
        attempt(c, failures + 1, sim.now + backoff)

    for c in sim.clients[:wanted]:
        start = t0 + x.rng.randrange(2 * x.interval)
        x.at(start, lambda c=c, start=start: attempt(c, 0, start))

    def truth() -> None:
        crossed = _storm_crossed(sorted(timeouts), s.storm_window_ms, s.storm_min_timeouts, s.storm_min_clients)
        x.require(crossed is not None, "connection.storm.min.timeouts", "the storm never crosses the thresholds",
                  "lower connection.storm.min.timeouts or raise connection.storm.window.ms")
        x.expect("ConnectionSetupTimeoutStorm", node_id=n, not_before=timeouts[0][0], not_after=crossed + x.slack,
                 resolves_by=max(t for t, _ in timeouts) + s.storm_window_ms + x.slack,
                 why="connection.storm.min.timeouts setup timeouts from connection.storm.min.clients clients "
                     "within connection.storm.window.ms")
    x.after_run(truth)
    x.end_after(storm_end + s.storm_window_ms + x.slack)


def _storm_crossed(timeouts: list[tuple[int, str]], window: int, min_timeouts: int, min_clients: int) -> int | None:
    """The first timeout at which the window (t - window, t] holds enough timeouts and clients."""
    for i, (t, _) in enumerate(timeouts):
        inside = [cid for u, cid in timeouts[:i + 1] if u > t - window]
        if len(inside) >= min_timeouts and len(set(inside)) >= min_clients:
            return t
    return None


def commit_epoch_regression(x: Script) -> None:
    sim, t0 = x.sim, x.incident_at
    x.require(bool(sim.groups), "--groups", "needs a consumer group", "pass --groups 1 or more")
    g = sim.groups[0]

    def zombie_commit() -> None:
        x.require(g.epochs[0] >= 0, "--groups", "the group has not committed yet", "use a longer warm-up")
        offset, epoch = g.offsets[0], g.epochs[0]
        sim.emit_commit(g, 0, max(0, offset - 100), max(0, epoch - 3))  # a consumer with old metadata
        g.offsets[0], g.epochs[0] = offset, epoch

    x.at(t0, zombie_commit)
    x.expect("OffsetCommitEpochRegression", group_id=g.group_id, topic=g.topic, partition=0,
             not_before=t0, not_after=t0 + x.slack, resolves_by=t0 + x.shape.commit_interval_ms + x.slack,
             why="a commit carries a lower metadata epoch than the previous commit of that partition")
    x.end_after(t0 + x.shape.commit_interval_ms + x.slack)
