"""A discrete-event model of one Kafka cluster and its clients, emitting epochwatch events.

Everything happens on one event-time clock: a heap of (time, seq, action, arg). An action runs
at its time, appends the events of that instant to an output buffer and schedules what comes
next, so the output is in event-time order (ties in scheduling order) and per-entity order is
kept by construction. One seeded ``random.Random`` drives every choice: the same arguments
give the same events, byte for byte.

Steady state: brokers heartbeat to the active controller every ``broker.heartbeat.interval.ms``;
the controller publishes a metadata update every ``metadata_update_interval_ms`` that every live
broker applies after a small per-broker delay; clients refresh metadata every
``metadata.max.age.ms`` from a random broker they know; consumer groups commit offsets with
their client's metadata epoch. Scenarios (streaming.tools.simulate.scenarios) change the model at
chosen times through the methods in the "scenario controls" section.
"""

from __future__ import annotations

import heapq
import random
import uuid
from typing import Callable, Iterator

from streaming.config import RuleSettings
from streaming.tools.simulate.kip601 import setup_timeout_ms
from streaming.tools.simulate.model import BrokerProcess, Client, ClusterShape, Group, SimulationError, topic_name

APPLY_JITTER_MS = 20
OFFSET_STEP_MAX = 500


class ClusterSim:
    def __init__(self, shape: ClusterShape, settings: RuleSettings, *, seed: int, start_ms: int):
        self.shape = shape.validate()
        for key, value in (("broker.heartbeat.interval.ms", settings.broker_heartbeat_interval_ms),
                           ("metadata.max.age.ms", settings.metadata_max_age_ms)):
            if value < 1:
                raise SimulationError(f"rules.{key}", f"{value} cannot drive a simulation", "use a positive value")
        self.settings = settings
        self.seed = seed
        self.cluster_id = shape.cluster_id
        self.start_ms = self.now = start_ms
        self.rng = rng = random.Random(seed)
        # notable happenings the ground truth is computed from: (kind, time, ...)
        self.facts: list[tuple] = []
        self._heap: list[tuple] = []
        self._seq = 0
        self._out: list[dict] = []
        self._id_prefix = f"{shape.cluster_id}-{seed}-"
        self._event_no = 0
        self._hb_interval = settings.broker_heartbeat_interval_ms
        self._hb_jitter = self._hb_interval // 100
        self._refresh_ms = settings.metadata_max_age_ms
        self._connect_ratio = shape.connection_attempt_ratio
        self._apply_jitter = min(APPLY_JITTER_MS, shape.max_apply_lag_ms)  # lag + jitter <= max lag

        self.controller_id = shape.controller_ids[0]
        self.controller_epoch = 1 + rng.randrange(20)
        self.metadata_epoch = 1000 + rng.randrange(1000)  # highest epoch published
        self.issued_epoch = self.metadata_epoch            # epoch of the latest update (may regress)
        self.controller_stalled = False
        self.regress_next_update_by = 0
        self.registered: dict[int, BrokerProcess] = {}      # the incarnation the controller adopted
        self.controller_states: dict[int, str] = {}
        self.processes: list[BrokerProcess] = []
        self.listed_ids: frozenset = frozenset()
        self._answering: tuple = ()
        self._pickable: tuple = ()
        self._next_incarnation = 100 + rng.randrange(900)

        for i in range(shape.brokers):
            p = self._new_process(shape.first_broker_id + i)
            p.serving, p.applied_epoch, p.broker_count = True, self.metadata_epoch, shape.brokers
            self.registered[p.broker_id] = p
            self.controller_states[p.broker_id] = "ACTIVE"
            self.at(start_ms + rng.randrange(self._hb_interval), self._heartbeat, (p, p.gen))
        self._refresh_membership()
        self.at(start_ms + rng.randrange(shape.metadata_update_interval_ms), self._controller_tick, None)
        self.clients = [Client(f"client-{i:04d}", "none" if i % shape.none_strategy_every == 0 else "rebootstrap")
                        for i in range(shape.clients)]
        for c in self.clients:
            self.at(start_ms + rng.randrange(self._refresh_ms), self._client_tick, (c, c.gen, None))
        self.groups = []
        for i in range(shape.groups):
            g = Group(f"group-{i:03d}", topic_name(i), self.clients[i % shape.clients],
                      [rng.randrange(1_000_000) for _ in range(shape.partitions_per_group)],
                      [-1] * shape.partitions_per_group)
            self.groups.append(g)
            self.at(start_ms + rng.randrange(shape.commit_interval_ms), self._commit_tick, g)

    # --- the clock ------------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable, arg=None) -> None:
        """Run ``action(arg)`` at ``time_ms`` (after everything already scheduled for that time)."""
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, self._seq, action, arg))

    def run(self, end_ms: int) -> Iterator[dict]:
        """Yield the events of [now, end_ms) in event-time order."""
        heap, out, pop = self._heap, self._out, heapq.heappop
        while heap and heap[0][0] < end_ms:
            time_ms, _, action, arg = pop(heap)
            self.now = time_ms
            action(arg)
            if len(out) >= 256:
                yield from out
                out.clear()
        self.now = max(self.now, end_ms)
        yield from out
        out.clear()

    # --- brokers and controller -----------------------------------------------------------------

    def _new_process(self, broker_id: int) -> BrokerProcess:
        rng, max_lag = self.rng, self.shape.max_apply_lag_ms
        self._next_incarnation += 1 + rng.randrange(50)
        p = BrokerProcess(broker_id, self._next_incarnation, str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                          rng.randint(0, max_lag - self._apply_jitter))
        self.processes.append(p)
        return p

    def _refresh_membership(self) -> None:
        self.listed_ids = frozenset(bid for bid, p in self.registered.items() if p.alive and p.reaches_controller)
        self._answering = tuple(p for p in self.processes if p.alive and p.serving and p.client_reachable)
        self._pickable = tuple(p for p in self._answering
                               if p.broker_id in self.listed_ids and self.registered.get(p.broker_id) is p)

    def _heartbeat(self, arg) -> None:
        p, gen = arg
        if gen != p.gen:
            return  # that heartbeat chain was stopped
        self.send_heartbeat(p)
        jitter = self._hb_jitter
        self.at(self.now + self._hb_interval + self.rng.randint(-jitter, jitter), self._heartbeat, arg)

    def send_heartbeat(self, p: BrokerProcess) -> None:
        """One heartbeat of ``p`` and the controller's answer (KIP-343 controller logic)."""
        now, bid = self.now, p.broker_id
        adopted = self.registered.get(bid)
        if adopted is None or p.incarnation_id > adopted.incarnation_id:
            self.registered[bid] = adopted = p  # a new process of that broker: the controller adopts it
            self._refresh_membership()
        if adopted is p:
            error, state = 0, p.target_state
            self.controller_states[bid] = state
        else:  # an older incarnation: rejected, and it changes nothing
            error, state = p.stale_error_code, self.controller_states.get(bid)
            self.facts.append(("old_incarnation_heartbeat", now, bid, p.incarnation_id, error))
        p.last_heartbeat_ms = now
        self._event_no += 1
        self._out.append({
            "event_type": "broker_heartbeat", "event_id": f"{self._id_prefix}{self._event_no}",
            "cluster_id": self.cluster_id, "event_time": now, "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch, "broker_id": bid, "incarnation_id": p.incarnation_id,
            "incarnation_uuid": p.incarnation_uuid, "target_state": p.target_state, "want_fence": None,
            "want_shutdown": None, "current_metadata_offset": None, "error_code": error, "current_state": state,
        })

    def _controller_tick(self, _) -> None:
        now = self.now
        self.at(now + self.shape.metadata_update_interval_ms, self._controller_tick, None)
        if self.controller_stalled:
            return
        if self.regress_next_update_by:
            epoch = self.metadata_epoch - self.regress_next_update_by
            self.regress_next_update_by = 0
            self.facts.append(("epoch_regression", now, epoch, self.metadata_epoch))
        else:
            self.metadata_epoch += 1
            epoch = self.metadata_epoch
        self.issued_epoch = epoch
        rng, update = self.rng, (epoch, self.controller_id, self.controller_epoch)
        for p in self.registered.values():
            if not p.alive:
                continue
            if p.reaches_controller:
                self.at(now + p.apply_lag_ms + rng.randrange(self._apply_jitter + 1), self._apply, (p, update))
            else:
                self.facts.append(("missed_update", now, p.broker_id, epoch))

    def _apply(self, arg) -> None:
        p, (epoch, controller_id, controller_epoch) = arg
        if not (p.alive and p.reaches_controller) or self.registered.get(p.broker_id) is not p:
            if p.alive and not p.reaches_controller:  # cut off while the update was on its way
                self.facts.append(("missed_update", self.now, p.broker_id, epoch))
            return
        p.applied_epoch, p.broker_count = epoch, len(self.listed_ids)
        self._event_no += 1
        self._out.append({
            "event_type": "metadata_update", "event_id": f"{self._id_prefix}{self._event_no}",
            "cluster_id": self.cluster_id, "event_time": self.now, "controller_id": controller_id,
            "controller_epoch": controller_epoch, "metadata_epoch": epoch, "broker_id": p.broker_id,
        })
        if not p.serving:  # caught up: it starts answering clients
            p.serving = True
            self._refresh_membership()

    # --- clients and groups ---------------------------------------------------------------------

    def _client_tick(self, arg) -> None:
        c, gen, forced = arg
        if gen != c.gen or c.failed:
            return
        rng, pickable = self.rng, self._pickable
        if forced is None and c.known is self.listed_ids and c.avoid_broker < 0 and pickable:
            # the hot path of the steady state, inlined: a fresh answer from a broker it knows
            p = pickable[int(rng.random() * len(pickable))]
            connect = rng.random() < self._connect_ratio
            epoch = p.applied_epoch
            if not connect and epoch >= c.accepted_epoch:
                now = self.now
                self._event_no += 1
                self._out.append({
                    "event_type": "metadata_response", "event_id": f"{self._id_prefix}{self._event_no}",
                    "cluster_id": self.cluster_id, "event_time": now, "client_id": c.client_id,
                    "broker_id": p.broker_id, "metadata_epoch": epoch, "error_code": 0,
                    "broker_count": p.broker_count, "response_cluster_id": self.cluster_id,
                })
                c.accepted_epoch, c.failing_since = epoch, -1
                self._seq += 1
                heapq.heappush(self._heap, (now + self._refresh_ms, self._seq, self._client_tick, arg))
                return
            delay = self._ask(c, p, connect)
        else:
            delay = self._refresh(c, forced)
        self.at(self.now + delay, self._client_tick, (c, gen, None))

    def _refresh(self, c: Client, forced: BrokerProcess | None) -> int:
        """One metadata request; returns the delay until the client's next one."""
        rng = self.rng
        if forced is not None:
            return self._ask(c, forced, rng.random() < self.shape.connection_attempt_ratio)
        known = c.known
        if known is self.listed_ids and c.avoid_broker < 0:
            candidates = self._pickable
        else:
            candidates = [p for p in self._answering
                          if (known is None or p.broker_id in known) and p.broker_id != c.avoid_broker]
            if not candidates and c.avoid_broker >= 0:
                candidates = [p for p in self._answering if known is None or p.broker_id in known]
        c.avoid_broker = -1
        if not candidates:
            return self._no_node(c)
        p = candidates[int(rng.random() * len(candidates))]
        return self._ask(c, p, rng.random() < self.shape.connection_attempt_ratio)

    def _ask(self, c: Client, p: BrokerProcess, connect: bool) -> int:
        if connect:
            s = self.settings
            timeout = setup_timeout_ms(0, s.connection_setup_timeout_ms, s.connection_setup_timeout_max_ms, self.rng)
            self.emit_connection_attempt(c, p.broker_id, "CONNECTED", timeout, 0)
        epoch = p.applied_epoch
        self.emit_metadata_response(c, p.broker_id, epoch, 0, p.broker_count, self.cluster_id)
        c.failing_since = -1
        if 0 <= epoch < c.accepted_epoch:  # older than what it has: refetch from another broker
            self.facts.append(("stale_response", self.now, c.client_id, p.broker_id, epoch, c.accepted_epoch))
            c.avoid_broker = p.broker_id
            return self.shape.retry_backoff_ms
        if epoch >= 0:
            c.accepted_epoch = epoch
        c.known = self.listed_ids
        return self._refresh_ms

    def _no_node(self, c: Client) -> int:
        """Every broker the client knows is gone (KIP-899 case a)."""
        now, shape = self.now, self.shape
        if c.failing_since < 0:
            c.failing_since = now
            self.facts.append(("metadata_failing", now, c.client_id, c.recovery_strategy))
            node = min(c.known) if c.known else None
            self.emit_metadata_failed(c, node, "DISCONNECTED" if node is not None else "NO_NODE_AVAILABLE")
        else:
            self.emit_metadata_failed(c, None, "NO_NODE_AVAILABLE")
        if c.recovery_strategy != "rebootstrap":
            return shape.metadata_retry_ms
        if now - c.failing_since >= shape.reconnect_backoff_max_ms:
            self.rebootstrap(c, "NO_NODE_AVAILABLE")
            return shape.retry_backoff_ms
        return shape.reconnect_backoff_max_ms

    def _commit_tick(self, g: Group) -> None:
        now = self.now
        self._seq += 1
        heapq.heappush(self._heap, (now + self.shape.commit_interval_ms, self._seq, self._commit_tick, g))
        c = g.member
        if c.failed or c.failing_since >= 0 or c.accepted_epoch < 0:
            return
        epoch, rng, out, offsets, epochs = c.accepted_epoch, self.rng, self._out, g.offsets, g.epochs
        for partition in range(len(offsets)):
            offset = offsets[partition] = offsets[partition] + int(rng.random() * OFFSET_STEP_MAX)
            epochs[partition] = epoch
            self._event_no += 1
            out.append({
                "event_type": "offset_commit", "event_id": f"{self._id_prefix}{self._event_no}",
                "cluster_id": self.cluster_id, "event_time": now, "group_id": g.group_id, "topic": g.topic,
                "partition": partition, "offset": offset, "metadata_epoch": epoch,
            })

    # --- events that scenarios also emit directly -----------------------------------------------

    def _emit(self, event_type: str, **fields) -> None:
        """Append an event: the common fields first, then ``fields`` in schema order."""
        self._event_no += 1
        self._out.append({"event_type": event_type, "event_id": f"{self._id_prefix}{self._event_no}",
                          "cluster_id": self.cluster_id, "event_time": self.now, **fields})

    def emit_metadata_response(self, c: Client, broker_id: int, epoch: int, error_code: int,
                               broker_count: int, response_cluster_id: str | None) -> None:
        self._emit("metadata_response", client_id=c.client_id, broker_id=broker_id, metadata_epoch=epoch,
                   error_code=error_code, broker_count=broker_count, response_cluster_id=response_cluster_id)

    def emit_metadata_failed(self, c: Client, node_id: int | None, reason: str) -> None:
        self._emit("metadata_request_failed", client_id=c.client_id, node_id=node_id, reason=reason)

    def emit_connection_attempt(self, c: Client, node_id: int, outcome: str, timeout_ms: int, failures: int) -> None:
        self._emit("connection_attempt", client_id=c.client_id, node_id=node_id, outcome=outcome,
                   setup_timeout_ms=timeout_ms, consecutive_failures=failures)

    def emit_commit(self, g: Group, partition: int, offset: int, epoch: int) -> None:
        self._emit("offset_commit", group_id=g.group_id, topic=g.topic, partition=partition, offset=offset,
                   metadata_epoch=epoch)

    def rebootstrap(self, c: Client, reason: str, cluster_id_after: str | None = None) -> None:
        """The client re-resolves bootstrap.servers (KIP-899 / KIP-1102)."""
        self.facts.append(("rebootstrap", self.now, c.client_id, reason))
        self._emit("client_rebootstrap", client_id=c.client_id, reason=reason, cluster_id_before=self.cluster_id,
                   cluster_id_after=cluster_id_after or self.cluster_id)
        c.known, c.failing_since = None, -1

    # --- scenario controls (call them from actions: they act at ``now``) ------------------------

    def start_process(self, broker_id: int) -> BrokerProcess:
        """A new process of ``broker_id``: heartbeats now, serves once it caught up on metadata."""
        p = self._new_process(broker_id)
        self.at(self.now, self._heartbeat, (p, p.gen))
        self._catch_up(p)
        return p

    def stop_process(self, p: BrokerProcess) -> None:
        p.alive = p.serving = False
        p.gen += 1
        self.facts.append(("process_stopped", self.now, p.broker_id, p.incarnation_id, p.last_heartbeat_ms))
        self._refresh_membership()

    def set_target_state(self, p: BrokerProcess, state: str) -> None:
        """The broker asks for ``state`` from its next heartbeat on, which is sent now."""
        p.target_state = state
        self._restart_heartbeats(p)

    def cut_from_controller(self, p: BrokerProcess, *, keep_serving: bool) -> None:
        """No heartbeat reaches the controller and no update reaches the broker."""
        p.reaches_controller = False
        p.serving = p.serving and keep_serving
        p.gen += 1
        self.facts.append(("cut_from_controller", self.now, p.broker_id, p.last_heartbeat_ms))
        self._refresh_membership()

    def reconnect_to_controller(self, p: BrokerProcess) -> None:
        p.reaches_controller = True
        self._restart_heartbeats(p)
        self._catch_up(p)
        self._refresh_membership()

    def pause_heartbeats(self, p: BrokerProcess) -> None:
        """Heartbeats stop being observed; the broker keeps serving and stays listed."""
        p.gen += 1
        self.facts.append(("heartbeats_paused", self.now, p.broker_id, p.last_heartbeat_ms))

    def resume_heartbeats(self, p: BrokerProcess) -> None:
        self._restart_heartbeats(p)

    def set_client_reachable(self, p: BrokerProcess, reachable: bool) -> None:
        p.client_reachable = reachable
        self._refresh_membership()

    def force_refresh(self, c: Client, p: BrokerProcess) -> None:
        """The client asks ``p`` for metadata now; its regular refreshes continue from here."""
        c.gen += 1
        delay = self._ask(c, p, self.rng.random() < self.shape.connection_attempt_ratio)
        self.at(self.now + delay, self._client_tick, (c, c.gen, None))

    def stop_client(self, c: Client) -> None:
        c.failed = True

    def fail_over_controller(self) -> None:
        ids = self.shape.controller_ids
        self.controller_id = ids[(ids.index(self.controller_id) + 1) % len(ids)]
        self.controller_epoch += 1
        self.facts.append(("controller_failover", self.now, self.controller_id, self.controller_epoch))

    def next_update_at(self, after_ms: int) -> int:
        """The time of the controller's first update tick at or after ``after_ms``."""
        ticks = [t for t, _, action, _ in self._heap if action == self._controller_tick]
        interval = self.shape.metadata_update_interval_ms
        first = ticks[0]
        return first if first >= after_ms else first + -(-(after_ms - first) // interval) * interval

    def _restart_heartbeats(self, p: BrokerProcess) -> None:
        p.gen += 1
        self.at(self.now, self._heartbeat, (p, p.gen))

    def _catch_up(self, p: BrokerProcess) -> None:
        update = (self.issued_epoch, self.controller_id, self.controller_epoch)
        self.at(self.now + p.apply_lag_ms, self._apply, (p, update))
