"""What the key engine (streaming.engine.key_engine) asks of every kind's rules table, beyond
``apply``, ``advance``, ``conditions``, ``next_deadline`` and ``expire``. The defaults are a
table's with no fast path, no broker transitions, no one-shot alerts and nothing to report;
each kind overrides what it has, so that the engine never asks which kind it runs.

A table whose entities' conditions are each the entity's own (nothing compares one with the
others) can also evaluate some of them alone (``evaluates_entities``): the engine then looks only at
those changed or due (streaming.fastpath.changed_entities) instead of every one at every
evaluation."""

from __future__ import annotations

from typing import Collection, Sequence

EXPIRED_SUMMARY = "expired"   # brokers forgotten after state.entity.expiry.ms of silence
RESET_SUMMARY = "reset"       # the summary of a key that a cluster_reset emptied


class RulesTable:
    def without_runs(self, ready: list[dict], floor: int) -> list[dict]:
        """``ready`` (in the order the engine applies it, nothing of it applied yet) less the runs
        of events this table's fast path settles at once (streaming.fastpath); ``floor`` is the
        key's horizon before the step. Only called with rules.fast.paths on."""
        return ready

    def take_one_shots(self) -> Sequence:
        """Conditions that hold once (info alerts) since the last call (read, not kept)."""
        return ()

    def take_transitions(self) -> Sequence[dict]:
        """Broker state transitions since the last call (read, not kept)."""
        return ()

    def expired_summary(self, gone: list, now: int) -> dict | None:
        """What the sinks must hear of the entities ``expire`` just forgot (their metric series go);
        ``gone`` in no particular order (``expire_entities`` finds them in another)."""
        return None

    def report(self, now: int) -> tuple[list[dict], dict | None]:
        """After a step: status rows of the entities it touched, and a summary's fields."""
        return [], None

    # --- evaluating some entities alone (streaming.fastpath.changed_entities) ------------------
    # A table that sets this implements the methods below; otherwise the engine evaluates every
    # entity each time (streaming.engine.evaluation.EveryEntity).
    evaluates_entities = False

    def take_changed(self) -> Collection:
        """The ids of the entities an event changed (or added) since the last call (read, not kept)."""
        return ()

    def advance_entities(self, entity_ids: Collection, now: int) -> None:
        """What ``advance`` does, to these entities alone (ids no longer held are skipped)."""
        raise NotImplementedError

    def conditions_of(self, entity_ids: Collection, now: int) -> dict:
        """The conditions of these entities at ``now``, by entity id, in the order ``conditions``
        lists them (an entity with none may be left out)."""
        raise NotImplementedError

    def entity_deadlines(self, entity_id) -> list[int]:
        """When the entity's conditions may change without an event (what ``next_deadline`` takes
        the first of); none for an id no longer held."""
        raise NotImplementedError

    def expire_entities(self, entity_ids: Collection, now: int, has_open_alert) -> list:
        """What ``expire`` does, among these entities alone."""
        raise NotImplementedError
