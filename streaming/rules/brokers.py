"""Broker lifecycle, incarnations, metadata epochs and cluster-wide rules (KIP-343, KIP-631,
the metadata-epoch proposal behind KAFKA-6262).

One :class:`BrokerFleet` per cluster: heartbeats, metadata updates and the epochs brokers serve to
clients all land here, because several rules compare a broker with the rest of its cluster (the
cluster's newest metadata epoch, cluster-wide silence).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming import events
from streaming.config import RuleSettings
from streaming.fastpath import served_runs
from streaming.rules.lifecycle import Condition, condition
from streaming.rules.records import (
    NO_TIME,
    STATES,
    BrokerRecord,
    ClusterRecord,
    expire,
    first_after,
    over_capacity,
    record_of,
    utc,
)
from streaming.rules.table import EXPIRED_SUMMARY, RulesTable
from streaming.rules.validity import jumps

# A controller answer that means "you are an old incarnation" (KIP-343 / KRaft).
REGRESSION_ERRORS = frozenset({events.INVALID_INCARNATION_ID, events.STALE_BROKER_EPOCH,
                               events.DUPLICATE_BROKER_REGISTRATION})
_SERVING = ("ACTIVE", "STOPPING")
_FLEET_EVENTS = frozenset({"broker_heartbeat", "metadata_update", "metadata_response"})


@dataclass
class BrokerFleet(RulesTable):
    cluster_id: str
    settings: RuleSettings
    cluster: ClusterRecord = field(default_factory=ClusterRecord)
    brokers: dict[int, BrokerRecord] = field(default_factory=dict)
    transitions: list[dict] = field(default_factory=list)
    one_shots: list[Condition] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)
    dirty: bool = False  # an event started or ended a condition: evaluate at its time

    # --- events -------------------------------------------------------------------------------

    def apply(self, event: dict) -> int | None:
        """Apply one event; returns the earliest deadline it may have introduced."""
        kind, t = event["event_type"], event["event_time"]
        before = self.brokers.get(event.get("broker_id"))
        lagging_before = before is not None and self._lagging(before, t)
        if kind == "broker_heartbeat":
            self.on_heartbeat(event)
        elif kind == "metadata_update":
            self.on_metadata_update(event)
        elif kind == "metadata_response":
            self.on_served_epoch(event)
        else:
            return None
        b = self.brokers.get(event["broker_id"])
        if b is not None and self._lagging(b, t) != lagging_before:
            self.dirty = True  # e.g. a lagging broker starts serving clients: the incident starts now
        times = self._broker_deadlines(b) if b else []
        if self.cluster.last_heartbeat_ms != NO_TIME:
            times.append(self.cluster.last_heartbeat_ms + self.settings.controller_heartbeat_timeout_ms)
        if kind == "metadata_update":  # other brokers may have just fallen behind
            times.append(event["event_time"] + self.settings.metadata_lag_grace_ms)
        return first_after(times, event["event_time"])

    def implausible(self, ev: dict) -> str | None:
        """Why a heartbeat or metadata update leaps too far past what the fleet holds
        (streaming.spark.validity): applied, it would make every later real one look old."""
        kind, s, c = ev["event_type"], self.settings, self.cluster
        if kind not in ("broker_heartbeat", "metadata_update"):
            return None  # a served epoch is the broker's latest answer, not a high-water mark
        if jumps(ev["controller_epoch"], c.controller_epoch, s.max_controller_epoch_jump):
            return (f"controller_epoch {ev['controller_epoch']} leaps more than rules.event.max.controller.epoch.jump="
                    f"{s.max_controller_epoch_jump} past {c.controller_epoch}")
        if kind == "broker_heartbeat":
            b = self.brokers.get(ev["broker_id"])
            known = b is not None and b.incarnation_id != events.UNKNOWN_INCARNATION  # else the first is learned
            if known and jumps(ev["incarnation_id"], b.incarnation_id, s.max_epoch_jump):
                return self._unconfirmed_leap(b, ev["incarnation_id"])
        elif jumps(ev["metadata_epoch"], c.newest_epoch, s.max_epoch_jump):
            return (f"metadata_epoch {ev['metadata_epoch']} leaps more than rules.event.max.epoch.jump="
                    f"{s.max_epoch_jump} past the cluster's {c.newest_epoch}")
        return None

    def _unconfirmed_leap(self, b: BrokerRecord, incarnation: int) -> str | None:
        """A leaping incarnation is refused until broker.duplicate.min.heartbeats heartbeats have
        claimed it: one forged heartbeat poisons nothing, while a process that really runs with it
        (a restart into another numbering, a second process) is heard after a few."""
        if incarnation != b.leap_incarnation_id:
            b.leap_incarnation_id, b.leap_heartbeats = incarnation, 0
        b.leap_heartbeats += 1
        if b.leap_heartbeats >= self.settings.duplicate_min_heartbeats:
            b.leap_incarnation_id, b.leap_heartbeats = -1, 0
            return None
        return (f"incarnation_id {incarnation} leaps more than rules.event.max.epoch.jump="
                f"{self.settings.max_epoch_jump} past {b.incarnation_id} (heard {b.leap_heartbeats} time(s); "
                f"{self.settings.duplicate_min_heartbeats} are believed)")

    def over_capacity(self, ev: dict) -> str | None:
        """Why an event for a broker new to a full fleet is refused (rules.state.max.brokers.per.cluster)."""
        broker_id = ev.get("broker_id")
        if broker_id in self.brokers or broker_id is None or broker_id < 0 or ev["event_type"] not in _FLEET_EVENTS:
            return None  # a broker the fleet holds first: the answer for nearly every event
        return over_capacity(self.brokers, broker_id, self.settings.max_brokers, "broker",
                             "state.max.brokers.per.cluster")

    def broker(self, broker_id: int) -> BrokerRecord:
        return record_of(self.brokers, self.touched, broker_id, BrokerRecord)

    def on_heartbeat(self, ev: dict) -> None:
        t = ev["event_time"]
        b = self.broker(ev["broker_id"])
        b.last_event_ms = max(b.last_event_ms, t)
        self._cluster_heard(t)
        self._observe_controller(ev["controller_id"], ev["controller_epoch"], t)
        incarnation = ev["incarnation_id"]
        rejected = ev.get("error_code") in REGRESSION_ERRORS
        if incarnation == events.UNKNOWN_INCARNATION and not rejected:
            incarnation = max(b.incarnation_id, incarnation)  # its sender could not tell: the current one's
        if b.incarnation_id >= 0 and (incarnation < b.incarnation_id or rejected):
            self._old_incarnation_heartbeat(b, incarnation, t)
            return  # KIP-343: a heartbeat of an old incarnation changes nothing
        if incarnation > b.incarnation_id:
            if b.incarnation_id > events.UNKNOWN_INCARNATION:  # after an unknown one, the first known is learned
                self._restart(b, incarnation, t)
            b.incarnation_id = incarnation
        elif t < b.last_heartbeat_ms:
            return  # an older heartbeat of the same incarnation, delivered late: nothing new
        else:
            self._catch_up(b, t)
        b.last_heartbeat_ms = t
        self._transition(b, self._decided_state(b, ev), t, self._reason(b, ev))

    def _cluster_heard(self, t: int) -> None:
        c, timeout = self.cluster, self.settings.controller_heartbeat_timeout_ms
        if c.last_heartbeat_ms != NO_TIME and t - c.last_heartbeat_ms >= timeout:
            c.silence_start_ms, c.silence_end_ms = c.last_heartbeat_ms + timeout, t
            self.dirty = True
        c.last_heartbeat_ms = max(c.last_heartbeat_ms, t)

    def _decided_state(self, b: BrokerRecord, ev: dict) -> str:
        decided = ev.get("current_state")
        if decided == "INACTIVE" or ev.get("want_fence"):
            return "INACTIVE"
        if decided == "STOPPING" or ev.get("want_shutdown") or ev["target_state"] == "STOPPING":
            return "STOPPING"
        if ev["target_state"] == "ACTIVE":
            return "ACTIVE"
        if ev["target_state"] == "INACTIVE":
            return "INACTIVE"
        return "INITIAL" if b.state == "INITIAL" else "INACTIVE"

    @staticmethod
    def _reason(b: BrokerRecord, ev: dict) -> str:
        # A broker in controlled shutdown that the controller then reports fenced has shut down (a
        # collector can read the fence before the heartbeat timeout would say so): as much a
        # shutdown as that timeout, for BrokerNotReturned.
        if b.state == "STOPPING" and ev.get("current_state") == "INACTIVE":
            return "shutdown"
        return "controller" if ev.get("current_state") == "INACTIVE" or ev.get("want_fence") else "heartbeat"

    def _old_incarnation_heartbeat(self, b: BrokerRecord, incarnation: int, t: int) -> None:
        if incarnation != b.old_incarnation_id:
            b.old_incarnation_id, b.old_heartbeats = incarnation, 0
        b.old_heartbeats += 1
        self.dirty = True
        b.old_last_seen_ms = max(b.old_last_seen_ms, t)
        if b.regression_since_ms == NO_TIME:
            b.regression_since_ms = t
        both_alive = t - b.last_heartbeat_ms < self.settings.controller_heartbeat_timeout_ms
        if (b.duplicate_since_ms == NO_TIME and both_alive
                and b.old_heartbeats >= self.settings.duplicate_min_heartbeats):
            b.duplicate_since_ms = t

    def _restart(self, b: BrokerRecord, incarnation: int, t: int) -> None:
        self._catch_up(b, t)
        b.restarts += 1
        self.dirty = True
        self.one_shots.append(condition("BrokerRestarted", t, f"incarnation {b.incarnation_id} -> {incarnation}",
                                        broker_id=b.broker_id, incarnation_id=incarnation))
        # The previous process is now the old incarnation: if it keeps heartbeating, that is a
        # zombie (or a second process with the same broker id).
        b.old_incarnation_id, b.old_last_seen_ms, b.old_heartbeats = b.incarnation_id, b.last_heartbeat_ms, 0
        b.regression_since_ms = b.duplicate_since_ms = NO_TIME
        if b.behind_since_ms != NO_TIME:
            b.behind_since_ms = t  # a new process gets a fresh grace period to catch up

    def on_metadata_update(self, ev: dict) -> None:
        t, epoch, controller_epoch = ev["event_time"], ev["metadata_epoch"], ev["controller_epoch"]
        b = self.broker(ev["broker_id"])
        b.last_event_ms = max(b.last_event_ms, t)
        self._observe_controller(ev["controller_id"], controller_epoch, t)
        c = self.cluster
        same_controller = controller_epoch == b.applied_controller_epoch == c.controller_epoch
        if same_controller and 0 <= epoch < b.applied_epoch:
            # The controller numbered an update below one this broker already applied.
            if c.regression_since_ms == NO_TIME:
                c.regression_since_ms, c.regression_controller_id = t, ev["controller_id"]
                self.dirty = True
            c.regression_epoch = epoch
            c.regression_high_epoch = max(c.regression_high_epoch, b.applied_epoch)
        if controller_epoch < b.applied_controller_epoch:
            return  # an update from a deposed controller
        b.applied_epoch, b.applied_controller_epoch = epoch, controller_epoch
        self._raise_newest(epoch, t)
        self._update_behind(b, t)

    def without_runs(self, ready: list[dict], floor: int) -> list[dict]:
        """``ready`` (in the order the engine applies it) less the serves that cannot change
        anything (streaming.fastpath.served_runs)."""
        return served_runs.without_repeated_serves(self, ready)

    def on_served_epoch(self, ev: dict) -> None:
        epoch = ev["metadata_epoch"]
        if epoch < 0 or ev.get("error_code", 0) != 0 or ev["broker_id"] < 0:
            return  # -1 is unknown (never stale); errors carry no usable metadata
        t = ev["event_time"]
        b = self.broker(ev["broker_id"])
        if t >= b.last_served_ms:
            b.served_epoch, b.last_served_ms = epoch, t
        self._update_behind(b, t)

    def _observe_controller(self, controller_id: int, controller_epoch: int, t: int) -> None:
        c = self.cluster
        if controller_epoch <= c.controller_epoch:
            return
        if c.controller_epoch >= 0:
            self.dirty = True
            self.one_shots.append(condition("ControllerFailover", t,
                                            f"controller {c.controller_id} (epoch {c.controller_epoch}) -> "
                                            f"{controller_id} (epoch {controller_epoch})",
                                            controller_id=controller_id, controller_epoch=controller_epoch))
        c.controller_id, c.controller_epoch = controller_id, controller_epoch
        c.regression_since_ms, c.regression_high_epoch = NO_TIME, -1

    # --- metadata epoch bookkeeping -----------------------------------------------------------

    def _raise_newest(self, epoch: int, t: int) -> None:
        c = self.cluster
        if epoch <= c.newest_epoch:
            return
        c.newest_epoch = epoch
        c.epoch_history.append(epoch)
        c.epoch_history_ms.append(t)
        keep_after = t - 2 * self.settings.metadata_lag_grace_ms
        while len(c.epoch_history_ms) > 1 and c.epoch_history_ms[1] <= keep_after:
            del c.epoch_history[0], c.epoch_history_ms[0]
        if c.regression_since_ms != NO_TIME and epoch > c.regression_high_epoch:
            c.regression_since_ms = NO_TIME  # numbering is increasing past the old high again
            self.dirty = True
        for other in self.brokers.values():
            if other.behind_since_ms == NO_TIME and 0 <= other.known_epoch < epoch:
                other.behind_since_ms = t

    def _first_seen_above(self, epoch: int) -> int:
        """When the cluster first had an epoch above ``epoch`` (the earliest we remember)."""
        c = self.cluster
        for e, seen in zip(c.epoch_history, c.epoch_history_ms):
            if e > epoch:
                return seen
        return NO_TIME

    def _update_behind(self, b: BrokerRecord, t: int) -> None:
        if b.known_epoch >= self.cluster.newest_epoch:
            if b.behind_since_ms != NO_TIME and t - b.behind_since_ms >= self.settings.metadata_lag_grace_ms:
                self.dirty = True  # a lag incident may end here
            b.behind_since_ms = NO_TIME
        elif b.behind_since_ms == NO_TIME:
            b.behind_since_ms = t  # it just fell behind (e.g. applied an epoch below its own)
        else:
            # catching up partially moves the start to when the next epoch it lacks appeared
            b.behind_since_ms = max(b.behind_since_ms, self._first_seen_above(b.known_epoch))

    # --- time ---------------------------------------------------------------------------------

    def _transition(self, b: BrokerRecord, new_state: str, at: int, reason: str) -> None:
        if new_state == b.state:
            return
        old = b.state
        # an event read after the decision it reverses (it was late, or its partition behind):
        # said on the transition, so that a report draws the decision undone, not a red lane
        reverses = b.state_since_ms if b.state_since_ms != NO_TIME and at < b.state_since_ms else None
        if b.state_since_ms != NO_TIME:
            b.time_in_state_ms[STATES.index(old)] += max(0, at - b.state_since_ms)
        flap = (old == "ACTIVE" and new_state == "INACTIVE" and reason == "timeout") or (
            old == "INACTIVE" and b.inactive_reason == "timeout" and new_state == "ACTIVE")
        if flap:
            b.flap_times_ms.append(at)
        if old in ("INACTIVE", "STOPPING"):
            self.dirty = True  # leaving these ends timeout / not-returned / stuck incidents: evaluate now
        if new_state == "ACTIVE" and old in ("INACTIVE", "INITIAL") and b.behind_since_ms != NO_TIME:
            b.behind_since_ms = at
        b.state, b.state_since_ms = new_state, at
        b.inactive_reason = reason if new_state == "INACTIVE" else ""
        self.touched.add(b.broker_id)
        transition = {"cluster_id": self.cluster_id, "broker_id": b.broker_id, "from_state": old,
                      "to_state": new_state, "at_ms": at, "incarnation_id": b.incarnation_id, "reason": reason}
        if reverses is not None:
            transition["reverses_at_ms"] = reverses
        self.transitions.append(transition)

    def _catch_up(self, b: BrokerRecord, now: int) -> None:
        """Apply what silence implies up to ``now``: the controller-side heartbeat timeout."""
        timeout = self.settings.controller_heartbeat_timeout_ms
        if b.state != "INACTIVE" and b.last_heartbeat_ms != NO_TIME and now - b.last_heartbeat_ms >= timeout:
            reason = "shutdown" if b.state == "STOPPING" else "timeout"
            self._transition(b, "INACTIVE", b.last_heartbeat_ms + timeout, reason)
        if b.old_last_seen_ms != NO_TIME and now - b.old_last_seen_ms >= timeout:
            b.regression_since_ms = b.duplicate_since_ms = NO_TIME
            b.old_heartbeats = 0
        if b.duplicate_since_ms != NO_TIME and now - b.last_heartbeat_ms >= timeout:
            b.duplicate_since_ms = NO_TIME  # only one of the two processes is left
            b.old_heartbeats = 0
        window_start = now - self.settings.flapping_window_ms
        while b.flap_times_ms and b.flap_times_ms[0] <= window_start:
            b.flap_times_ms.pop(0)
        if len(b.flap_times_ms) >= self.settings.flapping_transitions:
            if b.flapping_since_ms == NO_TIME:
                b.flapping_since_ms = b.flap_times_ms[self.settings.flapping_transitions - 1]
        else:
            b.flapping_since_ms = NO_TIME

    def advance(self, now: int) -> None:
        for b in self.brokers.values():
            self._catch_up(b, now)

    # --- conditions ---------------------------------------------------------------------------

    def conditions(self, now: int) -> list[Condition]:
        s, c = self.settings, self.cluster
        found: list[Condition] = []
        silent_since = NO_TIME
        if c.last_heartbeat_ms != NO_TIME and now - c.last_heartbeat_ms >= s.controller_heartbeat_timeout_ms:
            silent_since = c.last_heartbeat_ms + s.controller_heartbeat_timeout_ms
            found.append(condition("ClusterSilent", silent_since,
                                   f"no heartbeat from any of {len(self.brokers)} brokers since {utc(c.last_heartbeat_ms)}"))
        if c.regression_since_ms != NO_TIME:
            found.append(condition("MetadataEpochRegression", c.regression_since_ms,
                                   f"epoch {c.regression_epoch} issued after {c.regression_high_epoch} "
                                   f"in controller epoch {c.controller_epoch}",
                                   controller_id=c.regression_controller_id))
        for b in self.brokers.values():
            found.extend(self._broker_conditions(b, now, silent_since))
        return found

    def _timeout_since(self, b: BrokerRecord, now: int, silent_since: int) -> int:
        """When broker b's own heartbeat-timeout incident starts, NO_TIME while ClusterSilent
        covers it: a broker that went quiet with the whole cluster is reported once, by the
        cluster, and after the cluster is back gets one timeout to return on its own."""
        s, c = self.settings, self.cluster
        slack = s.heartbeat_timeout_pending_ms + s.broker_heartbeat_interval_ms
        if silent_since != NO_TIME and b.state_since_ms >= silent_since - slack:
            return NO_TIME
        if c.silence_end_ms != NO_TIME and c.silence_start_ms - slack <= b.state_since_ms < c.silence_end_ms:
            back_by = c.silence_end_ms + s.controller_heartbeat_timeout_ms
            return back_by if now >= back_by else NO_TIME
        return b.state_since_ms

    def _broker_conditions(self, b: BrokerRecord, now: int, silent_since: int):
        s, bid = self.settings, b.broker_id
        if b.state == "INACTIVE" and b.inactive_reason == "timeout":
            since = self._timeout_since(b, now, silent_since)
            if since != NO_TIME:
                yield condition("BrokerHeartbeatTimeout", since,
                                f"last heartbeat {utc(b.last_heartbeat_ms)}, incarnation {b.incarnation_id}", broker_id=bid)
        if b.regression_since_ms != NO_TIME:
            yield condition("BrokerIncarnationRegression", b.regression_since_ms,
                            f"incarnation {b.old_incarnation_id} heartbeats after {b.incarnation_id}", broker_id=bid)
        if b.duplicate_since_ms != NO_TIME:
            yield condition("DuplicateBrokerId", b.duplicate_since_ms,
                            f"incarnations {b.old_incarnation_id} and {b.incarnation_id} both heartbeat", broker_id=bid)
        if b.state == "STOPPING" and now - b.state_since_ms >= s.stopping_grace_ms:
            yield condition("BrokerStuckStopping", b.state_since_ms + s.stopping_grace_ms,
                            f"STOPPING since {utc(b.state_since_ms)}", broker_id=bid)
        if b.state == "INACTIVE" and b.inactive_reason == "shutdown" and now - b.state_since_ms >= s.not_returned_grace_ms:
            yield condition("BrokerNotReturned", b.state_since_ms + s.not_returned_grace_ms,
                            f"controlled shutdown at {utc(b.state_since_ms)}", broker_id=bid)
        if b.flapping_since_ms != NO_TIME:
            yield condition("BrokerFlapping", b.flapping_since_ms,
                            f"{len(b.flap_times_ms)} ACTIVE/INACTIVE transitions in {s.flapping_window_ms} ms",
                            broker_id=bid)
        if self._lagging(b, now):
            yield condition("BrokerMetadataLag", b.behind_since_ms + s.metadata_lag_grace_ms,
                            f"broker at metadata epoch {b.known_epoch}, cluster at {self.cluster.newest_epoch}",
                            broker_id=bid)

    def _lagging(self, b: BrokerRecord, now: int) -> bool:
        grace = self.settings.metadata_lag_grace_ms
        if b.behind_since_ms == NO_TIME or now - b.behind_since_ms < grace:
            return False
        # A broker that is down is not serving anyone; one that still answers clients is.
        return b.state in _SERVING or (b.last_served_ms != NO_TIME and now - b.last_served_ms < grace)

    def next_deadline(self, now: int) -> int | None:
        s, c = self.settings, self.cluster
        times = []
        if c.last_heartbeat_ms != NO_TIME:
            times.append(c.last_heartbeat_ms + s.controller_heartbeat_timeout_ms)
        if c.silence_end_ms != NO_TIME:
            times.append(c.silence_end_ms + s.controller_heartbeat_timeout_ms)
        for b in self.brokers.values():
            times.extend(self._broker_deadlines(b))
        return first_after(times, now)

    def _broker_deadlines(self, b: BrokerRecord) -> list[int]:
        s = self.settings
        times = []
        if b.state != "INACTIVE" and b.last_heartbeat_ms != NO_TIME:
            times.append(b.last_heartbeat_ms + s.controller_heartbeat_timeout_ms)
        if b.state == "STOPPING":
            times.append(b.state_since_ms + s.stopping_grace_ms)
        if b.state == "INACTIVE" and b.inactive_reason == "shutdown":
            times.append(b.state_since_ms + s.not_returned_grace_ms)
        if b.old_last_seen_ms != NO_TIME and b.regression_since_ms != NO_TIME:
            times.append(b.old_last_seen_ms + s.controller_heartbeat_timeout_ms)
        if b.flap_times_ms:
            times.append(b.flap_times_ms[0] + s.flapping_window_ms)
        if b.behind_since_ms != NO_TIME:
            times.append(b.behind_since_ms + s.metadata_lag_grace_ms)
            if b.last_served_ms != NO_TIME:
                times.append(b.last_served_ms + s.metadata_lag_grace_ms)
        if b.duplicate_since_ms != NO_TIME:
            times.append(b.last_heartbeat_ms + s.controller_heartbeat_timeout_ms)
        return times

    def expire(self, now: int, has_open_alert) -> list[int]:
        return expire(self.brokers, now, self.settings.entity_expiry_ms, has_open_alert)

    def status_rows(self, broker_ids) -> list[dict]:
        newest = self.cluster.newest_epoch
        rows = []
        for bid in sorted(broker_ids):
            b = self.brokers.get(bid)
            if b is None:
                continue
            rows.append({"cluster_id": self.cluster_id, "broker_id": bid, "state": b.state,
                         "state_since_ms": b.state_since_ms, "inactive_reason": b.inactive_reason,
                         "incarnation_id": b.incarnation_id, "metadata_epoch": b.known_epoch,
                         "metadata_epoch_lag": max(0, newest - b.known_epoch) if b.known_epoch >= 0 else 0,
                         "restarts": b.restarts})
        return rows

    def take_one_shots(self) -> list[Condition]:
        taken = self.one_shots
        if taken:   # evaluated at every deadline: no new list while there is nothing to take
            self.one_shots = []
        return taken

    def take_transitions(self) -> list[dict]:
        taken = self.transitions
        if taken:
            self.transitions = []
        return taken

    def expired_summary(self, gone: list[int], now: int) -> dict | None:
        # the metrics sink drops their series (streaming.sinks.metrics.Metrics.forget_brokers): a
        # broker decommissioned, or a forged id, must not stay on /metrics for good
        return {"kind": EXPIRED_SUMMARY, "broker_ids": sorted(gone), "fleet_empty": not self.brokers, "at_ms": now}

    def report(self, now: int) -> tuple[list[dict], dict | None]:
        if not self.brokers:   # a fleet whose every broker expired reports nothing: its series went with them
            return [], None
        return self.status_rows(self.touched), {"kind": "cluster", "metadata_epoch": self.cluster.newest_epoch}
