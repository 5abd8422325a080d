"""What the key engine (streaming.engine.key_engine) asks of every kind's rules table, beyond
``apply``, ``advance``, ``conditions``, ``next_deadline`` and ``expire``. The defaults are a
table's with no fast path, no broker transitions, no one-shot alerts and nothing to report;
each kind overrides what it has, so that the engine never asks which kind it runs."""

from __future__ import annotations

from typing import Sequence

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
        """What the sinks must hear of the entities ``expire`` just forgot (their metric series go)."""
        return None

    def report(self, now: int) -> tuple[list[dict], dict | None]:
        """After a step: status rows of the entities it touched, and a summary's fields."""
        return [], None
