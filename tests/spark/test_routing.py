"""The Arrow router (what the Spark job runs) and its pure twin send every event to the same keys."""

import pyarrow as pa

from streaming.engine.keys import OWNER_KIND
from streaming.spark.replay import rows_to_batch
from streaming.spark.routing import route_batch, routes
from streaming.spark.validity import Limits
from tests.support.builders import attempt, commit, failed, hb, rebootstrap, reset, response, update

T0 = 1_700_000_000_000
NOW = T0 + 60_000


def _events():
    evs = [hb(1, 1), update(2, 1, 5), response(3, "client-a", 1, 5), response(4, "client-b", 2, -1),
           response(5, "client-c", 9000, -1, error=129, brokers=0), failed(6, "client-d"),
           rebootstrap(7, "client-e"), attempt(8, "client-f", 3), commit(9, "group-g", 4),
           response(10, "client-a", 2, 5, error=3), reset(11)]
    for ev in evs:
        ev["event_time"] += T0
    return evs


def routed(evs, now=NOW):
    return route_batch(pa.Table.from_batches([rows_to_batch(evs)]), client_shards=16, limits=Limits(), now_ms=now).to_pylist()


def test_arrow_routes_equal_pure_routes():
    """Why: the Spark job and the single-process engine must feed the same keys."""
    evs = _events()
    got = sorted((r["event_id"], r["kind"], r["shard"]) for r in routed(evs))
    want = sorted((ev["event_id"], kind, shard) for ev in evs for kind, shard in routes(ev, 16))
    assert got == want
    assert len(want) > len(evs)  # metadata responses feed more than one key


def test_every_event_feeds_its_owner_key_first():
    """Why: only the owner dead-letters an invalid event; it must be one of the keys it feeds."""
    evs = _events()
    assert {ev["event_type"] for ev in evs} == set(OWNER_KIND)
    assert all(routes(ev, 16)[0][0] == OWNER_KIND[ev["event_type"]] for ev in evs)


def test_an_invalid_event_fed_to_several_keys_is_dead_lettered_once():
    """Why: an invalid metadata response also feeds the brokers key (and the nodes key with error
    129); each key reported it, so the dead-letter topic got it two or three times."""
    from streaming.config import RuleSettings
    from streaming.engine.local import LocalDetector

    bad = [dict(ev, client_id="") for ev in (response(3, "x", 1, 5), response(5, "x", 9000, -1, error=129, brokers=0))]
    for ev in bad:
        ev["event_time"] += T0
    assert [len(routes(ev, 16)) for ev in bad] == [2, 2]
    detector = LocalDetector(RuleSettings())
    detector.feed(bad)
    reported = [(ev["event_id"], reason) for r in detector.advance(NOW) for ev, reason in r.invalid]
    assert reported == [(bad[0]["event_id"], "client_id is empty"), (bad[1]["event_id"], "client_id is empty")]


def test_rows_keep_their_input_order_within_a_kind():
    """Why: the engine's sort by event time is stable; ties must break as in the source order."""
    evs = [hb(5, 1), response(5, "a", 1, 5), hb(5, 2), response(5, "b", 2, 5)]
    for ev in evs:
        ev["event_time"] += T0
    brokers = [r["event_id"] for r in routed(evs) if r["kind"] == "brokers"]
    assert brokers == [ev["event_id"] for ev in evs]


def test_event_ms_and_cluster_id_are_ready_for_the_packs():
    (row,) = routed([dict(hb(1, 1), event_time=T0 + 1, cluster_id=None)])
    assert (row["event_ms"], row["cluster_id"], row["kind"], row["shard"]) == (T0 + 1, "", "brokers", 0)


def test_far_future_too_old_and_undecodable_rows_become_dead_letters():
    """Why: a broken clock must neither crash the query nor move the watermark, and nothing is
    dropped: each goes to the dead letters with its reason."""
    future = dict(hb(1, 1), event_time=NOW + 10 ** 12)  # ~30 years ahead
    old = dict(hb(1, 2), event_time=-5)
    bad = {"dlq_reason": "bad_magic_byte", "dlq_detail": "x", "raw_value": b"\x01", "kafka_partition": 7}
    rows = routed([future, old, bad])
    assert [(r["kind"], r["dlq_reason"]) for r in rows] == [
        ("dead_letter", "future_event_time"), ("dead_letter", "event_time_out_of_range"),
        ("dead_letter", "bad_magic_byte")]
    assert "ahead of the clock" in rows[0]["dlq_detail"] and "before 1970" in rows[1]["dlq_detail"]
    assert [r["event_time"] for r in rows] == [None, None, None]  # they must not move the watermark
    assert rows[0]["event_ms"] == NOW + 10 ** 12  # the time is kept for the record
    assert rows[2]["shard"] == 7 % 4


def test_an_event_within_the_future_tolerance_is_routed():
    ev = dict(hb(1, 1), event_time=NOW + 299_000)
    assert [r["kind"] for r in routed([ev])] == ["brokers"]


def test_a_reset_reaches_every_key_of_its_cluster():
    """Why: epochwatch reset-cluster must make every key forget the cluster, whatever shard a
    client or a group lives in; the rows stay in input order within each kind."""
    evs = [dict(reset(0), event_time=T0), dict(response(1, "a", 1, 5), event_time=T0 + 1)]
    rows = routed(evs)
    clients = [(r["event_id"], r["shard"]) for r in rows if r["kind"] == "clients"]
    assert clients[:16] == [(evs[0]["event_id"], s) for s in range(16)] and clients[16][0] == evs[1]["event_id"]
    assert sorted(r["shard"] for r in rows if r["kind"] == "commits") == list(range(16))
    assert [r["kind"] for r in rows if r["kind"] in ("brokers", "nodes")] == ["brokers", "brokers", "nodes"]
