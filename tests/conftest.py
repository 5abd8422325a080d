"""Shared fixtures: a real Apache Kafka broker (session), topic and Spark factories.

Fixtures are factories in the quixstreams style; nothing here mocks Kafka.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from streaming.tools.embedded import create_topics
from streaming.tools.kafka_cluster import KafkaCluster

# kafka_cluster, kafka_cluster_factory; schema_registry, schema_registry_factory
pytest_plugins = ["tests.support.kafka", "tests.support.schema_registry"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """Apache Kafka (KRaft: one controller, one broker, ~8 s to start) for every test that reads or
    writes Kafka: the source, the sink and the job are tested on the broker users run."""
    with KafkaCluster(tmp_path_factory.mktemp("broker"), controllers=1, brokers=1) as cluster:
        yield cluster


@pytest.fixture
def topic_factory(broker):
    """topic_factory(partitions=1, prefix="t") -> a fresh topic name on the session broker."""
    counter = itertools.count()

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}-{next(counter)}"
        create_topics(broker.bootstrap_servers, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession per test run (start-up costs 4-11 s)."""
    from streaming.spark.session import build_session

    session = build_session("epochwatch-tests", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture
def tmp_checkpoint(tmp_path):
    path = tmp_path / "checkpoint"
    return str(path)

