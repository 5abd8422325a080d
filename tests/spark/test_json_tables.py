"""A key's JSON table: {"fields": [...], "rows": [[...], ...]} and back, including values written
by older versions; and the base and log a table of clients is stored as (changes only)."""

import random
from collections import Counter
from dataclasses import astuple

import orjson

from streaming.engine.keys import CLIENTS as CLIENTS_KIND
from streaming.rules.records import ClientRecord, CommitRecord
from streaming.spark.json_tables import from_json_rows, plan, replay, rewrite_spread, to_json_rows

CLIENTS = [ClientRecord("a", accepted_epoch=7, stale_broker_ids=[1, 2], stale_since_ms=[10, 20],
                        stale_last_ms=[11, 21], stale_counts=[3, 1], last_event_ms=99),
           ClientRecord("b")]


def test_round_trip_keeps_every_field_and_names_them_once():
    text = to_json_rows(CLIENTS)
    assert from_json_rows(ClientRecord, text) == CLIENTS
    assert text.count('"client_id"') == 1


def test_a_value_written_as_an_array_of_objects_still_loads():
    """Why: a checkpoint written before the compact layout must restart without losing clients."""
    old = orjson.dumps(CLIENTS).decode()
    assert from_json_rows(ClientRecord, old) == CLIENTS


def test_fields_added_or_removed_since_are_matched_by_name():
    """Why: a new record field gets its default, a dropped one is ignored, the rest keep their value."""
    doc = orjson.loads(to_json_rows([CommitRecord("g", "t", 0, metadata_epoch=5, offset=42)]))
    names = [n for n in doc["fields"] if n != "offset"] + ["gone"]
    rows = [[v for n, v in zip(doc["fields"], row) if n != "offset"] + ["x"] for row in doc["rows"]]
    (commit,) = from_json_rows(CommitRecord, orjson.dumps({"fields": names, "rows": rows}).decode())
    assert commit == CommitRecord("g", "t", 0, metadata_epoch=5)


def _stored(base, log, write):
    """The base and log after the processor carried out ``write`` (streaming.spark.processor)."""
    if write.append is not None:
        return base, log + [write.append]
    if write.rewrite:
        return write.base, [] if write.clear_log else log
    return base, log


def _values(table: dict) -> dict:
    return {key: astuple(rec) for key, rec in table.items()}


def test_a_table_changed_step_by_step_replays_from_its_base_and_log_in_order():
    """Why: a key rebuilt from the store (a worker swap, a restart) must hold exactly the table the
    kept engine had, in the same order (the order alerts are evaluated in), whatever mix of
    changes, new clients, dropped clients and returning ones the steps made."""
    rng = random.Random(7)
    table = {f"c{i}": ClientRecord(f"c{i}", last_event_ms=0) for i in range(200)}
    base, log, before, logged = None, [], None, 0
    kinds = Counter()
    for step in range(300):
        touched = set()
        for _ in range(rng.choice([0, 1, 5, 20])):
            key = f"c{rng.randrange(260)}"
            if rng.random() < 0.15 and key in table:
                del table[key]  # expired
            else:
                rec = table.setdefault(key, ClientRecord(key))
                rec.last_event_ms = step
                rec.stale_broker_ids.append(step)  # in place: the stored row holds the same list
            touched.add(key)
        after = _values(table)
        write = plan(ClientRecord, before, after, touched, logged)
        kinds["append" if write.append else "rewrite" if write.rewrite else "none"] += 1
        base, log = _stored(base, log, write)
        before, logged = after, write.logged
        rebuilt, rows_in_log = replay(CLIENTS_KIND, base, log)
        assert [astuple(r) for r in rebuilt] == list(after.values()), step
        assert [c.client_id for c in rebuilt] == list(table), step
        assert rows_in_log == logged < max(len(table), 1), "the log never outgrows the table"
    assert kinds["append"] > 200 and kinds["rewrite"] > 5 and kinds["none"] > 10, kinds


def test_a_step_appends_only_what_it_changed():
    """Why: the point of the log: a step that touched 3 clients of 1,000 writes 3 rows."""
    before = _values({f"c{i}": ClientRecord(f"c{i}") for i in range(1000)})
    after = dict(before)
    after["c1"] = astuple(ClientRecord("c1", accepted_epoch=9))
    after["new"] = astuple(ClientRecord("new"))
    del after["c2"]
    write = plan(ClientRecord, before, after, {"c1", "new", "c2"}, logged=0)
    assert not write.rewrite and write.append[0] == 3
    doc = orjson.loads(write.append[1])
    assert [row[0] for row in doc["rows"]] == ["c1", "new"] and doc["removed"] == ["c2"] and doc["seq"] == 3
    assert len(write.append[1]) < 400
    untouched = plan(ClientRecord, after, dict(after), set(), logged=3)
    assert (untouched.rewrite, untouched.append, untouched.logged) == (False, None, 3), "nothing to write"


def test_a_table_emptied_clears_its_base_and_log():
    """Why: a cluster reset empties the table; neither the base nor old log entries may bring
    clients back on the next rebuild."""
    before = _values({f"c{i}": ClientRecord(f"c{i}") for i in range(10)})
    write = plan(ClientRecord, before, {}, set(before), logged=4)
    assert (write.rewrite, write.base, write.clear_log, write.logged) == (True, None, True, 0)


def test_shards_changing_alike_do_not_all_rewrite_in_the_same_step():
    """Why: a fleet's clients hash evenly, so 16 shards grow their logs at the same pace; rewriting
    them all in one micro-batch wrote every client whole in it, a slow batch every ~15."""
    shards = range(16)
    table = _values({f"c{i}": ClientRecord(f"c{i}") for i in range(1000)})   # each shard's, alike
    rewrites = {True: Counter(), False: Counter()}   # spread on / off -> rewrites at each step
    for spread_on in rewrites:
        logged = dict.fromkeys(shards, 0)
        for step in range(100):
            touched = {f"c{(step * 60 + j) % 1000}" for j in range(60)}
            for s in shards:
                spread = rewrite_spread("fleet", s) if spread_on else 0.0
                write = plan(ClientRecord, table, table, touched, logged[s], spread)
                logged[s] = write.logged
                rewrites[spread_on][step] += write.rewrite
    assert max(rewrites[False].values()) == 16, "the same pace, no spread: all at once"
    assert max(rewrites[True].values()) <= 4, rewrites[True]
    assert sum(rewrites[True].values()) >= 16 * 3, "each shard still rewrites, ~every 17-33 steps"
    spreads = sorted(rewrite_spread("fleet", s) for s in shards)
    assert min(b - a for a, b in zip(spreads, spreads[1:])) > 0.02, "well apart"


def test_the_log_holds_up_to_its_spread_more_than_the_table_before_a_rewrite():
    table = _values({f"c{i}": ClientRecord(f"c{i}") for i in range(100)})
    touched = {f"c{i}" for i in range(10)}
    assert plan(ClientRecord, table, table, touched, logged=90).rewrite
    assert not plan(ClientRecord, table, table, touched, logged=90, spread=0.5).rewrite
    assert plan(ClientRecord, table, table, touched, logged=140, spread=0.5).rewrite
