"""Real Apache Kafka KRaft clusters (streaming.tools.kafka_cluster) as fixtures, for any test in
tests/ (registered in tests/conftest.py through pytest_plugins).

- kafka_cluster: one cluster per run (1 controller, 3 brokers), for tests that leave it as they
  found it (a paused broker resumed, a cut link healed, and unfenced again).
- kafka_cluster_factory(controllers=1, brokers=3, **KafkaCluster kwargs): a started cluster of
  the test's own, stopped at teardown, for tests that break things. A cluster starts in ~10 s:
  ask for the fewest nodes the test needs.
"""

from __future__ import annotations

import pytest

from streaming.tools.kafka_cluster import KafkaCluster


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
