"""foreachBatch: parse the processor's output rows once and hand them to pluggable sinks
(quixstreams style: each sink has ``write(batch)`` and ``close()``)."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Protocol


@dataclass
class OutputBatch:
    batch_id: int
    alerts: list[dict] = field(default_factory=list)
    transitions: list[dict] = field(default_factory=list)
    broker_status: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    dead_letters: list[dict] = field(default_factory=list)  # payload + raw_key/raw_value bytes

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

    def __call__(self, df, batch_id: int) -> None:
        self.idle.clear()
        try:
            batch = OutputBatch.from_rows(batch_id, df.collect())
            for sink in self.sinks:
                sink.write(batch)
        finally:
            self.idle.set()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class MemorySink:
    """Keeps everything; for tests and the demo's final summary."""

    def __init__(self):
        self.batches: list[OutputBatch] = []

    def write(self, batch: OutputBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        pass

    def all(self, attr: str) -> list:
        return [item for b in self.batches for item in getattr(b, attr)]


class JsonLinesSink:
    """Replay output: alerts (and optionally transitions / dead letters) as JSON Lines."""

    def __init__(self, alerts: IO[str], transitions: IO[str] | None = None, dead_letters: IO[str] | None = None):
        self.alerts, self.transitions, self.dead_letters = alerts, transitions, dead_letters

    def write(self, batch: OutputBatch) -> None:
        for a in batch.alerts:
            self.alerts.write(json.dumps(a, sort_keys=True) + "\n")
        if self.transitions is not None:
            for t in batch.transitions:
                self.transitions.write(json.dumps(t, sort_keys=True) + "\n")
        if self.dead_letters is not None:
            for d in batch.dead_letters:
                safe = {k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v) for k, v in d.items()}
                self.dead_letters.write(json.dumps(safe, sort_keys=True) + "\n")
        for stream in (self.alerts, self.transitions, self.dead_letters):
            if stream is not None:
                stream.flush()

    def close(self) -> None:
        pass


def _ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


class ConsoleSink:
    """One line per alert transition, for people watching (the demo, `run --console`)."""

    COLORS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}

    def __init__(self, stream: IO[str] = sys.stdout, color: bool | None = None):
        self.stream = stream
        self.color = stream.isatty() if color is None else color

    def write(self, batch: OutputBatch) -> None:
        for a in batch.alerts:
            labels = " ".join(f"{k}={v}" for k, v in sorted(a["labels"].items())
                              if k not in ("alertname", "severity"))
            sev = a["severity"]
            tag = f"{self.COLORS[sev]}{sev:<8}\033[0m" if self.color else f"{sev:<8}"
            when = _ts(a["event_time"])
            self.stream.write(f"{when} {a['status'].upper():<8} {tag} {a['alertname']:<28} {labels}\n"
                              f"{'':13}{a['annotations']['description']}\n")
        for d in batch.dead_letters:
            self.stream.write(f"dead letter: {d['reason']} {d['detail']} "
                              f"({d.get('kafka_topic')}/{d.get('kafka_partition')}@{d.get('kafka_offset')})\n")
        self.stream.flush()

    def close(self) -> None:
        pass
