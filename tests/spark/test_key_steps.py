"""streaming.spark.key_steps without Spark: a key's step with its engine kept and the same step with
the engine rebuilt from what the previous step stored give the same result, so keeping engines
(in a Python worker or an engine host) can never change what the job detects."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

import pytest

from streaming.config import RuleSettings
from streaming.engine.keys import COMMITS
from streaming.rules.records import NO_TIME
from streaming.spark.json_tables import replay
from streaming.spark.key_steps import WRITE_TO_READ_MS, EngineCache, KeySteps, StepOutput, StepRequest, StoredState
from streaming.spark.routing import routes, shard_of
from streaming.tools.simulate import run_scenario
from tests.support.builders import commit, hb, response
from tests.support.key_feed import empty_state, packed, request

BATCH = 150  # events per micro-batch: several steps per key, events waiting in the buffer


def stored_after(out: StepOutput, before: StoredState | None) -> StoredState:
    """What the state store holds after the processor wrote ``out`` (None: value unchanged): a
    copy, as the store serializes what it is given (a kept engine goes on changing its lists)."""
    alerts = out.alerts if out.alerts is not None else (before.alerts if before else [])
    buffer = [chunk for _, chunk in out.buffer] if out.buffer is not None else (before.buffer if before else [])
    entities, log = out.entities, []
    if out.table is not None:  # a JSON table's base and log (streaming.spark.json_tables)
        entities, log = (before.entities, list(before.log)) if before else (None, [])
        if out.table.append is not None:
            log.append(out.table.append)
        elif out.table.rewrite:
            entities, log = out.table.base, [] if out.table.clear_log else log
    return pickle.loads(pickle.dumps(StoredState(entities, alerts, buffer, log)))


@pytest.mark.parametrize("name", ["rolling_restart", "zombie_incarnation", "wrong_cluster_rebootstrap",
                                  "connection_storm", "commit_epoch_regression"])
def test_a_kept_engine_steps_exactly_as_one_rebuilt_from_the_store(name):
    """Why: the engine host answers from the engine it kept whenever the stored generation matches;
    if the stored values rebuilt a different engine (a field not stored, an alert or a waiting
    event lost), a job would detect differently after every worker swap, restart or retry. Every
    key of the scenario, step by step, with both."""
    result = run_scenario(name)
    rules = result.truth.rule_settings()
    keys = sorted({(ev["cluster_id"], kind, shard) for ev in result.events
                   for kind, shard in routes(ev, rules.client_shards)})
    assert {k[1] for k in keys} >= {"brokers", "clients"}
    appended = step_kept_and_rebuilt(result.events, rules, keys)
    assert appended, "some client shard stored its changes in its log (streaming.spark.json_tables)"


def test_a_stale_incident_that_ends_quietly_is_stored_by_a_kept_engine():
    """Why: a kept client shard reads again only the clients its step touched
    (KeyKind.incremental_json); a stale incident that ends because the broker went quiet, with
    no event of that client, changes the client all the same and must reach the store."""
    rules = RuleSettings()
    quiet = rules.stale_incident_quiet_ms
    other = next(c for c in "bcdefgh" if shard_of(c, rules.client_shards) != shard_of("a", rules.client_shards))
    events = [response(0, "a", 1, 5), response(1_000, "a", 2, 3)]  # broker 2 answers an older epoch
    events += [response(t, other, 1, 5) for t in range(2_000, 2 * quiet, 1_000)]  # only the other client after that
    keys = sorted({(ev["cluster_id"], kind, shard) for ev in events for kind, shard in routes(ev, rules.client_shards)
                   if kind == "clients"})
    assert len(keys) == 2, "a and the other in shards of their own: a's shard has no event while the incident ends"
    step_kept_and_rebuilt(events, rules, keys, batch=10)


def test_a_commit_regression_that_ends_quietly_is_stored():
    """Why: a commit shard's step stores only the partitions it touched (KeyKind.incremental_json);
    a regression that ends because the partition went quiet, with no commit of it, changes the
    partition all the same and must reach the store, or the checkpoint (on-call's state reads, an
    engine rebuilt after a restart) would hold it open."""
    rules = RuleSettings()
    quiet = rules.stale_incident_quiet_ms
    shard = shard_of("g1", rules.client_shards)
    other = next(g for g in (f"g{i}" for i in range(2, 99)) if shard_of(g, rules.client_shards) == shard)
    key = ("c1", "commits", shard)
    events = [commit(0, "g1", 5), commit(1_000, "g1", 3)]  # a consumer on stale metadata
    events += [commit(t, other, 1, partition=p) for t in range(2_000, 2 * quiet, 1_000) for p in range(3)]
    steps, meta, stored, fired = KeySteps(), None, None, []
    for start in range(0, len(events), 10):
        batch = events[start:start + 10]
        step = request(rules, key, packed(batch, key, rules.client_shards), meta, batch[-1]["event_time"])
        out = steps.step(step) or steps.step(step, stored or empty_state())
        fired += [row for row in out.rows if row["kind"] == "alert" and "OffsetCommitEpochRegression" in row["payload"]]
        meta, stored = out.meta, stored_after(out, stored)
    assert len(fired) == 2, "the regression opened and ended"
    (g1,) = [r for r in replay(COMMITS, stored.entities, stored.log)[0] if r.group_id == "g1"]
    assert (g1.regression_since_ms, g1.regression_last_ms) == (NO_TIME, NO_TIME)


def step_kept_and_rebuilt(events: list[dict], rules: RuleSettings, keys: list[tuple], batch: int = BATCH) -> int:
    """Every key, step by step, with its engine kept and with it rebuilt from what was stored; how
    many steps appended to a table's log."""
    kept_steps, compared, appended = KeySteps(), 0, 0
    for key in keys:
        meta, stored = None, None
        for start in range(0, len(events), batch):
            packs = packed(events[start:start + batch], key, rules.client_shards)
            clock = max(ev["event_time"] for ev in events[:start + batch])
            step = request(rules, key, packs, meta, clock)
            kept = kept_steps.step(step) or kept_steps.step(step, empty_state())
            rebuilt = KeySteps().step(step, stored or empty_state())
            assert (kept.rows, kept.entities, kept.table, kept.alerts, kept.buffer, kept.timer_ms,
                    kept.meta[:3]) == (rebuilt.rows, rebuilt.entities, rebuilt.table, rebuilt.alerts,
                                       rebuilt.buffer, rebuilt.timer_ms, rebuilt.meta[:3]), (key, start)
            compared += 1
            appended += kept.table is not None and kept.table.append is not None
            meta, stored = kept.meta, stored_after(kept, stored)
    assert kept_steps.counts["loaded"] == len(keys), "each key is built once, then kept"
    assert kept_steps.counts["kept"] == compared - len(keys)
    return appended


