"""The first of the sinks: the per-client alerts of a micro-batch rolled up (streaming.rules.rollup).

It marks the batch's per-client records that a roll-up stands for and adds the roll-up records
(``OutputBatch.rollups``): the sinks after it write both to the alerts topic and deliver
``OutputBatch.pages`` to Alertmanager and the console."""

from __future__ import annotations

from typing import Iterable

from streaming.rules.rollup import ClientRollup, RollupPolicy
from streaming.sinks.base import OutputBatch


class RollupStage:
    def __init__(self, policy: RollupPolicy):
        self.rollup = ClientRollup(policy)

    def seed(self, latest: Iterable[dict]) -> list[dict]:
        """After a restart, from the alerts topic's latest records: the state, and what Alertmanager
        is to be seeded with."""
        return self.rollup.seed(latest)

    def write(self, batch: OutputBatch) -> None:
        batch.alerts, batch.rollups = self.rollup.step(batch.alerts)

    def close(self) -> None:
        pass
