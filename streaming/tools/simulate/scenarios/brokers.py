"""Broker lifecycle scenarios: restarts, partitions, zombies, duplicates, flapping, silence,
stuck and missing brokers. Each one schedules the incident on the simulator and states the
alerts a correct engine must / may fire, with windows computed from the RuleSettings.

Windows: ``not_before`` is the moment of the cause (no correct engine can know earlier);
``not_after`` is the rule's threshold counted from the cause, plus ``slack`` (two heartbeat
intervals: event-time timers fire on the next event, heartbeats jitter).
"""

from __future__ import annotations

from streaming.tools.simulate.scenarios.base import Script

STOPPING_HEARTBEATS = 3  # a controlled shutdown heartbeats STOPPING about this many times


def _stopping_ms(x: Script) -> int:
    stopping = STOPPING_HEARTBEATS * x.interval
    x.require(stopping < x.settings.stopping_grace_ms, "broker.stopping.grace.ms",
              f"a controlled shutdown takes {stopping} ms, not below the grace period",
              f"set broker.stopping.grace.ms above {stopping}")
    return stopping


def rolling_restart(x: Script) -> None:
    s, sim = x.settings, x.sim
    stopping, silence = _stopping_ms(x), s.controller_heartbeat_timeout_ms + x.interval
    x.require(silence < s.not_returned_grace_ms, "broker.not.returned.grace.ms",
              f"each broker is down {silence} ms", f"set broker.not.returned.grace.ms above {silence}")
    t = x.incident_at
    for bid in x.broker_ids:
        x.at(t, lambda bid=bid: sim.set_target_state(x.broker(bid), "STOPPING"))
        x.at(t + stopping, lambda bid=bid: sim.stop_process(x.broker(bid)))
        back = t + stopping + silence
        x.at(back, lambda bid=bid: sim.start_process(bid))
        x.expect("BrokerRestarted", broker_id=bid, not_before=back, not_after=back + x.slack,
                 why="a higher incarnation heartbeats after a controlled shutdown")
        t = back + 2 * x.interval + x.shape.max_apply_lag_ms  # next one once this one serves again
    x.allow_lag_while_silent(x.broker_ids, s.controller_heartbeat_timeout_ms)
    x.end_after(t)


def partitioned_broker(x: Script) -> None:
    # k keeps answering clients with its old epoch: a few clients that hold a newer epoch (they
    # just asked a healthy broker) ask k every metadata update interval until it heals
    def probes(first: int, heal: int) -> list:
        clients, update = x.sim.clients, x.shape.metadata_update_interval_ms
        return [(t, clients[i % min(3, len(clients))])
                for i, t in enumerate(range(first, heal - x.interval, update))]

    _partition(x, probes)