def test_a_step_asks_for_the_stored_state_unless_it_keeps_that_generation():
    """Why: the generation stored with a key is what proves a kept engine is what the store holds;
    any other generation (a failed batch, another process wrote the key) must read the store."""
    rules = RuleSettings()
    key = ("c1", "brokers", 0)
    steps = KeySteps()
    first = request(rules, key, [], None, 10_000)
    assert steps.step(first) is None, "a new key: nothing kept, the store is read"
    out = steps.step(first, empty_state())
    assert steps.step(request(rules, key, [], out.meta, 20_000)) is not None
    stale = (*out.meta[:3], out.meta[3] + 1)
    assert steps.step(request(rules, key, [], stale, 30_000)) is None, "another generation: read the store"


def test_engines_not_stepped_for_a_while_are_dropped():
    """Why: an engine host outlives queries; a finished query's engines (and a key gone quiet)
    must not stay in memory for good. The clock is passed in."""
    now = [100.0]
    cache = EngineCache(clock=lambda: now[0])
    cache.keep(("a",), 1, object(), object())
    now[0] = 250.0
    cache.keep(("b",), 2, object(), object())
    assert cache.drop_unused(idle_ms=100_000) == 1 and len(cache) == 1
    assert cache.take(("a",), 1) is None and cache.take(("b",), 2) is not None


