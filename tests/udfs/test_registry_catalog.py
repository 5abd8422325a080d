"""The Schema Registry catalog (udfs.avro_codec.RegistryCatalog) against a loopback HTTP server
started here: a registry that answers 503 for a while, or times out, must not turn valid
records into dead letters (issue #22); only "no such id" (404) is the record's fault."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import Message

from streaming import events
from udfs import avro_codec, record_batches
from udfs.avro_codec import DecodeError, RegistryCatalog, RegistryUnavailable

SCHEMA_ID = 41
HEARTBEAT = events.normalize({
    "event_type": "broker_heartbeat", "event_id": "e-1", "cluster_id": "c1", "event_time": 1_790_000_000_123,
    "controller_id": 1, "controller_epoch": 4, "broker_id": 3, "incarnation_id": 17, "target_state": "ACTIVE"})


class Registry:
    """GET /schemas/ids/{id}: ``failures`` answers of ``status`` (or no answer in time, status
    None) first, then the heartbeat schema for SCHEMA_ID and 404 for any other id."""

    def __init__(self, failures: int, status: int | None = 503):
        self.failures, self.status, self.requests = failures, status, 0
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                registry.requests += 1
                if registry.requests <= registry.failures:
                    if registry.status is None:
                        threading.Event().wait(1.0)  # longer than the client's timeout
                        return
                    return self._answer(registry.status, {"error_code": 50301, "message": "unavailable"})
                if self.path.split("?")[0] != f"/schemas/ids/{SCHEMA_ID}":
                    return self._answer(404, {"error_code": 40403, "message": "Schema not found"})
                schema = json.dumps(events.raw_schema("broker_heartbeat"))
                return self._answer(200, {"schema": schema, "schemaType": "AVRO"})

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://user:s3cret@127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry_factory():
    made = []

    def make(failures: int, status: int | None = 503) -> Registry:
        made.append(Registry(failures, status))
        return made[-1]

    yield make
    for registry in made:
        registry.close()


def catalog(registry: Registry, pauses: list, **kwargs) -> RegistryCatalog:
    # the client's own retries off (each of them waits a second): this catalog's retries are tested
    return RegistryCatalog(registry.url, "events", {"max.retries": 0, "timeout": 0.3},
                           first_wait_s=0.01, sleep=pauses.append, **kwargs)


def wire(schema_id: int = SCHEMA_ID) -> bytes:
    return avro_codec.HEADER.pack(0, schema_id) + avro_codec.encode_schemaless(HEARTBEAT)


@pytest.mark.parametrize("status", [503, 500, None], ids=["503", "500", "timeout"])
def test_a_registry_that_fails_for_a_while_is_waited_for_and_the_record_decodes(registry_factory, status, caplog):
    registry = registry_factory(failures=3, status=status)
    pauses = []
    message = Message(topic="events", partition=0, offset=7, key=b"k", value=wire(), timestamp=(1, 1))
    batch, dead = record_batches.decoded_batch([message], record_batches.confluent_decoder(catalog(registry, pauses)),
                                               False)
    assert dead == [] and batch.column("event_type").to_pylist() == ["broker_heartbeat"]
    assert pauses == [0.01, 0.02, 0.04], "three failures, three pauses, each twice the last"
    assert "Schema Registry" in caplog.text and "s3cret" not in caplog.text


def test_an_unknown_id_is_a_dead_letter_at_once(registry_factory):
    pauses = []
    with pytest.raises(DecodeError) as err:
        catalog(registry_factory(failures=0), pauses).event_type_for(99)
    assert err.value.reason == "unknown_schema_id" and pauses == []
    assert "s3cret" not in str(err.value)


def test_the_longest_wait_ends_in_an_error_not_a_dead_letter(registry_factory):
    pauses = []
    with pytest.raises(RegistryUnavailable):
        catalog(registry_factory(failures=100), pauses, max_wait_s=0.05).event_type_for(SCHEMA_ID)
    assert sum(pauses) >= 0.05


def test_the_catalogs_repr_shows_no_credentials(registry_factory):
    assert "s3cret" not in repr(catalog(registry_factory(failures=0), []))
