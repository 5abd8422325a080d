"""Kafka consumers kept between the range reads of one process (a Spark Python worker).

Spark reuses its Python workers across tasks and micro-batches, and a new consumer costs tens of
milliseconds before its first record (connecting, API versions, the first fetch): with one read
task per Kafka partition and micro-batch, that was ~0.3 s of a 250,000-event batch on 2 cores
(bench/RESULTS.md). A read takes an idle consumer with the same settings and gives it back
unassigned (it stops fetching); one whose read failed is closed instead. Idle consumers are closed
after ``idle_s`` seconds or when more than ``max_idle`` wait, and at exit: a client that outlives
its broker only logs refused connections.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Callable, Hashable

IDLE_S = 30.0
MAX_IDLE = 4


class ConsumerPool:
    def __init__(self, idle_s: float = IDLE_S, max_idle: int = MAX_IDLE,
                 clock: Callable[[], float] = time.monotonic):
        self._idle: list[tuple[Hashable, float, object, object]] = []  # (key, since, consumer, errors)
        self._idle_s, self._max_idle, self._clock = idle_s, max_idle, clock
        self._lock = threading.Lock()

    def take(self, key: Hashable) -> tuple[object, object] | None:
        """An idle consumer made with the settings ``key`` names, and its error record."""
        with self._lock:
            self._close_expired()
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == key:
                    _, _, consumer, errors = self._idle.pop(i)
                    return consumer, errors
        return None

    def give_back(self, key: Hashable, consumer, errors) -> None:
        with self._lock:
            self._idle.append((key, self._clock(), consumer, errors))
            self._close_expired()
            while len(self._idle) > self._max_idle:
                _close(self._idle.pop(0)[2])

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, _, consumer, _ in idle:
            _close(consumer)

    def __len__(self) -> int:
        return len(self._idle)

    def _close_expired(self) -> None:
        now = self._clock()
        keep = []
        for entry in self._idle:
            if now - entry[1] >= self._idle_s:
                _close(entry[2])
            else:
                keep.append(entry)
        self._idle = keep


def _close(consumer) -> None:
    try:
        consumer.close()
    except Exception:  # already closed, or its broker is gone: nothing left to release
        pass


POOL = ConsumerPool()
atexit.register(POOL.close_all)
