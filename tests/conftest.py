"""Shared fixtures: the real embedded broker (session), topic and Spark factories.

Fixtures are factories in the quixstreams style; nothing here mocks Kafka.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from streaming.embedded import EmbeddedBroker, create_topics

pytest_plugins = ["tests.support.kafka"]  # kafka_cluster, kafka_cluster_factory


@pytest.fixture(scope="session")
def broker():
    with EmbeddedBroker() as b:
        yield b


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
    from streaming.spark_session import build_session

    session = build_session("epochwatch-tests", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture
def tmp_checkpoint(tmp_path):
    path = tmp_path / "checkpoint"
    return str(path)