def test_a_late_event_from_years_ago_does_not_push_a_live_keys_timer_out():
    """Why (issue #22): in processing time a key's timers wait for how far its newest events trail
    the clock; one record dated 1990, alone in a micro-batch, made that decades, and a cluster
    that went silent after it was never reported. Only events past the key's horizon count."""
    rules = RuleSettings()
    key = ("c1", "brokers", 0)
    now = 1_795_000_000_000
    steps = KeySteps()

    def live(packs, meta, at):
        cluster_id, kind, shard = key
        req = StepRequest(rules, cluster_id, kind, shard, tuple(packs), meta, False, 0, at, None, query="q")
        return steps.step(req) or steps.step(req, empty_state())

    beat = hb(now - 1_000, 1)
    beat["cluster_id"] = "c1"
    first = live(packed([beat], key), None, now)
    assert first.timer_ms == now - 1_000 + rules.controller_heartbeat_timeout_ms + 1_000  # deadline + offset
    forged = hb(631_152_000_000, 1)  # 1990-01-01
    forged["cluster_id"] = "c1"
    second = live(packed([forged], key), first.meta, now + 500)
    assert second.timer_ms == first.timer_ms, "the key still wakes when broker 1's timeout is due"


def test_a_key_that_sends_little_wakes_when_its_timeout_is_due_not_a_batch_later():
    """Why (issue 26): in processing time a key's timers wait for how far its events trail the
    clock. A small cluster beside big ones sent its last heartbeat 800 ms before the batch that
    read it started: its events do not trail by 800 ms, it sent nothing newer. What trails is the
    read (the packs' clock, the newest event of the batch, 20 ms before its start) and its own
    sending (Kafka timestamp - event time, 5 ms). A key whose events do trail keeps its offset."""
    rules = RuleSettings()
    key = ("small", "brokers", 0)
    now = 1_795_000_000_000
    timeout = rules.controller_heartbeat_timeout_ms

    def live(event_ms, sent_ms, clock_ms):
        beat = {**hb(event_ms, 1), "cluster_id": "small",
                "kafka_timestamp": datetime.fromtimestamp(sent_ms / 1000, timezone.utc)}
        req = StepRequest(rules, *key, tuple(packed([beat], key)), None, False, 0, now, clock_ms, query="q")
        steps = KeySteps()
        return steps.step(req) or steps.step(req, empty_state())

    assert live(now - 800, now - 795, now - 20).timer_ms == now - 800 + timeout + 25
    # written 2,990 ms late (its collector is behind): the timer waits those 2,990 ms
    assert live(now - 3_000, now - 10, now - 20).timer_ms == now - 3_000 + timeout + 2_990
    # read with nothing newer (no busy cluster in its packs): it waited 795 ms for this batch's
    # trigger, which says nothing about its events; at least WRITE_TO_READ_MS
    assert live(now - 800, now - 795, now - 800).timer_ms == now - 800 + timeout + WRITE_TO_READ_MS


def test_a_collector_round_trails_by_how_long_it_took_to_be_written_not_by_the_wait_for_the_trigger():
    """Why (issue 26): a collector's round is stamped with its start and written when its probes
    and scrapes are in (600 ms here); the batch that read it began 500 ms later (its trigger). The
    batch read the events topic to its end: the round's events trail the clock by 600 ms, and a
    paused broker's timeout is decided 500 ms earlier than when the wait counted too."""
    rules = RuleSettings()
    key = ("real", "brokers", 0)
    now = 1_795_000_000_000
    start, written = now - 1_100, now - 500
    stamp = datetime.fromtimestamp(written / 1000, timezone.utc)
    round_ = [{**hb(start - 700, 1), "cluster_id": "real", "kafka_timestamp": stamp},
              {**hb(start, 2), "cluster_id": "real", "kafka_timestamp": stamp}]
    req = StepRequest(rules, *key, tuple(packed(round_, key)), None, False, 0, now, start, query="q")
    steps = KeySteps()
    out = steps.step(req) or steps.step(req, empty_state())
    assert out.meta[1] == 600  # the offset: not 1,100 (the round's age when read)
    assert out.timer_ms == start - 700 + rules.controller_heartbeat_timeout_ms + 600  # broker 1's timeout


