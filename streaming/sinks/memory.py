"""A sink that keeps everything: for tests and the demo's final summary."""

from __future__ import annotations

from streaming.sinks.base import OutputBatch


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
