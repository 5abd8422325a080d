"""One state key's detection step, pure: buffered + new events, a time horizon -> alert records,
broker transitions, status rows, the next wake-up. Spark's processor and the single-process
engine both call this; neither contains rule logic.

Events are applied strictly in event-time order up to the horizon (everything before it has
arrived: the watermark's promise), and conditions are evaluated at every deadline on the way,
so the result does not depend on how events were cut into micro-batches. Events past the
horizon wait in the key's buffer for a later step.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from streaming.config import RuleSettings
from streaming.engine.evaluation import EveryEntity
from streaming.engine.keys import KINDS, OWNER_KIND
from streaming.events import CLUSTER_RESET
from streaming.fastpath.changed_entities import ChangedEntities
from streaming.rules.lifecycle import AlertTracker
from streaming.rules.records import NO_TIME
from streaming.rules.table import RESET_SUMMARY
from streaming.rules.validity import invalid_reason
from streaming.times import utc_text


def _say_why_reversed(records: list[dict], transitions: list[dict]) -> None:
    """A heartbeat timeout resolved because an event read late reversed it (a transition with
    ``reverses_at_ms``) says so: the broker was not silent, the page was the job's late reading."""
    reversed_by = {str(t["broker_id"]): t for t in transitions if "reverses_at_ms" in t and t["to_state"] == "ACTIVE"}
    for record in records:
        t = reversed_by.get(record["labels"].get("broker_id"))
        if t is not None and record["status"] == "resolved" and record["alertname"] == "BrokerHeartbeatTimeout":
            record["annotations"]["description"] = (
                f"reversed: a heartbeat of {utc_text(t['at_ms'])} was read after the timeout was decided at "
                f"{utc_text(t['reverses_at_ms'])} (late, or its partition of the events topic was behind): "
                f"broker {t['broker_id']} was not silent")


@dataclass
class StepResult:
    alerts: list[dict] = field(default_factory=list)
    transitions: list[dict] = field(default_factory=list)
    status: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    invalid: list[tuple[dict, str]] = field(default_factory=list)
    # plausible alone, but leaping past what the key holds (streaming.spark.validity): refused
    refused: list[tuple[dict, str]] = field(default_factory=list)
    # a new entity of a cluster whose state is full (rules.state.max.*.per.cluster): refused
    capped: list[tuple[dict, str]] = field(default_factory=list)
    touched: set = field(default_factory=set)  # ids of the entities the step changed or added
    deadline: int | None = None
    late: int = 0
    # entities the step forgot (expired, or a reset's): none, and the table kept every entity in
    # its place, new ones last (streaming.spark.key_steps writes only the touched ones again)
    forgot: int = 0


