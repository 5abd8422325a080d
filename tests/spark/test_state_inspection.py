"""On-call can read the detector's state with Spark's state data source: the `brokers` and
`clients` values are JSON tables that json_rows explodes into a row per broker or client."""

import io
import json

import pytest
from pyspark.sql import functions as F

from streaming import config
from streaming.rules.records import BrokerRecord, ClientRecord
from streaming.sinks.memory import MemorySink
from streaming.spark.replay import replay
from streaming.spark.state_schema import json_rows, schema_of
from streaming.tools.simulate import run_scenario

pytestmark = pytest.mark.spark


def test_state_readable_with_statestore_format(spark, tmp_path):
    result = run_scenario("partitioned_broker")
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=result.truth.rule_settings(), sinks=settings.sinks)
    text = "".join(json.dumps(ev) + "\n" for ev in result.events)
    checkpoint = str(tmp_path / "ckpt")
    replay(spark, settings, io.StringIO(text), "scenario", [MemorySink()], chunk_events=500, checkpoint=checkpoint)

    brokers = spark.read.format("statestore").option("stateVarName", "brokers").load(checkpoint)
    rows = (brokers.select("key.cluster_id", "key.kind", F.explode(json_rows("value.rows", BrokerRecord)).alias("b"))
            .select("kind", "b.broker_id", "b.state").collect())
    assert sorted(r["broker_id"] for r in rows) == [1, 2, 3, 4, 5, 6]
    assert {r["kind"] for r in rows} == {"brokers"}
    assert {r["state"] for r in rows} == {"ACTIVE"}  # the partitioned broker healed at the end

    clients = spark.read.format("statestore").option("stateVarName", "clients").load(checkpoint)
    decoded = clients.select(F.explode(json_rows("value.rows", ClientRecord)).alias("c")).select("c.*")
    assert decoded.count() == len({ev["client_id"] for ev in result.events if "client_id" in ev})
    assert decoded.schema.simpleString() == schema_of(ClientRecord).simpleString()  # names and types
    received = {}
    for ev in result.events:
        if ev["event_type"] == "metadata_response":
            received.setdefault(ev["client_id"], set()).add(ev["metadata_epoch"])
    # each field lands in its own column: an accepted epoch is one the client was answered with
    assert all(r["accepted_epoch"] in received[r["client_id"]] for r in decoded.collect())
