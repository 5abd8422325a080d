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
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from streaming import config
from streaming.sinks.memory import MemorySink
from streaming.spark import hold_keys
from streaming.spark.job import start
from streaming.spark.pipeline import EVENT_TIME, PROCESSING_TIME
from streaming.tools.demo import check_per_cluster
from streaming.tools.embedded import create_topics
from streaming.tools.simulate import ClusterShape, steady_state, steady_truth
from streaming.tools.simulate.scenarios import scenario_settings
from tests.integration.faults.support import source_end
from tests.support.builders import hb
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


HELD = "held"
BLOCK_RECORDS = 6_000
BUDGET = 200  # records per batch: the block takes some 30 batches to read


def held_partition(start_ms: int) -> list[dict]:
    """One partition, in the order it is read: cluster 'held''s first 10 s of heartbeats, a block
    of another cluster's records stamped at 10 s, then 'held''s heartbeats from 10 s to 120 s."""
    def beat(t_ms, broker, cluster):
        ev = hb(start_ms + t_ms, broker)
        ev["cluster_id"] = cluster
        return ev

    early = [beat(t + b, b, HELD) for t in range(0, 10_000, 2_000) for b in (1, 2, 3)]
    block = [beat(10_000 + i // 3, 1 + i % 3, "busy") for i in range(BLOCK_RECORDS)]
    late = [beat(t + b, b, HELD) for t in range(10_000, 120_000, 2_000) for b in (1, 2, 3)]
    return early + block + late


@pytest.mark.parametrize("hold", [True, False], ids=["with-hold", "without-hold"])
def test_processing_time_timers_wait_for_the_partition_that_is_behind(broker, spark, tmp_path, monkeypatch, hold):
    """Processing time: cluster 'held' has packs in the first batch only, then its heartbeats wait
    behind the block while the job takes tens of seconds of wall time to read it; its key's timer
    fires meanwhile. Without the hold rows (the control) that times all three brokers out."""
    if not hold:
        monkeypatch.setattr(hold_keys, "hold_shards", lambda spark, partitions: [])
    start_ms = int(time.time() * 1000) - 130_000  # processing time judges event times by the wall clock
    events = held_partition(start_ms)
    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"held-ev-{suffix}", "kafka.topics.alerts": f"held-al-{suffix}",
        "kafka.topics.dlq": f"held-dlq-{suffix}", "kafka.maxOffsetsPerTrigger": BUDGET})
    settings = dataclasses.replace(settings, checkpoint_location=str(tmp_path / "checkpoint"))
    k = settings.kafka
    create_topics(broker.bootstrap_servers, {k.events_topic: 2, k.alerts_topic: 1, k.dlq_topic: 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20, "enable.idempotence": True})
    for ev in events:
        producer.produce(k.events_topic, avro_codec.encode(ev), partition=0)
    assert producer.flush(60) == 0

    memory = MemorySink()
    began = time.monotonic()
    # the live job's trigger (available-now needs event time: streaming.spark.job.start)
    query = start(spark, settings, [memory], time_mode=PROCESSING_TIME, query_name=f"held-{suffix}")
    try:
        while records_read(query) < len(events):
            assert query.exception() is None
            assert time.monotonic() - began < 600, f"read {records_read(query)} of {len(events)}"
            time.sleep(0.5)
    finally:
        query.stop()
    # the deadline of 'held''s first heartbeats (9 s after them) passed while the block was read
    assert time.monotonic() - began > 15, "the block was read too fast to test the timer"
    timed_out = sorted({t["broker_id"] for t in memory.all("transitions")
                        if t["cluster_id"] == HELD and t["to_state"] == "INACTIVE"})
    paged = [a for a in memory.all("alerts") if a["alertname"] == "BrokerHeartbeatTimeout"]
    if hold:
        assert (timed_out, paged) == ([], [])
    else:
        assert timed_out == [1, 2, 3]


def records_read(query) -> int:
    """Records up to the end of the last batch that ran (its output is in the sink by then)."""
    progress = query.lastProgress
    return sum(source_end(progress).values()) if progress else 0
