"""Issue 27 on the real broker: the events topic's partitions advance unevenly under
``maxOffsetsPerTrigger``, and the job must not time out a broker whose heartbeats wait unread in
the partition that is behind.

A healthy cluster (steady state: nothing may fire). Partition 0 holds broker 6's heartbeats and
the clients' events of the first 10 s, partition 1 everything else. The budget is shared by
backlog, so partition 0, dense at first, is still in its first seconds of event time when
partition 1 has been read to its end, two minutes on: the newest event read is then several
heartbeat timeouts past broker 6's next heartbeat."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from confluent_kafka import Producer

from streaming import config
from streaming.demo import check_per_cluster
from streaming.dispatch import MemorySink
from streaming.embedded import create_topics
from streaming.job import start
from streaming.pipeline import EVENT_TIME
from streaming.simulate import ClusterShape, steady_state, steady_truth
from streaming.simulate.scenarios import scenario_settings
from udfs import avro_codec

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DURATION_MS = 120_000
LAGGING_BROKER = 6


def partition_of(ev: dict, start_ms: int) -> int:
    if ev["event_type"] == "broker_heartbeat" and ev["broker_id"] == LAGGING_BROKER:
        return 0
    if "client_id" in ev and ev.get("client_id") and ev["event_time"] < start_ms + 10_000:
        return 0
    return 1


def test_a_partition_held_back_in_event_time_times_out_no_broker(broker, spark, tmp_path):
    rules = scenario_settings()
    shape = ClusterShape(cluster_id="uneven", brokers=LAGGING_BROKER, clients=120)
    events = list(steady_state(duration_ms=DURATION_MS, settings=rules, shape=shape, seed=3))
    truth = steady_truth(duration_ms=DURATION_MS, settings=rules, shape=shape, seed=3)
    start_ms = events[0]["event_time"]
    placed = Counter(partition_of(ev, start_ms) for ev in events)
    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"uneven-ev-{suffix}", "kafka.topics.alerts": f"uneven-al-{suffix}",
        "kafka.topics.dlq": f"uneven-dlq-{suffix}", "kafka.maxOffsetsPerTrigger": len(events) // 30})
    settings = dataclasses.replace(settings, rules=rules, checkpoint_location=str(tmp_path / "checkpoint"))
    k = settings.kafka
    create_topics(broker.bootstrap_servers, {k.events_topic: 2, k.alerts_topic: 1, k.dlq_topic: 1})
    # idempotent: a retried batch never lands behind a later one (each partition stays in event-time order)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20, "enable.idempotence": True})
    for ev in events:
        producer.produce(k.events_topic, avro_codec.encode(ev), partition=partition_of(ev, start_ms))
    assert producer.flush(60) == 0

    memory = MemorySink()
    query = start(spark, settings, [memory], time_mode=EVENT_TIME, available_now=True, query_name=f"uneven-{suffix}")
    query.awaitTermination(600)
    assert query.exception() is None

    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 20, f"{len(batches)} batches: the budget did not hold the partitions back"
    inactive = [t for t in memory.all("transitions") if t["to_state"] == "INACTIVE"]
    assert inactive == [], f"{placed}: {inactive[:3]}"
    assert [a for a in memory.all("alerts") if a["alertname"] == "BrokerHeartbeatTimeout"] == []
    report = check_per_cluster(memory.all("alerts"), {"uneven": truth})["uneven"]
    assert report.ok, report.summary()
