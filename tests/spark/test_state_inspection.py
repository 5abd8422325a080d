"""On-call can read the detector's state with Spark's state data source: a key's `table` value is
a JSON table that json_rows explodes into a row per broker or client, table_rows merges a table
with its log of changes (`table_log`), and cluster_rows reads each cluster's record."""

import dataclasses
import io
import json
import time
from dataclasses import astuple

import orjson
import pytest
from pyspark.sql import functions as F

from streaming import config
from streaming.engine.keys import CLIENTS, COMMITS
from streaming.rules.records import BrokerRecord, ClientRecord, CommitRecord
from streaming.sinks.memory import MemorySink
from streaming.spark import json_tables
from streaming.spark.checkpoint import refuse_retired_state
from streaming.spark.replay import replay
from streaming.spark.state_schema import cluster_rows, json_rows, schema_of, table_rows
from streaming.tools.simulate import run_scenario
from tests.support.builders import commit

pytestmark = pytest.mark.spark


def test_state_readable_with_statestore_format(spark, tmp_path):
    result = run_scenario("partitioned_broker")
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=result.truth.rule_settings(), sinks=settings.sinks)
    text = "".join(json.dumps(ev) + "\n" for ev in result.events)
    checkpoint = str(tmp_path / "ckpt")
    replay(spark, settings, io.StringIO(text), "scenario", [MemorySink()], chunk_events=500, checkpoint=checkpoint)
    refuse_retired_state(spark, checkpoint)  # this build's own state is never refused

    tables = spark.read.format("statestore").option("stateVarName", "table").load(checkpoint)
    rows = (tables.where("key.kind = 'brokers'")
            .select("key.cluster_id", "key.kind", F.explode(json_rows("value.rows", BrokerRecord)).alias("b"))
            .select("kind", "b.broker_id", "b.state").collect())
    assert sorted(r["broker_id"] for r in rows) == [1, 2, 3, 4, 5, 6]
    assert {r["state"] for r in rows} == {"ACTIVE"}  # the partitioned broker healed at the end
    assert sorted(r["broker_id"] for r in table_rows(spark, checkpoint, "brokers").collect()) == [1, 2, 3, 4, 5, 6]

    (cluster,) = cluster_rows(spark, checkpoint).collect()
    assert cluster["cluster_id"] == result.events[0]["cluster_id"]
    newest_epoch = max(ev["metadata_epoch"] for ev in result.events if ev["event_type"] == "metadata_update")
    assert cluster["newest_epoch"] == newest_epoch and cluster["controller_id"] >= 0

    clients = table_rows(spark, checkpoint, "clients")
    assert clients.count() == len({ev["client_id"] for ev in result.events if "client_id" in ev})
    decoded = clients.select(*schema_of(ClientRecord).names)
    assert decoded.schema.simpleString() == schema_of(ClientRecord).simpleString()  # names and types
    received = {}
    for ev in result.events:
        if ev["event_type"] == "metadata_response":
            received.setdefault(ev["client_id"], set()).add(ev["metadata_epoch"])
    # each field lands in its own column: an accepted epoch is one the client was answered with
    assert all(r["accepted_epoch"] in received[r["client_id"]] for r in decoded.collect())


def test_a_table_with_a_log_reads_as_the_job_rebuilds_it(spark, tmp_path):
    """Why: a client shard is stored as a base and a log of changes (streaming.spark.json_tables);
    on-call reading the checkpoint must see each client's latest row, not its first, and no
    client the job dropped."""
    result = run_scenario("partitioned_broker")
    settings = config.load()
    rules = dataclasses.replace(result.truth.rule_settings(), client_shards=1)  # 41 clients in one table
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    text = "".join(json.dumps(ev) + "\n" for ev in result.events)
    checkpoint = str(tmp_path / "ckpt")
    replay(spark, settings, io.StringIO(text), "scenario", [MemorySink()], chunk_events=100, checkpoint=checkpoint)

    bases = {tuple(r["key"]): tuple(r["value"]) for r in state_of(spark, checkpoint, "table", "clients")}
    logs = {}
    for r in state_of(spark, checkpoint, "table_log", "clients"):
        logs.setdefault(tuple(r["key"]), []).append(tuple(r["list_element"]))
    assert logs, "the scenario left changes in some client shard's log"
    expected = set()
    for key in bases.keys() | logs.keys():
        entries = sorted(logs.get(key, []), key=lambda e: orjson.loads(e[1])["seq"])
        rebuilt, _ = json_tables.replay(CLIENTS, bases.get(key), entries)
        expected |= {_hashable((*key, *astuple(c))) for c in rebuilt}
    names = ["cluster_id", "kind", "shard", *schema_of(ClientRecord).names]
    assert {_hashable(row) for row in table_rows(spark, checkpoint, "clients").select(*names).collect()} == expected


def test_a_commit_shard_with_a_log_reads_as_the_job_rebuilds_it(spark, tmp_path):
    """Why: a commit shard is stored as a base and a log too, and a log names a dropped partition
    by its group, topic and partition together: on-call must see each partition's latest commit
    and none the job forgot."""
    expiry, t0 = 600_000, int(time.time() * 1000) - 3_600_000  # within rules.event.max.past.ms of now
    events = [commit(t0, "old", 1, partition=p) for p in range(2)]
    events += [commit(t0 + expiry // 2, "live", 1, partition=p, offset=1) for p in range(200)]
    events += [commit(t0 + expiry // 2 + 1_000, "live", 2, partition=p, offset=2) for p in range(10)]
    events += [commit(t0 + expiry + t, "live", 2, offset=3) for t in range(2_000, 12_000, 1_000)]  # "old" expires
    settings = config.load()
    rules = dataclasses.replace(settings.rules, client_shards=1, entity_expiry_ms=expiry)
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    text = "".join(json.dumps(ev) + "\n" for ev in events)
    checkpoint = str(tmp_path / "ckpt")
    replay(spark, settings, io.StringIO(text), "commits", [MemorySink()], chunk_events=60, checkpoint=checkpoint)

    # None: all of it in the log
    base = next((tuple(r["value"]) for r in state_of(spark, checkpoint, "table", "commits")), None)
    log = sorted((tuple(r["list_element"]) for r in state_of(spark, checkpoint, "table_log", "commits")),
                 key=lambda e: orjson.loads(e[1])["seq"])
    assert any(orjson.loads(entry)["removed"] for _, entry in log), "a dropped partition is named in the log"
    rebuilt, _ = json_tables.replay(COMMITS, base, log)
    assert sorted((c.group_id, c.partition, c.offset) for c in rebuilt) == [
        ("live", p, 3 if p == 0 else 2 if p < 10 else 1) for p in range(200)]
    names = schema_of(CommitRecord).names
    assert ({_hashable(tuple(row)) for row in table_rows(spark, checkpoint, "commits").select(*names).collect()}
            == {_hashable(astuple(c)) for c in rebuilt})


def state_of(spark, checkpoint: str, variable: str, kind: str) -> list:
    """One state variable's rows of one kind of key, as Spark's state data source reads them."""
    return (spark.read.format("statestore").option("stateVarName", variable).load(checkpoint)
            .where(F.col("key.kind") == kind).collect())


def _hashable(row) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)
