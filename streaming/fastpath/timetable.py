"""Many entities' next times in one heap (streaming.fastpath.changed_entities): the first one after a
moment, and the entities whose time has come, without a pass over every entity.

An entity's times move as events change it, mostly later (a client heard from again is forgotten
later, a stale incident heard again ends later). Each entity has one entry, a time no later than its
next one: an entity that changed is added again (``add``), which moves its entry only if its next
time came earlier; an entry found behind its entity's next time when it reaches the top of the heap
is moved there and then. So a busy entity costs a look at its times, not a heap entry per change.
"""

from __future__ import annotations

import heapq
from typing import Callable, Hashable


class Timetable:
    def __init__(self, next_time: Callable[[Hashable, int], int | None], passed: bool = True):
        """``next_time(entity, now)``: the entity's next time (None: none). ``passed``: whether a
        time at or before the moment the entity is added or looked at has passed (the caller
        handled it: a deadline; ``next_time`` then gives one after ``now``), or is still due (an
        expiry: its entity may have to be forgotten)."""
        self._next = next_time
        self._passed = passed
        self._heap: list[tuple[int, Hashable]] = []
        self._entry: dict[Hashable, int] = {}   # each entity's entry: no later than its next time
        self._reached: set = set()              # entities whose time first_after passed over

    def add(self, entity: Hashable, now: int) -> None:
        """The entity may have changed at ``now``: an entry for its next time, if it came earlier."""
        t = self._next(entity, now)
        if t is not None and t < self._entry.get(entity, t + 1):
            self._entry[entity] = t
            heapq.heappush(self._heap, (t, entity))

    def first_after(self, now: int) -> int | None:
        """The first time after ``now``. Entities with a time due at ``now`` are kept for the next
        ``take_due``."""
        heap = self._heap
        while heap:
            t, entity = heap[0]
            if self._entry.get(entity) != t:
                heapq.heappop(heap)   # an earlier entry replaced it
            elif t <= now and self._passed:
                self._reached.add(self._pop())
            elif (actual := self._next(entity, now)) != t:
                self._move(entity, actual)
            elif t > now:
                return t
            else:
                self._reached.add(self._pop())
        return None

    def take_due(self, now: int) -> set:
        """The entities with a time due at ``now`` (for a deadline: at or before ``now``, or an entry
        that has not caught up with a change yet), taken off the timetable: add them again."""
        due, self._reached = self._reached, set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, entity = heap[0]
            if self._entry.get(entity) != t:
                heapq.heappop(heap)
            elif not self._passed and (actual := self._next(entity, now)) != t:
                self._move(entity, actual)   # heard from since: not old enough yet
            else:
                due.add(self._pop())
        return due

    def _move(self, entity: Hashable, t: int | None) -> None:
        """The top entry, behind its entity's next time ``t``, moves there (None: it has none)."""
        if t is None:
            heapq.heappop(self._heap)
            del self._entry[entity]
        else:
            self._entry[entity] = t
            heapq.heapreplace(self._heap, (t, entity))

    def _pop(self) -> Hashable:
        _, entity = heapq.heappop(self._heap)
        del self._entry[entity]
        return entity
