"""The Schema Registry catalog (udfs.registry_catalog.RegistryCatalog) against a real registry
(Apicurio Registry's Confluent-compatible API, tests/support/schema_registry.py, basic auth on):
subjects, ids, refused credentials, a registry that stops answering or is gone. Only the answers a
real registry cannot be made to give on demand (503, 500) come from a loopback server started
here. A registry that fails must never turn a valid record into a dead letter (issue #22): only
"no such id" is the record's fault."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from streaming import events
from tests.support.fake_time import FakeTime
from tests.support.polling import wait_until
from tests.support.schema_registry import PASSWORD, USER
from udfs import avro_codec, record_batches
from udfs.avro_codec import DecodeError
from udfs.kafka_retry import RetryPolicy
from udfs.registry_catalog import RegistryCatalog, RegistryRefused, RegistryUnavailable, subject_name

AUTH = {"basic.auth.user.info": f"{USER}:{PASSWORD}"}
HEARTBEAT = events.normalize({
    "event_type": "broker_heartbeat", "event_id": "e-1", "cluster_id": "c1", "event_time": 1_790_000_000_123,
    "controller_id": 1, "controller_epoch": 4, "broker_id": 3, "incarnation_id": 17, "target_state": "ACTIVE"})


def fresh_topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def wire(schema_id: int) -> bytes:
    return avro_codec.HEADER.pack(0, schema_id) + avro_codec.encode_schemaless(HEARTBEAT)


def decode_batch(catalog, schema_id: int):
    message = Message(topic="events", partition=0, offset=7, key=b"k", value=wire(schema_id), timestamp=(1, 1))
    return record_batches.decoded_batch([message], record_batches.confluent_decoder(catalog), False)


def test_a_schema_is_registered_under_topic_and_record_name_and_its_id_read_back(schema_registry):
    """Why: the id on the wire must be the registry's, under the subject the docs promise
    (TopicRecordNameStrategy), and a second process must find it rather than register anew."""
    topic = fresh_topic()
    schema_id = RegistryCatalog(schema_registry.url, topic, AUTH).id_for("alert")
    admin = SchemaRegistryClient({"url": schema_registry.url, **AUTH})
    subject = f"{topic}-io.epochwatch.events.v1.Alert"
    assert subject_name(topic, "alert") == subject
    assert admin.get_latest_version(subject).schema_id == schema_id
    again = RegistryCatalog(schema_registry.url, topic, AUTH)
    assert again.id_for("alert") == schema_id and len(admin.get_versions(subject)) == 1
    assert again.event_type_for(schema_id) == "alert"


def test_an_input_record_decodes_with_the_registrys_id(schema_registry):
    topic = fresh_topic()
    schema_id = RegistryCatalog(schema_registry.url, topic, AUTH).id_for("broker_heartbeat")
    batch, dead = decode_batch(RegistryCatalog(schema_registry.url, topic, AUTH), schema_id)
    assert dead == [] and batch.column("broker_id").to_pylist() == [3]


def test_an_unknown_id_is_a_dead_letter_at_once(schema_registry):
    time = FakeTime()
    catalog = RegistryCatalog(schema_registry.url, fresh_topic(), AUTH, sleep=time.sleep, clock=time.clock)
    with pytest.raises(DecodeError) as err:
        catalog.event_type_for(987_654)
    assert err.value.reason == "unknown_schema_id" and time.sleeps == []


def test_a_schema_of_another_namespace_is_not_an_event(schema_registry):
    foreign = {"type": "record", "name": "Order", "namespace": "com.example",
               "fields": [{"name": "id", "type": "long"}]}
    admin = SchemaRegistryClient({"url": schema_registry.url, **AUTH})
    schema_id = admin.register_schema(f"{fresh_topic()}-com.example.Order", Schema(json.dumps(foreign), "AVRO"))
    batch, dead = decode_batch(RegistryCatalog(schema_registry.url, "events", AUTH), schema_id)
    assert [(d.reason, "com.example.Order" in d.detail) for d in dead] == [("unknown_event_type", True)]


@pytest.mark.parametrize("conf", [{"basic.auth.user.info": f"{USER}:wrong-pw-91c2"}, {}],
                         ids=["wrong password", "no credentials"])
def test_refused_credentials_fail_at_once_naming_the_setting_and_are_no_dead_letter(schema_registry, conf):
    """Why: a 401 is retried by nothing and cured by no wait: the writer stops with the setting to
    fix, and the reader fails its task instead of sending valid records to the dead letters."""
    known = RegistryCatalog(schema_registry.url, "events", AUTH).id_for("broker_heartbeat")
    time = FakeTime()
    catalog = RegistryCatalog(schema_registry.url, fresh_topic(), conf, sleep=time.sleep, clock=time.clock)
    with pytest.raises(RegistryRefused) as err:
        catalog.id_for("alert")
    assert "HTTP 401" in str(err.value) and "schema.registry.basic.auth.user.info" in str(err.value)
    assert "wrong-pw" not in str(err.value) and time.sleeps == []
    with pytest.raises(RegistryRefused):
        decode_batch(catalog, known)


def test_a_registry_that_stops_answering_is_waited_for_and_said_so(schema_registry_factory, caplog):
    """Why: a paused registry (a GC pause, a failover) accepts connections and answers nothing:
    each request ends at the attempt timeout (fetchOffset.timeoutMs), the lookup is asked again,
    a WARNING says the records wait, another that it answers again, and the record decodes."""
    caplog.set_level(logging.WARNING)
    registry = schema_registry_factory()
    schema_id = RegistryCatalog(registry.url, "events", AUTH).id_for("broker_heartbeat")
    catalog = RegistryCatalog(registry.url, "events", AUTH, retry=RetryPolicy(attempt_timeout_ms=500))
    registry.pause()
    outcome = {}
    reading = threading.Thread(target=lambda: outcome.update(result=decode_batch(catalog, schema_id)), daemon=True)
    try:
        reading.start()
        wait_until(lambda: f"Schema Registry {registry.url} unreachable" in caplog.text, timeout_s=30,
                   what="the waiting WARNING")
        assert reading.is_alive()
    finally:
        registry.resume()
    reading.join(60)
    batch, dead = outcome["result"]
    assert dead == [] and batch.column("event_type").to_pylist() == ["broker_heartbeat"]
    assert f"Schema Registry {registry.url} answering again" in caplog.text and PASSWORD not in caplog.text


def test_a_registry_gone_for_longer_than_the_longest_wait_is_an_error_naming_it(schema_registry_factory):
    registry = schema_registry_factory()
    url = registry.url
    registry.stop()
    catalog = RegistryCatalog(url, fresh_topic(), AUTH, retry=RetryPolicy(attempt_timeout_ms=500, max_wait_ms=1500))
    with pytest.raises(RegistryUnavailable) as err:
        catalog.id_for("alert")
    assert "brokerUnavailable.maxWaitMs=1500" in str(err.value)


class FailingRegistry:
    """GET /schemas/ids/{id}: ``failures`` answers of ``status`` first, then the heartbeat schema
    (any id). For the statuses a real registry gives only when it is in trouble."""

    def __init__(self, failures: int, status: int):
        self.failures, self.status, self.requests = failures, status, 0
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                registry.requests += 1
                if registry.requests <= registry.failures:
                    return self._answer(registry.status, {"error_code": 50301, "message": "unavailable"})
                return self._answer(200, {"schema": json.dumps(events.raw_schema("broker_heartbeat"))})

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://user:s3cret@127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [503, 500, 429])
def test_a_registry_in_trouble_is_asked_again_with_backoff_and_the_record_decodes(status, caplog):
    registry = FailingRegistry(failures=3, status=status)
    time = FakeTime()
    try:
        catalog = RegistryCatalog(registry.url, "events", retry=RetryPolicy(retry_interval_ms=10),
                                  sleep=time.sleep, clock=time.clock)
        batch, dead = decode_batch(catalog, 41)
    finally:
        registry.close()
    assert dead == [] and batch.column("event_type").to_pylist() == ["broker_heartbeat"]
    assert time.sleeps == [0.01, 0.02, 0.04], "three failures, three pauses, each twice the last"
    assert "Schema Registry http://***@127.0.0.1" in caplog.text and "s3cret" not in caplog.text


def test_the_catalogs_repr_shows_no_credentials(schema_registry):
    assert PASSWORD not in repr(RegistryCatalog(schema_registry.url, "events", AUTH))