def test_the_stored_row_values_are_redone_only_for_what_a_step_touched_added_or_moved():
    """Why: a step copies the stored values and redoes the touched and new entities, where it
    went through a shard's tens of thousands of clients one by one; whatever the step did (added,
    dropped, dropped and added back last), the result must be the full pass's, order included."""
    import random
    from dataclasses import dataclass

    from streaming.spark import key_steps

    @dataclass
    class Rec:
        key: str
        value: int

    def full_pass(table, before, touched):
        before = before or {}
        return {k: before[k] if k in before and k not in touched else (r.key, r.value) for k, r in table.items()}

    rng = random.Random(7)
    table = {f"c{i}": Rec(f"c{i}", i) for i in range(200)}
    stored = None
    for step in range(300):
        touched = set()
        for _ in range(rng.choice([0, 1, 3, 30, 150])):
            action, key = rng.random(), f"c{rng.randrange(260)}"
            if action < 0.7 and key in table:
                table[key].value += 1
            elif action < 0.85:
                table.pop(key, None)  # dropped, and now and then left out of touched (the full pass then)
                if rng.random() < 0.3:
                    continue
            else:
                table.pop(key, None)
                table[key] = Rec(key, step)  # back (or new), last
            touched.add(key)
        expected = full_pass(table, stored, touched)
        got = key_steps._row_values(Rec, table, stored, touched)
        assert list(got.items()) == list(expected.items()), step
        stored = got


def test_a_step_that_forgot_nothing_writes_what_the_full_comparison_writes():
    """Why: a shard's step that forgot no entity trusts every stored one to be in its place and
    redoes only the touched and new ones, in place, where the full comparison goes through every
    one of its tens of thousands; a step that forgot some takes the full comparison. Whatever the
    steps did, the values and the write (log entry or rewrite) are the full comparison's."""
    import copy
    import random
    from dataclasses import dataclass
    from types import SimpleNamespace

    from streaming.spark import json_tables, key_steps
    from streaming.spark.key_steps import Stored

    @dataclass
    class Rec:
        key: str
        value: int

    rng = random.Random(11)
    table = {f"c{i}": Rec(f"c{i}", i) for i in range(200)}
    stored, logged, fast = None, 0, 0
    for step in range(300):
        touched, forgot = set(), 0
        for _ in range(rng.choice([0, 1, 3, 30, 150])):
            action, key = rng.random(), f"c{rng.randrange(260)}"
            if action < 0.75 and key in table:
                table[key].value += 1
            elif action < 0.8 and key in table:
                del table[key]  # forgotten
                forgot += 1
            elif action < 0.85 and key in table:
                del table[key]
                table[key] = Rec(key, step)  # forgotten and back within the step: last
                forgot += 1
            elif key not in table:
                table[key] = Rec(key, step)  # new: last
            touched.add(key)
        expected_values = key_steps._row_values(Rec, table, copy.deepcopy(stored), touched)
        expected = json_tables.plan(Rec, copy.deepcopy(stored), expected_values, touched, logged, 0.5)
        values, write = key_steps._table_write(Rec, table, Stored([], None, stored, logged),
                                               SimpleNamespace(touched=touched, forgot=forgot), 0.5)
        assert list(values.items()) == list(expected_values.items()), step
        assert write == expected, step
        fast += stored is not None and not forgot and len(touched) < len(table) // 2
        stored, logged = values, write.logged
    assert fast > 100, "most steps took the way of a step that forgot nothing"


def test_a_step_says_how_many_entities_it_forgot():
    """Why: the step's write trusts the stored entities to be in their places when it forgot none
    (test above); an expiry, or a reset that empties the key, must be counted."""
    from streaming.engine.key_engine import KeyEngine
    from streaming.events import CLUSTER_RESET

    rules = RuleSettings(entity_expiry_ms=5_000, client_shards=1)
    engine = KeyEngine.new("clients", "c1", 0, rules)
    first = engine.step([response(0, "a", 1, 5), response(0, "b", 1, 5)], 1_000)
    assert first.forgot == 0
    # a is silent past the expiry and back within one step: forgotten, then added again, last
    back = engine.step([response(t, "b", 1, 5) for t in range(1_000, 9_000, 1_000)] + [response(9_500, "a", 1, 5)],
                       10_000)
    assert back.forgot == 1 and list(engine.table.clients) == ["b", "a"]
    reset = {**response(11_000, "a", 1, 5), "event_type": CLUSTER_RESET}
    assert engine.step([reset], 12_000).forgot == 2
