"""A sink for people watching (the demo, `run --console`): one line per alert transition."""

from __future__ import annotations

import sys
from typing import IO

from streaming.sinks.base import OutputBatch
from streaming.times import time_of_day


class ConsoleSink:
    """One line per alert transition, for people watching (the demo, `run --console`)."""

    COLORS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}

    def __init__(self, stream: IO[str] = sys.stdout, color: bool | None = None):
        self.stream = stream
        self.color = stream.isatty() if color is None else color

    def write(self, batch: OutputBatch) -> None:
        for a in batch.pages:   # the per-client alerts a roll-up stands for are its one line
            labels = " ".join(f"{k}={v}" for k, v in sorted(a["labels"].items())
                              if k not in ("alertname", "severity"))
            sev = a["severity"]
            tag = f"{self.COLORS[sev]}{sev:<8}\033[0m" if self.color else f"{sev:<8}"
            when = time_of_day(a["event_time"])
            self.stream.write(f"{when} {a['status'].upper():<8} {tag} {a['alertname']:<28} {labels}\n"
                              f"{'':13}{a['annotations']['description']}\n")
        for d in batch.dead_letters:
            self.stream.write(f"dead letter: {d['reason']} {d['detail']} "
                              f"({d.get('kafka_topic')}/{d.get('kafka_partition')}@{d.get('kafka_offset')})\n")
        self.stream.flush()

    def close(self) -> None:
        pass