def partitioned_broker_fleet(x: Script) -> None:
    # every client asks k once, all within one metadata update interval: each one's stale incident
    # is open at the same time (the volume the per-client alerts' roll-up is for)
    def probes(first: int, heal: int) -> list:
        clients, update = x.sim.clients, x.shape.metadata_update_interval_ms
        x.require(first + update < heal - x.interval, "metadata_update_interval_ms",
                  "no time for every client to ask the partitioned broker",
                  "use a metadata update interval below metadata.lag.grace.ms")
        return [(first + i * update // len(clients), c) for i, c in enumerate(clients)]

    _partition(x, probes)


def _partition(x: Script, probes_between) -> None:
    """Broker k loses the controller but keeps serving its old epoch to the clients
    ``probes_between(first_probe, heal)`` lists ((time, client), ...), then heals."""
    s, sim, k = x.settings, x.sim, x.pick
    t0, update = x.incident_at, x.shape.metadata_update_interval_ms
    T, P, lag_grace = s.controller_heartbeat_timeout_ms, s.heartbeat_timeout_pending_ms, s.metadata_lag_grace_ms
    heal = t0 + max(T + P, update + lag_grace) + 4 * x.interval
    healthy = x.other_broker(k)
    x.at(t0, lambda: sim.cut_from_controller(x.broker(k), keep_serving=True))
    # a client that holds a newer epoch (it just asked a healthy broker) asks k
    first_probe = t0 + update + x.shape.max_apply_lag_ms + x.interval
    probes = probes_between(first_probe, heal)
    x.require(bool(probes), "metadata_update_interval_ms", "no time to probe the partitioned broker",
              "use a metadata update interval below metadata.lag.grace.ms")
    for t, c in probes:
        x.at(t, lambda c=c: sim.force_refresh(c, x.broker(healthy)))
        x.at(t + x.shape.retry_backoff_ms, lambda c=c: sim.force_refresh(c, x.broker(k)))
    probed = list(dict.fromkeys(c for _, c in probes))
    x.at(heal, lambda: sim.reconnect_to_controller(x.broker(k)))
    x.allow("StaleMetadataResponse", broker_id=k, why="any client holding a newer epoch may ask the partitioned broker")

    def truth() -> None:
        _, _, _, last_hb = x.facts("cut_from_controller")[0]
        first_missed = min(f[1] for f in x.facts("missed_update") if f[2] == k)
        caught_up = heal + x.broker(k).apply_lag_ms
        x.expect("BrokerHeartbeatTimeout", broker_id=k, not_before=last_hb, not_after=last_hb + T + P + x.slack,
                 resolves_by=heal + x.slack, why="no heartbeat for controller.heartbeat.timeout.ms + pending")
        x.expect("BrokerMetadataLag", broker_id=k, not_before=first_missed,
                 not_after=first_missed + x.shape.max_apply_lag_ms + lag_grace + x.slack,
                 resolves_by=caught_up + x.slack, why="the others applied a newer epoch metadata.lag.grace.ms ago")
        stale: dict[str, list[int]] = {}   # client id -> when k answered it stale
        for f in x.facts("stale_response"):
            if f[3] == k:
                stale.setdefault(f[2], []).append(f[1])
        for c in probed:
            mine = stale[c.client_id]
            x.expect("StaleMetadataResponse", broker_id=k, client_id=c.client_id, not_before=first_missed,
                     not_after=min(mine) + x.slack, resolves_by=max(mine) + s.stale_incident_quiet_ms + x.slack,
                     why="the client holds a newer epoch than the one the partitioned broker answered")
    x.after_run(truth)
    x.end_after(heal + s.stale_incident_quiet_ms + x.slack)


def zombie_incarnation(x: Script) -> None:
    s, sim, k, t0 = x.settings, x.sim, x.pick, x.incident_at
    T = s.controller_heartbeat_timeout_ms
    restart_after = min(2 * x.interval, (T - x.interval) // 2)  # back well within the timeout
    zombie_beats = max(1, min(2, s.duplicate_min_heartbeats - 1))  # fewer than a duplicate needs
    old = {}

    def crash() -> None:
        old["p"] = x.broker(k)
        sim.stop_process(old["p"])

    x.at(t0, crash)
    x.at(t0 + restart_after, lambda: sim.start_process(k))
    zombie_at = [t0 + restart_after + x.interval // 2 + i * x.interval for i in range(zombie_beats)]
    for t in zombie_at:
        x.at(t, lambda: sim.send_heartbeat(old["p"]))  # the old process wakes up: STALE_BROKER_EPOCH
    x.expect("BrokerIncarnationRegression", broker_id=k, not_before=zombie_at[0], not_after=zombie_at[0] + x.slack,
             resolves_by=zombie_at[-1] + T + x.slack, why="a heartbeat of a lower incarnation after a higher one")
    x.allow("BrokerRestarted", broker_id=k, why="the crash-restart itself is a restart")
    x.allow_lag_while_silent([k], restart_after + x.shape.max_apply_lag_ms)
    if zombie_beats >= s.duplicate_min_heartbeats:
        x.allow("DuplicateBrokerId", broker_id=k, why="broker.duplicate.min.heartbeats is this low")
    x.end_after(zombie_at[-1] + T + x.slack)


def duplicate_broker_id(x: Script) -> None:
    s, sim, k, t0 = x.settings, x.sim, x.pick, x.incident_at
    T, needed = s.controller_heartbeat_timeout_ms, s.duplicate_min_heartbeats
    both_for = (needed + 3) * x.interval
    old = {}

    def second_process() -> None:
        first = old["p"] = x.broker(k)
        first.stale_error_code = 101  # DUPLICATE_BROKER_REGISTRATION once the newer one is adopted
        first.serving = False         # clients reach the registered (newer) endpoint
        sim.start_process(k)

    x.at(t0, second_process)
    x.at(t0 + both_for, lambda: sim.stop_process(old["p"]))
    x.allow("BrokerRestarted", broker_id=k, why="a higher incarnation appeared")

    def truth() -> None:
        beats = sorted(f[1] for f in x.facts("old_incarnation_heartbeat") if f[2] == k)
        x.expect("BrokerIncarnationRegression", broker_id=k, not_before=beats[0], not_after=beats[0] + x.slack,
                 resolves_by=beats[-1] + T + x.slack, why="the lower incarnation keeps heartbeating")
        x.expect("DuplicateBrokerId", broker_id=k, not_before=beats[0], not_after=beats[needed - 1] + x.slack,
                 resolves_by=beats[-1] + T + x.slack,
                 why=f"{needed} (broker.duplicate.min.heartbeats) heartbeats of the lower incarnation while both live")
    x.after_run(truth)
    x.end_after(t0 + both_for + T + x.slack)


def flapping_broker(x: Script) -> None:
    s, sim, k = x.settings, x.sim, x.pick
    T, P = s.controller_heartbeat_timeout_ms, s.heartbeat_timeout_pending_ms
    silence, up = T + P + x.interval, 3 * x.interval
    needed = -(-s.flapping_transitions // 2)  # each silence + return is two transitions
    x.require(needed * (silence + up) <= s.flapping_window_ms, "broker.flapping.window.ms",
              f"{needed} flaps of {silence + up} ms do not fit the window",
              f"set broker.flapping.window.ms to at least {needed * (silence + up)}")
    returns, t = [], x.incident_at
    for _ in range(needed + 1):
        x.at(t, lambda: sim.cut_from_controller(x.broker(k), keep_serving=False))
        x.at(t + silence, lambda: sim.reconnect_to_controller(x.broker(k)))
        returns.append(t + silence)
        t += silence + up
    x.allow("BrokerHeartbeatTimeout", broker_id=k, why="each silence outlasts the timeout")
    x.allow_lag_while_silent([k], silence)

    def truth() -> None:
        first_last_hb = x.facts("cut_from_controller")[0][3]
        x.expect("BrokerFlapping", broker_id=k, not_before=first_last_hb, not_after=returns[needed - 1] + x.slack,
                 why=f"{s.flapping_transitions} ACTIVE/INACTIVE transitions within broker.flapping.window.ms")
    x.after_run(truth)
    x.end_after(returns[-1] + x.slack)


def cluster_silent(x: Script) -> None:
    s, sim, t0 = x.settings, x.sim, x.incident_at
    T, P = s.controller_heartbeat_timeout_ms, s.heartbeat_timeout_pending_ms
    back = t0 + T + P + 4 * x.interval
    resume_at = {bid: back + x.rng.randrange(x.interval) for bid in x.broker_ids}

    def silence() -> None:
        sim.controller_stalled = True  # the controller stalls: no heartbeats answered, no updates
        for bid in x.broker_ids:
            sim.pause_heartbeats(x.broker(bid))

    def resume(bid: int) -> None:
        sim.controller_stalled = False
        sim.resume_heartbeats(x.broker(bid))

    x.at(t0, silence)
    for bid, t in resume_at.items():
        x.at(t, lambda bid=bid: resume(bid))

    def truth() -> None:
        paused = x.facts("heartbeats_paused")
        last = [f[3] for f in paused]
        x.expect("ClusterSilent", not_before=min(last), not_after=max(last) + T + P + x.slack,
                 resolves_by=min(resume_at.values()) + x.slack, max_count=1,
                 why="no broker of the cluster heartbeats for controller.heartbeat.timeout.ms")
        for _, _, bid, last_hb in paused:
            # Its timeout is due (last + T + P) before the cluster has been silent for T
            # (latest + T): no engine can know yet that the whole cluster went quiet.
            if max(last) - last_hb > P:
                x.allow("BrokerHeartbeatTimeout", broker_id=bid,
                        why="heartbeat.timeout.pending.ms is shorter than the spread of the last heartbeats")
    x.after_run(truth)
    x.end_after(max(resume_at.values()) + x.slack)


def stuck_stopping(x: Script) -> None:
    s, sim, k, t0 = x.settings, x.sim, x.pick, x.incident_at
    back = t0 + s.stopping_grace_ms + 4 * x.interval
    x.at(t0, lambda: sim.set_target_state(x.broker(k), "STOPPING"))
    x.at(back, lambda: sim.set_target_state(x.broker(k), "ACTIVE"))  # the operator aborts the shutdown
    x.expect("BrokerStuckStopping", broker_id=k, not_before=t0, not_after=t0 + s.stopping_grace_ms + x.slack,
             resolves_by=back + x.slack, why="STOPPING for longer than broker.stopping.grace.ms")
    x.end_after(back + x.slack)


def broker_not_returned(x: Script) -> None:
    s, sim, k, t0 = x.settings, x.sim, x.pick, x.incident_at
    T, stop = s.controller_heartbeat_timeout_ms, t0 + _stopping_ms(x)
    x.at(t0, lambda: sim.set_target_state(x.broker(k), "STOPPING"))
    x.at(stop, lambda: sim.stop_process(x.broker(k)))
    x.allow_lag_while_silent([k], T)

    def truth() -> None:
        last_hb = x.facts("process_stopped")[0][4]
        # the controller fences it at the latest controller.heartbeat.timeout.ms after its last heartbeat
        x.expect("BrokerNotReturned", broker_id=k, not_before=last_hb,
                 not_after=last_hb + T + s.not_returned_grace_ms + x.slack,
                 why="no heartbeat within broker.not.returned.grace.ms after a controlled shutdown")
    x.after_run(truth)
    x.end_after(stop + T + s.not_returned_grace_ms + x.slack)


def baseline(x: Script) -> None:
    x.has_incident = False
    x.end_after(x.incident_at + max(60_000, 4 * x.settings.controller_heartbeat_timeout_ms))
