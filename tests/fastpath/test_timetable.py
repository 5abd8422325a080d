"""streaming.fastpath.timetable: many entities' next times in one heap, each entry no later than its
entity's next time. Used as the key engine uses it (streaming.fastpath.changed_entities): at
evaluations at rising times, take the entities due, add again those due or changed, ask for the
first time after; against the same answers computed over every entity."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.fastpath.timetable import Timetable
from tests.support.event_strategies import examples

ENTITIES = range(6)


def test_an_entry_behind_its_entity_moves_when_it_reaches_the_top():
    """Why: a client heard from again is forgotten later; its entry is not searched for in the
    heap at each event, it moves when it comes up (and the next entity's time is the answer)."""
    expiry = {"a": 100, "b": 150}
    table = Timetable(lambda e, now: expiry.get(e), passed=False)
    for e in expiry:
        table.add(e, 0)
    expiry["a"] = 300                         # heard from: no add needed to move it later
    assert table.first_after(0) == 150
    assert table.take_due(160) == {"b"}
    assert table.first_after(160) == 300


def test_a_time_that_came_earlier_needs_an_add():
    times = {"a": [500]}
    table = Timetable(lambda e, now: min((t for t in times[e] if t > now), default=None))
    table.add("a", 0)
    times["a"] = [200, 500]                   # a new deadline, earlier than the one scheduled
    table.add("a", 0)
    assert table.first_after(0) == 200
    assert table.take_due(200) == {"a"}
    table.add("a", 200)                       # the caller adds an entity it took again
    assert table.first_after(200) == 500


@st.composite
def histories(draw):
    """Evaluations at rising times; between them some entities change: a time added anywhere in
    the future, or a time dropped (silently: a time that moves later needs no add)."""
    steps, now = [], 0
    for _ in range(draw(st.integers(1, 30))):
        now += draw(st.sampled_from([0, 1, 5, 20, 60]))
        changes = draw(st.lists(st.tuples(st.sampled_from(ENTITIES), st.booleans(), st.integers(1, 80)), max_size=4))
        steps.append((now, changes))
    return steps


@settings(max_examples=examples(300), deadline=None)
@given(history=histories())
def test_deadlines_as_the_engine_uses_them(history):
    times = {e: set() for e in ENTITIES}
    table = Timetable(lambda e, now: min((t for t in times[e] if t > now), default=None))
    before = -1
    for now, changes in history:
        due = table.take_due(now)
        assert due >= {e for e in ENTITIES if any(before < t <= now for t in times[e])}
        for e in due:
            times[e] = {t for t in times[e] if t > now}   # evaluated: what was due is handled
            table.add(e, now)
        for e, earlier_allowed, ahead in changes:
            if earlier_allowed:
                times[e].add(now + ahead)
                table.add(e, now)                          # changed: added again
            elif times[e]:
                times[e].discard(min(times[e]))            # moves later: no add
        expected = min((t for e in ENTITIES for t in times[e] if t > now), default=None)
        assert table.first_after(now) == expected
        before = now
