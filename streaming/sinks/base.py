"""foreachBatch: parse the processor's output rows once and hand them to pluggable sinks
(quixstreams style: each sink has ``write(batch)`` and ``close()``; one file per sink in this
package: kafka, alertmanager, metrics, status, console, jsonl, memory). The roll-up of per-client
alerts (rollup_stage) is a sink too, the first one: it completes the batch for the ones after it."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Protocol

from streaming.rules.rollup import rolled_up


@dataclass
class OutputBatch:
    batch_id: int
    alerts: list[dict] = field(default_factory=list)
    transitions: list[dict] = field(default_factory=list)
    broker_status: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    dead_letters: list[dict] = field(default_factory=list)  # payload + raw_key/raw_value bytes
    # roll-ups of the per-client alerts, made on the driver (streaming.sinks.rollup_stage)
    rollups: list[dict] = field(default_factory=list)

    @property
    def pages(self) -> list[dict]:
        """The alerts to deliver to people: every alert but the per-client ones a roll-up stands
        for, then the roll-ups."""
        return [a for a in self.alerts if not rolled_up(a)] + self.rollups

    @property
    def late_events(self) -> int:
        """Events that arrived after their key's horizon had passed them (applied late)."""
        return sum(s.get("events", 0) for s in self.summaries if s.get("kind") == "late")

    @classmethod
    def from_rows(cls, batch_id: int, rows) -> "OutputBatch":
        batch = cls(batch_id)
        for row in rows:
            kind, payload = row["kind"], json.loads(row["payload"])
            if kind == "alert":
                batch.alerts.append(payload)
            elif kind == "transition":
                batch.transitions.append(payload)
            elif kind == "broker_status":
                batch.broker_status.extend(payload)  # one row per brokers key: state_schema.OUTPUT_SCHEMA
            elif kind == "summary":
                batch.summaries.append(payload)
            elif kind == "dead_letter":
                batch.dead_letters.append({**payload, "cluster_id": row["cluster_id"],
                                           "raw_key": _bytes(row["raw_key"]), "raw_value": _bytes(row["raw_value"])})
        # Deterministic order inside a batch (keys are processed in any order by Spark).
        batch.alerts.sort(key=lambda a: (a["event_time"], a["alertname"], a["fingerprint"], a["status"]))
        # a reversal (reverses_at_ms) stays after the decision it reverses, though its time is earlier
        batch.transitions.sort(key=lambda t: (t.get("reverses_at_ms", t["at_ms"]), t["cluster_id"], t["broker_id"]))
        return batch


def _bytes(value):
    return bytes(value) if value is not None else None


class Sink(Protocol):
    def write(self, batch: OutputBatch) -> None: ...

    def close(self) -> None: ...


class Dispatcher:
    """The foreachBatch callable. Sinks run in order; the first failure fails the batch, so Spark
    retries it from the checkpoint (sinks must tolerate a replayed batch: stable keys / ids)."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        # cleared while a micro-batch runs (its whole computation happens inside df.collect()):
        # a stop waits for it (streaming.commands.run)
        self.idle = threading.Event()
        self.idle.set()
        self._after_batch: list = []   # one-shot callbacks for the end of the next micro-batch

    def __call__(self, df, batch_id: int) -> None:
        self.idle.clear()
        try:
            batch = OutputBatch.from_rows(batch_id, df.collect())
            for sink in self.sinks:
                sink.write(batch)
        finally:
            self.idle.set()
            callbacks, self._after_batch = self._after_batch, []
            for callback in callbacks:
                callback()

    def after_batch(self, callback) -> None:
        """Call ``callback`` once, when the next micro-batch (or the one in flight) has left its sinks."""
        self._after_batch.append(callback)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
