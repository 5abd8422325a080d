"""Real Apache Kafka KRaft clusters (streaming.tools.kafka_cluster) as fixtures, for any test in
tests/ (registered in tests/conftest.py through pytest_plugins).

- kafka_cluster: one cluster per run (1 controller, 3 brokers), for tests that leave it as they
  found it (a paused broker resumed, a cut link healed, and unfenced again).
- kafka_cluster_factory(controllers=1, brokers=3, **KafkaCluster kwargs): a started cluster of
  the test's own, stopped at teardown, for tests that break things. A cluster starts in ~10 s:
  ask for the fewest nodes the test needs.
- recreate_topic(bootstrap, topic, partitions): delete a topic and create it again (a new topic
  id, offsets from 0), the way an operator loses a topic's data.
"""

from __future__ import annotations

import pytest

from streaming.tools.embedded import create_topics
from streaming.tools.kafka_cluster import KafkaCluster
from tests.support.polling import wait_until


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """One 1-controller, 3-broker cluster per run; leave it as you found it."""
    with KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), controllers=1, brokers=3) as cluster:
        yield cluster


@pytest.fixture
def kafka_cluster_factory(tmp_path_factory):
    """make(controllers=1, brokers=3, **KafkaCluster kwargs) -> a started cluster, stopped at teardown."""
    clusters: list[KafkaCluster] = []

    def make(controllers: int = 1, brokers: int = 3, **kwargs) -> KafkaCluster:
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), controllers, brokers, **kwargs)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.stop()


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30, what=f"{topic} deleted")
    create_topics(bootstrap, {topic: partitions})
