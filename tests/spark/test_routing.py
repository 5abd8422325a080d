"""The Spark routing expressions and their pure twin send every event to the same keys."""

import pyarrow as pa
import pytest

from streaming.replay import rows_to_batch
from streaming.routing import routes, with_routes
from tests.unit.rules.builders import attempt, commit, failed, hb, rebootstrap, response, update

pytestmark = pytest.mark.spark
T0 = 1_700_000_000_000


def _events():
    evs = [hb(1, 1), update(2, 1, 5), response(3, "client-a", 1, 5), response(4, "client-b", 2, -1),
           response(5, "client-c", 9000, -1, error=129, brokers=0), failed(6, "client-d"),
           rebootstrap(7, "client-e"), attempt(8, "client-f", 3), commit(9, "group-g", 4)]
    for ev in evs:
        ev["event_time"] += T0
    return evs


def test_spark_routes_equal_pure_routes(spark, tmp_path):
    evs = _events()
    path = str(tmp_path / "events.parquet")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_batches([rows_to_batch(evs)]), path)
    df = with_routes(spark.read.parquet(path), client_shards=16, max_future_ms=300_000)
    got = sorted((r["event_id"], r["kind"], r["shard"]) for r in df.select("event_id", "kind", "shard").collect())
    want = sorted((ev["event_id"], kind, shard) for ev in evs for kind, shard in routes(ev, 16))
    assert got == want
    assert len(want) > len(evs)  # metadata responses feed more than one key


def test_far_future_and_undecodable_rows_become_dead_letters(spark, tmp_path):
    future = hb(1, 1)
    future["event_time"] = T0 + 10 ** 12  # ~30 years ahead
    bad = {"dlq_reason": "bad_magic_byte", "dlq_detail": "x", "raw_value": b"\x01", "kafka_partition": 3}
    import pyarrow.parquet as pq

    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.Table.from_batches([rows_to_batch([future, bad])]), path)
    rows = with_routes(spark.read.parquet(path), 16, 300_000).collect()
    assert sorted(r["kind"] for r in rows) == ["dead_letter", "dead_letter"]
    assert {r["dlq_reason"] for r in rows} == {"bad_magic_byte", "future_event_time"}
    assert all(r["event_time"] is None for r in rows)  # they must not move the watermark
