"""One evaluation of a state key at a moment: its table's conditions, the alert tracker's diff, the
entities old enough to forget; and when the key must be evaluated next.

``EveryEntity`` is the plain way: every entity and every open alert, each time. A table whose
entities' conditions are each the entity's own is evaluated by
streaming.fastpath.changed_entities instead, when rules.fast.paths is on: the entities changed or
due alone, with the same result.
"""

from __future__ import annotations

from operator import attrgetter

from streaming.config import RuleSettings
from streaming.engine.keys import KINDS
from streaming.rules.lifecycle import AlertTracker
from streaming.rules.records import NO_TIME, first_after


class EveryEntity:
    """Every entity's conditions and every open alert, at every evaluation (the plain path)."""

    def __init__(self, kind: str, table, tracker: AlertTracker, settings: RuleSettings):
        self.kind, self.table, self.tracker, self.settings = kind, table, tracker, settings
        # the alert label that names an entity: one with an open alert is not forgotten (without a
        # label, any open alert of the key keeps every entity)
        self.label = KINDS[kind].entity_label

    def run(self, now: int) -> tuple[list[dict], list]:
        """Evaluate at ``now``: the alert records this emits, and the ids of the entities it forgot."""
        conditions = self._conditions(now)
        one_shots = self.table.take_one_shots()
        if one_shots:
            conditions = one_shots + conditions
        records = self._update(conditions, now)
        return records, self._expire(now)

    def _conditions(self, now: int) -> list:
        self.table.take_changed()   # what changed since the last evaluation: every entity is looked at
        self.table.advance(now)
        return self.table.conditions(now)

    def _update(self, conditions: list, now: int) -> list[dict]:
        return self.tracker.update(conditions, now)

    def _expire(self, now: int) -> list:
        label, tracker = self.label, self.tracker
        open_entities = {dict(a.labels).get(label) for a in tracker.open.values()} if label else set()
        return self.table.expire(now, lambda entity: str(entity) in open_entities or not label and bool(tracker.open))

    def deadline(self, now: int) -> int | None:
        """The next time after ``now`` the key must be evaluated at, without an event (None: none)."""
        candidates = [d for d in (self.table.next_deadline(now), self.tracker.next_deadline()) if d is not None]
        expiry = self._expiry_deadline(now)
        if expiry is not None:
            candidates.append(expiry)
        future = [d for d in candidates if d > now]
        return min(future) if future else None

    def _expiry_deadline(self, now: int) -> int | None:
        """The next time an entity becomes old enough to forget. Strictly after ``now``: one whose
        time has passed but that an open alert keeps must not hide the expiry of the others."""
        expiry = self.settings.entity_expiry_ms
        # each table keeps its entities in an attribute named like its kind (brokers, clients, ...)
        entities = getattr(self.table, self.kind).values()
        # Nearly always every entity was heard from within the expiry: the oldest one's time, found
        # in C, is the answer (a client shard's step asks three times, over thousands of clients).
        oldest = min(map(_last_event, entities), default=NO_TIME)
        if oldest != NO_TIME and oldest + expiry > now:
            return oldest + expiry
        return first_after([e.last_event_ms + expiry for e in entities if e.last_event_ms != NO_TIME], now)


_last_event = attrgetter("last_event_ms")
