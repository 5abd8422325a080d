"""Issue 27: every scenario's ground truth holds whatever the events topic's partition count and
``maxOffsetsPerTrigger``. With a small budget the partitions advance unevenly in event time (the
budget is shared by backlog); before the planner held the clock at the partition behind, a
broker whose heartbeats waited unread there was timed out (a false BrokerHeartbeatTimeout, an
INACTIVE lane in the demo's report). All scenarios run side by side as clusters of one query, on
the real broker, in event time as the demo and `epochwatch replay` run."""

from __future__ import annotations

import dataclasses

import pytest

from streaming import config
from streaming.sinks.memory import MemorySink
from streaming.spark.job import start
from streaming.spark.pipeline import EVENT_TIME
from streaming.tools.demo import check_per_cluster, load_events, play_scenarios
from streaming.tools.embedded import create_topics
from streaming.tools.simulate import SCENARIOS
from streaming.tools.simulate.writers import KafkaEventWriter

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SEED = 11


@pytest.fixture(scope="module")
def played():
    return play_scenarios(sorted(SCENARIOS), seed=SEED)


@pytest.fixture(scope="module")
def topics(broker, played, tmp_path_factory):
    """partitions -> an events topic holding every scenario's events (produced once per count)."""
    events, _ = played
    made = {}
    suffix = tmp_path_factory.mktemp("drift").name[-8:]

    def topic(partitions: int) -> str:
        if partitions not in made:
            name = made[partitions] = f"drift-{partitions}-{suffix}"
            create_topics(broker.bootstrap_servers, {name: partitions})
            with KafkaEventWriter(broker.bootstrap_servers, name, progress=None) as writer:
                load_events(writer, events, partitions)
        return made[partitions]

    return topic


@pytest.mark.parametrize("partitions, budget", [(1, 400), (8, 100), (32, 400), (8, 1_000_000),
                                                (32, 1_000_000)])
def test_every_scenario_holds_whatever_the_partitions_and_the_budget(broker, spark, played, topics, tmp_path,
                                                                     partitions, budget):
    events, truths = played
    events_topic = topics(partitions)
    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": events_topic, "kafka.topics.alerts": f"drift-al-{suffix}",
        "kafka.topics.dlq": f"drift-dlq-{suffix}", "kafka.maxOffsetsPerTrigger": budget})
    settings = dataclasses.replace(settings, rules=next(iter(truths.values())).rule_settings(),
                                   checkpoint_location=str(tmp_path / "checkpoint"))
    create_topics(broker.bootstrap_servers, {settings.kafka.alerts_topic: 1, settings.kafka.dlq_topic: 1})
    memory = MemorySink()
    query = start(spark, settings, [memory], time_mode=EVENT_TIME, available_now=True,
                  query_name=f"drift-{partitions}-{budget}-{suffix}")
    query.awaitTermination(900)
    assert query.exception() is None
    failed = {cluster: report.summary() for cluster, report in check_per_cluster(memory.all("alerts"), truths).items()
              if not report.ok}
    assert failed == {}, f"{partitions} partitions, maxOffsetsPerTrigger {budget}: {failed}"
