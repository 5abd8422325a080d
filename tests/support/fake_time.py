"""A clock and sleep a test moves by hand."""

from __future__ import annotations


class FakeTime:
    """A clock that only moves when the code under test "sleeps" or an attempt takes time."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
