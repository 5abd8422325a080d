"""The events topic as the job reads it (streaming.spark.kafka_input) with a Schema Registry: the
job's registry settings, credentials from the environment, reach the source's read tasks."""

from __future__ import annotations

import pytest

from streaming import config
from streaming.spark.kafka_input import kafka_events
from tests.support.kafka_io import produce, run_available_now, sample_events
from tests.support.schema_registry import PASSWORD, USER
from udfs import avro_codec
from udfs.kafka_sink import event_key
from udfs.registry_catalog import RegistryCatalog

pytestmark = pytest.mark.spark


def test_events_encoded_with_the_registrys_ids_decode_with_the_jobs_registry_credentials(
        spark, broker, schema_registry, topic_factory, monkeypatch):
    """Why: the source was handed the registry's URL alone: a registry that asks for credentials
    answered every lookup 401, and the events waited for ever (now: the query fails saying so)."""
    monkeypatch.setenv("EPOCHWATCH_TEST_REGISTRY_AUTH", f"{USER}:{PASSWORD}")
    topic = topic_factory(1, "ev")
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.topics.events": topic,
        "kafka.schema.registry.url": schema_registry.url,
        "kafka.schema.registry.basic.auth.user.info": "${EPOCHWATCH_TEST_REGISTRY_AUTH}",
        "kafka.brokerUnavailable.maxWaitMs": 30_000})
    writer = RegistryCatalog(schema_registry.url, topic, {"basic.auth.user.info": f"{USER}:{PASSWORD}"})
    sent = sample_events(per_type=1)
    produce(broker.bootstrap_servers, topic, [(event_key(e).encode(), avro_codec.encode(e, writer)) for e in sent])

    stream = kafka_events(spark, settings, starting_offsets="earliest")
    collected, _ = run_available_now(stream)
    rows = [dict(zip(stream.columns, r)) for r in collected.rows]
    assert sorted(r["event_id"] for r in rows) == sorted(e["event_id"] for e in sent)
    assert all(r["dlq_reason"] is None for r in rows)
