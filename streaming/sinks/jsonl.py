"""Replay's output sink: alerts (and optionally transitions and dead letters) as JSON Lines."""

from __future__ import annotations

import json
from typing import IO

from streaming.sinks.base import OutputBatch


class JsonLinesSink:
    """Replay output: alerts (and optionally transitions / dead letters) as JSON Lines."""

    def __init__(self, alerts: IO[str], transitions: IO[str] | None = None, dead_letters: IO[str] | None = None):
        self.alerts, self.transitions, self.dead_letters = alerts, transitions, dead_letters

    def write(self, batch: OutputBatch) -> None:
        for a in batch.alerts + batch.rollups:
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
