"""Every simulator incident end to end: events into the real (embedded) broker, the Spark job with
the Kafka source, transformWithState and the Kafka sink, alerts read back from the alerts topic and
checked against each scenario's ground truth (expected alerts within their bounds, nothing
unexpected). All scenarios run side by side as separate clusters in one query."""

import dataclasses

import pytest

from streaming import config
from streaming.sinks.kafka import KafkaOutputSink
from streaming.sinks.memory import MemorySink
from streaming.sinks.metrics import input_records
from streaming.spark.job import start
from streaming.spark.pipeline import EVENT_TIME
from streaming.tools.demo import EVENT_PARTITIONS, check_per_cluster, load_events, play_scenarios, read_topic
from streaming.tools.embedded import create_topics
from streaming.tools.simulate import SCENARIOS
from streaming.tools.simulate.writers import KafkaEventWriter
from udfs import avro_codec

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def scenario_run(broker, spark, tmp_path_factory):
    names = sorted(SCENARIOS)
    events, truths = play_scenarios(names, seed=7)
    suffix = tmp_path_factory.mktemp("e2e").name
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"ev-{suffix}", "kafka.topics.alerts": f"al-{suffix}",
        "kafka.topics.dlq": f"dlq-{suffix}", "kafka.maxOffsetsPerTrigger": 5000})
    settings = dataclasses.replace(settings, rules=next(iter(truths.values())).rule_settings(),
                                   checkpoint_location=str(tmp_path_factory.mktemp("ckpt")))
    k = settings.kafka
    create_topics(broker.bootstrap_servers, {k.events_topic: EVENT_PARTITIONS, k.alerts_topic: 4, k.dlq_topic: 1})
    with KafkaEventWriter(broker.bootstrap_servers, k.events_topic, progress=None) as writer:
        load_events(writer, events, EVENT_PARTITIONS)
    memory, kafka_sink = MemorySink(), KafkaOutputSink(settings)
    query = start(spark, settings, [kafka_sink, memory], time_mode=EVENT_TIME,
                  available_now=True, query_name=f"e2e-{suffix}")
    query.awaitTermination(600)
    kafka_sink.close()
    assert query.exception() is None
    alerts = memory.all("alerts")
    in_kafka = read_topic(broker.bootstrap_servers, k.alerts_topic, len(alerts))
    return alerts, truths, in_kafka, len(events), query


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_alerts_match_ground_truth(scenario_run, name):
    alerts, truths, _, _, _ = scenario_run
    cluster = f"sim-{name.replace('_', '-')}"
    report = check_per_cluster(alerts, {cluster: truths[cluster]})[cluster]
    assert report.ok, report.summary()


def test_every_alert_record_is_in_the_alerts_topic(scenario_run):
    alerts, _, in_kafka, _, _ = scenario_run
    decoded = [avro_codec.decode(m.value()) for m in in_kafka]
    assert sorted(a["event_id"] for a in decoded) == sorted(a["event_id"] for a in alerts)
    assert all(m.key().decode() == avro_codec.decode(m.value())["fingerprint"] for m in in_kafka)


def test_every_event_was_read_once(scenario_run):
    _, _, _, produced, query = scenario_run
    read = sum(input_records(p)[0] for p in (query.recentProgress or []))
    assert read == produced
