"""An evaluation of the entities that changed since the key's last one, or whose time has come,
instead of every entity (streaming.engine.evaluation.EveryEntity), for a table whose entities'
conditions are each the entity's own (RulesTable.evaluates_entities: clients, commits).

Why: the engine evaluates a key after every event that starts or ends a condition. During an
incident of thousands of clients, listing every client's conditions and diffing every open alert
made each such event cost the incident's size, and the incident quadratic (bench/RESULTS.md,
Incident scale).

Why the result is the same: an entity's conditions depend on its record and on the time, and on
the time only at its deadlines (RulesTable.entity_deadlines; and its pending alerts' firing time,
for the tracker). An entity not changed since its last evaluation, none of whose deadlines came
since, holds the same conditions: its open alerts stay as they are, and the full evaluation would
emit nothing for it. The others are evaluated as the full evaluation does: the table lists their
conditions in the order it lists all of them, and the tracker resolves their alerts in its own
order. Which entities are old enough to forget is checked the same way, for those changed, due or
whose expiry came.

The first evaluation of a key (a new engine, one loaded from the state store, one whose table a
reset replaced) looks at every entity and builds what the later ones need: each entity's open
alerts and its times. tests/fastpath/test_changed_entities.py compares every output with the
plain evaluation (rules.fast.paths off).
"""

from __future__ import annotations

from typing import Hashable

from streaming.engine.evaluation import EveryEntity
from streaming.fastpath.timetable import Timetable
from streaming.rules.catalog import RULES
from streaming.rules.records import NO_TIME, first_after, silent_for


class ChangedEntities(EveryEntity):
    """The entities changed or due alone: the same records, deadlines and state as EveryEntity."""

    def __init__(self, kind, table, tracker, settings):
        super().__init__(kind, table, tracker, settings)
        self.alerts_of: dict[Hashable, list[tuple]] = {}   # each entity's open alerts (identities)
        # when an entity's conditions may change without an event; when it becomes old enough to forget
        self.deadlines = Timetable(self._next_deadline)
        self.expiries = Timetable(self._expiry, passed=False)
        self.unevaluated: set = set()   # changed since their last evaluation
        # old enough to forget, but kept by an open alert: looked at again when it may have closed
        self.kept: set = set()
        self.scope: set = set()          # the entities the running evaluation looks at
        self.due: set = set()            # those of them whose deadline came (off the timetable)
        self.found: dict = {}            # and their conditions
        self.indexed = False             # the first evaluation looks at every entity

    def run(self, now: int) -> tuple[list[dict], list]:
        result = super().run(now)
        self.indexed = True
        return result

    def _conditions(self, now: int) -> list:
        table = self.table
        if self.indexed:
            self._take_changed(now)
            self.due = self.deadlines.take_due(now)
            self.scope = self.unevaluated | self.due
        else:
            table.take_changed()
            self.scope = self.due = set(self._entities())
        self.unevaluated = set()
        table.advance_entities(self.scope, now)
        self.found = table.conditions_of(self.scope, now)
        return [c for conditions in self.found.values() for c in conditions]

    def _update(self, conditions: list, now: int) -> list[dict]:
        alerts_of, tracker = self.alerts_of, self.tracker
        had = self.scope & alerts_of.keys()
        among = [i for e in had for i in alerts_of[e]] if self.indexed else None
        records = tracker.update(conditions, now, among)
        # after the diff an entity's open alerts are its conditions'
        for entity in had.difference(self.found):
            del alerts_of[entity]
        for entity, conditions_of_entity in self.found.items():
            held = [c.identity for c in conditions_of_entity if not RULES[c.alertname].one_shot]
            if held:
                alerts_of[entity] = held
            else:
                alerts_of.pop(entity, None)
            if any(tracker.fire_time(i) is not None for i in held):
                self.deadlines.add(entity, now)   # a pending alert's firing time
        for entity in self.due:
            self.deadlines.add(entity, now)       # its next deadline
        return records

    def _expire(self, now: int) -> list:
        if self.indexed:
            candidates = self.expiries.take_due(now) | (self.kept & self.scope)
        else:
            candidates = self.scope   # every entity
        if self.label is None and not self.tracker.open:
            candidates = candidates | self.kept   # the key's last open alert closed: the old entities go
        gone = self.table.expire_entities(candidates, now, self._has_open_alert)
        entities, expiry = self._entities(), self.settings.entity_expiry_ms
        for entity in candidates:
            record = entities.get(entity)
            if record is not None and silent_for(record, expiry, now):
                self.kept.add(entity)
            else:
                self.kept.discard(entity)
                if record is not None and not self.indexed:
                    self.expiries.add(entity, now)
        return gone

    def _has_open_alert(self, entity) -> bool:
        return entity in self.alerts_of if self.label else bool(self.tracker.open)

    def deadline(self, now: int) -> int | None:
        if not self.indexed:
            return super().deadline(now)
        self._take_changed(now)
        due = [t for t in (self.deadlines.first_after(now), self.expiries.first_after(now)) if t is not None]
        return min(due, default=None)

    def _take_changed(self, now: int) -> None:
        """The entities an event changed since the last look: evaluated next time; their times move."""
        for entity in self.table.take_changed():
            self.unevaluated.add(entity)
            # a deadline at or before ``now`` is passed (evaluated, or the entity is evaluated
            # next time anyway); an expiry is not: the entity may have to be forgotten
            self.deadlines.add(entity, now)
            self.expiries.add(entity, now)

    def _entities(self) -> dict:
        return getattr(self.table, self.kind)

    def _next_deadline(self, entity, now: int) -> int | None:
        """The entity's first deadline after ``now``, or its pending alerts' first firing time."""
        times = self.table.entity_deadlines(entity)
        alerts = self.alerts_of.get(entity)
        if alerts:
            times = times + [t for t in map(self.tracker.fire_time, alerts) if t is not None]
        return first_after(times, now) if times else None

    def _expiry(self, entity, now: int) -> int | None:
        """When the entity becomes old enough to forget (None: no longer held)."""
        record = self._entities().get(entity)
        if record is None or record.last_event_ms == NO_TIME:
            return None
        return record.last_event_ms + self.settings.entity_expiry_ms
