"""Upgrading in place: a checkpoint written by the previous release's query (decoded rows from the
Kafka source, packed by a mapInArrow step) is continued by this release's (the source packs
itself). Mid-incident: the state carried over must finish the incident, without reading a record
twice or firing an alert again."""

import dataclasses
from collections import Counter

import pytest

from streaming import config
from streaming.sinks.memory import MemorySink
from streaming.sinks.metrics import input_records
from streaming.spark.job import start
from streaming.spark.kafka_input import kafka_events
from streaming.spark.pipeline import EVENT_TIME
from streaming.tools.demo import EVENT_PARTITIONS, check_per_cluster, load_events, play_scenarios
from streaming.tools.embedded import create_topics
from streaming.tools.simulate.writers import KafkaEventWriter

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _run(spark, settings, name: str, events_df=None) -> tuple[list[dict], int]:
    memory = MemorySink()
    query = start(spark, settings, [memory], time_mode=EVENT_TIME, available_now=True, events_df=events_df,
                  query_name=name)
    query.awaitTermination(300)
    assert query.exception() is None
    return memory.all("alerts"), sum(input_records(p)[0] for p in query.recentProgress)


def test_a_checkpoint_of_the_row_query_is_continued_by_the_packed_one(broker, spark, tmp_path):
    events, truths = play_scenarios(["partitioned_broker"], seed=3)
    (cluster, truth), = truths.items()
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"ev-{tmp_path.name}", "kafka.topics.alerts": f"al-{tmp_path.name}",
        "kafka.topics.dlq": f"dlq-{tmp_path.name}", "kafka.maxOffsetsPerTrigger": 4000})
    settings = dataclasses.replace(settings, rules=truth.rule_settings(), checkpoint_location=str(tmp_path / "ckpt"))
    create_topics(broker.bootstrap_servers, {settings.kafka.events_topic: EVENT_PARTITIONS})
    writer = KafkaEventWriter(broker.bootstrap_servers, settings.kafka.events_topic, progress=None)
    # after the broker's heartbeat timeout must have fired, before it is due to resolve
    timeout = next(e for e in truth.expected if e.alertname == "BrokerHeartbeatTimeout")
    fired_by = timeout.not_after_ms + 2 * truth.rule_settings().allowed_lateness_ms
    assert fired_by < timeout.resolves_by_ms
    cut = next(i for i, ev in enumerate(events) if ev["event_time"] > fired_by)
    load_events(writer, events[:cut], EVENT_PARTITIONS)
    before, read_before = _run(spark, settings, f"old-{tmp_path.name}", events_df=kafka_events(spark, settings))
    open_before = {a["fingerprint"] for a in before if a["status"] == "firing"} - {
        a["fingerprint"] for a in before if a["status"] == "resolved"}
    assert open_before, "the cut must fall inside an incident, or nothing carried over is checked"

    load_events(writer, events[cut:], EVENT_PARTITIONS)
    writer.close()
    after, read_after = _run(spark, settings, f"new-{tmp_path.name}")
    assert (read_before, read_after) == (cut, len(events) - cut), "every record read once, across the upgrade"
    repeated = [k for k, n in Counter(a["event_id"] for a in before + after).items() if n > 1]
    assert not repeated, f"alert records written again after the upgrade: {repeated}"
    assert open_before <= {a["fingerprint"] for a in after if a["status"] == "resolved"}
    report = check_per_cluster(before + after, {cluster: truth})[cluster]
    assert report.ok, report.summary()