@dataclass
class KeyEngine:
    """The rules state of one (cluster, kind, shard) key plus its alert lifecycle and buffer."""

    kind: str
    cluster_id: str
    shard: int
    settings: RuleSettings
    table: object
    tracker: AlertTracker
    buffer: list[dict] = field(default_factory=list)
    horizon: int = NO_TIME  # every event at or before this time has been applied
    # how the table and tracker are evaluated (streaming.engine.evaluation): made for them when
    # first needed, again when either is replaced (a reset, a key loaded from the state store)
    evaluation: EveryEntity | None = field(default=None, repr=False, compare=False)

    @classmethod
    def new(cls, kind: str, cluster_id: str, shard: int, settings: RuleSettings) -> "KeyEngine":
        return cls(kind, cluster_id, shard, settings, KINDS[kind].table(cluster_id, settings),
                   AlertTracker(cluster_id, settings))

    def step(self, new_events: list[dict], horizon: int, applied: int | None = None) -> StepResult:
        """``applied``: None, and the engine runs the passes that skip repeated serves and apply
        quiet responses on the events' dicts; a count, and the caller ran them on the events'
        columns before building the dicts (streaming.fastpath.column_passes) and applied that many events
        (the brokers key's pass applies none: 0)."""
        out = StepResult()
        horizon = max(horizon, self.horizon)
        pending = self.buffer + new_events
        pending.sort(key=_event_time)
        ready_count = bisect_right(pending, horizon, key=_event_time)
        ready, self.buffer = pending[:ready_count], pending[ready_count:]
        floor = self.horizon  # evaluations never go back in time
        # events before `floor` arrived after we evaluated their time: applied now, and counted
        out.late = bisect_left(ready, floor, key=_event_time)
        # the passes read the table's state before the step: a reset within it would change that
        if applied is None and self.settings.fast_paths_on and not any(ev["event_type"] == CLUSTER_RESET
                                                                       for ev in ready):
            ready = self.table.without_runs(ready, floor)
        deadline = self._deadline(floor)
        late_changes = False  # late events changed state: evaluate once at `floor`, after the run
        expiry = self.settings.entity_expiry_ms
        for ev in ready:
            t = ev["event_time"]
            if late_changes and t >= floor:
                self._evaluate(floor, out)
                late_changes = False
                deadline = self._deadline(floor)
            if deadline is not None and deadline < t:
                # The cached deadline may be stale (the entity that set it has been heard from
                # since): recompute before paying for an evaluation of every entity.
                deadline = self._deadline(floor)
            while deadline is not None and deadline < t:
                self._evaluate(deadline, out)
                floor = deadline
                deadline = self._deadline(deadline)
            reason = invalid_reason(ev)
            if reason:
                if OWNER_KIND.get(ev["event_type"]) == self.kind:
                    out.invalid.append((ev, reason))
                continue
            if ev["event_type"] == CLUSTER_RESET:
                floor = t = max(t, floor)
                self._forget(t, out)
                deadline = self._deadline(floor)
                continue
            full = self.table.over_capacity(ev)
            if full:
                if OWNER_KIND.get(ev["event_type"]) == self.kind:
                    out.capped.append((ev, full))
                continue
            leap = self.table.implausible(ev)
            if leap:
                if OWNER_KIND.get(ev["event_type"]) == self.kind:
                    out.refused.append((ev, leap))
                continue
            introduced = self.table.apply(ev)
            # the entity just heard from is forgotten at t + expiry unless heard from again
            for due in (introduced, t + expiry):
                if due is not None and due > t and (deadline is None or due < deadline):
                    deadline = due
            if self.table.dirty:
                if t < floor:
                    # Every late event would be evaluated at the same time, `floor`; a run of them
                    # (a lagging partition) would re-evaluate every entity once per event.
                    late_changes = True
                    continue
                floor = t
                self._evaluate(floor, out)
                deadline = self._deadline(floor)
        if late_changes:
            self._evaluate(floor, out)
        deadline = self._deadline(floor)
        while deadline is not None and deadline <= horizon:
            self._evaluate(deadline, out)
            deadline = self._deadline(deadline)
        if self.horizon == NO_TIME or horizon > self.horizon or ready_count or applied:
            self._evaluate(horizon, out)
        self.horizon = horizon
        out.deadline = self._deadline(horizon)
        if self.buffer:
            first = self.buffer[0]["event_time"]
            out.deadline = first if out.deadline is None else min(out.deadline, first)
        self._report(out, horizon)
        return out

    def _forget(self, now: int, out: StepResult) -> None:
        """A cluster_reset (epochwatch reset-cluster): an operator says the key's state is wrong
        (e.g. what forged events left). Everything known is dropped; the open alerts resolve now,
        as the rules no longer find their conditions; later events start afresh."""
        out.forgot += len(getattr(self.table, self.kind))
        self.table = KINDS[self.kind].table(self.cluster_id, self.settings)
        self._evaluate(now, out)
        # the metrics sink drops the cluster's series (streaming.sinks.metrics.Metrics.forget_cluster)
        out.summaries.append({"cluster_id": self.cluster_id, "kind": RESET_SUMMARY, "key_kind": self.kind,
                              "shard": self.shard, "at_ms": now})

    def _evaluate(self, now: int, out: StepResult) -> None:
        table = self.table
        records, gone = self._evaluation().run(now)
        out.forgot += len(gone)
        # after the run: what its own catch-up changed (a broker timed out at `now`) is in these
        # conditions already, and must not make the next event, whichever it is, evaluate again
        table.dirty = False
        transitions = table.take_transitions()
        if transitions:
            _say_why_reversed(records, transitions)
            out.transitions.extend(transitions)
        out.alerts.extend(records)
        summary = table.expired_summary(gone, now) if gone else None
        if summary is not None:
            out.summaries.append({"cluster_id": self.cluster_id, **summary})

    def _deadline(self, now: int) -> int | None:
        """The next time to evaluate at without an event. Always asked at the time of the last
        evaluation (``floor``): what has passed by then is evaluated (ChangedEntities relies on it)."""
        return self._evaluation().deadline(now)

    def _evaluation(self) -> EveryEntity:
        """The entities changed or due alone where the table allows it (a fast path), else every one."""
        evaluation = self.evaluation
        if evaluation is None or evaluation.table is not self.table or evaluation.tracker is not self.tracker:
            how = ChangedEntities if self.settings.fast_paths_on and self.table.evaluates_entities else EveryEntity
            evaluation = self.evaluation = how(self.kind, self.table, self.tracker, self.settings)
        return evaluation

    def _report(self, out: StepResult, now: int) -> None:
        table = self.table
        # a key that forgot everything in this step and learned nothing since reports nothing:
        # its summary would only bring back the series the reset dropped
        forgotten = (any(s["kind"] == RESET_SUMMARY for s in out.summaries)
                     and not getattr(table, self.kind))
        if not forgotten:
            status, summary = table.report(now)
            out.status.extend(status)
            if summary is not None:
                out.summaries.append({"cluster_id": self.cluster_id, "shard": self.shard, **summary})
        out.touched, table.touched = table.touched, set()
        if out.late:
            out.summaries.append({"cluster_id": self.cluster_id, "kind": "late", "key_kind": self.kind,
                                  "shard": self.shard, "events": out.late})


def _event_time(ev: dict) -> int:
    return ev["event_time"]
