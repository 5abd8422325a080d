"""Writing to Kafka: the ``epochwatch-kafka-sink`` Spark data source and ``EventProducer`` for
foreachBatch.

Delivery guarantee, honestly: **at-least-once, with stable keys and event ids**. Every producer is
idempotent (``enable.idempotence=true``, ``acks=all``), so librdkafka's own retries never write a
record twice, and a write flushes and raises on any delivery error, so a failed Spark task or
foreachBatch is retried rather than reported done. A micro-batch replayed after a crash is sent
again, though: it rewrites the same records under the same keys. An alert's key is its
``fingerprint`` and its ``event_id`` is ``{fingerprint}:{status}`` (docs/CONTRACTS.md), so on a
compacted alerts topic the replay converges to one record per incident, and consumers that
remember event ids see each transition once. There are no Kafka transactions here
(exactly-once would need a transactional producer per task and read_committed consumers).

Sink input, like Spark's Kafka sink: a ``value`` column (binary or string) with optional ``key``,
``topic``, ``partition`` and ``headers`` (array<struct<key:string,value:binary>>) columns; or an
``alert`` struct column (the alert event's fields) that the sink encodes to the wire format
(option ``encode``: avro, the default, or avro-schemaless) keyed by its fingerprint. The
``topic`` option, when set, overrides a topic column.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from udfs.kafka_options import OptionError, check_known, client_settings, registry_settings, shared_settings
from udfs.producing import DeliveryError, ReliableProducer

SINK_OPTIONS = ("topic", "encode")
ENCODINGS = ("avro", "avro-schemaless")
__all__ = ["KafkaEventSink", "EventProducer", "DeliveryError", "event_key"]


def event_key(event: Mapping[str, Any]) -> str:
    """Kafka key of an event (docs/CONTRACTS.md): an alert's fingerprint, else
    ``{cluster_id}/{entity}`` so one entity's events stay in order in one partition."""
    event_type = event["event_type"]
    if event_type == "alert":
        return event["fingerprint"]
    if event_type in ("broker_heartbeat", "metadata_update"):
        entity = f"broker-{event['broker_id']}"
    elif event_type == "offset_commit":
        entity = f"group-{event['group_id']}"
    elif event_type == "cluster_reset":
        entity = "cluster"
    else:
        entity = f"client-{event['client_id']}"
    return f"{event['cluster_id']}/{entity}"


class EventProducer:
    """Driver-side producer of event dicts (alerts from foreachBatch, simulators, tools).

    ``send()`` encodes and enqueues; ``flush()`` waits and raises DeliveryError if any record
    was not acknowledged. See the module docstring for the delivery guarantee.
    """

    def __init__(self, bootstrap_servers: str, client_conf: Mapping[str, str] | None = None,
                 catalog=None, encoding: str = "avro", retry=None, what: str = "producing events"):
        """``retry`` (udfs.kafka_retry.RetryPolicy): flush() waits out an unreachable broker."""
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding {encoding!r}: use one of {', '.join(ENCODINGS)}")
        settings = shared_settings({**dict(client_conf or {}), "bootstrap.servers": bootstrap_servers})
        self._producer = ReliableProducer(settings, retry=retry, what=what)
        self._encode = _encoder(encoding, catalog)

    def send(self, events: Iterable[Mapping[str, Any]], topic: str,
             key_fn: Callable[[Mapping[str, Any]], str | None] = event_key) -> int:
        count = 0
        for event in events:
            value, headers = self._encode(event)
            key = key_fn(event) if key_fn else None
            self._producer.produce(topic, value=value, key=None if key is None else key.encode(), headers=headers)
            count += 1
        return count

    def flush(self) -> int:
        return self._producer.flush()


def _encoder(encoding: str, catalog) -> Callable[[Mapping[str, Any]], tuple[bytes, list | None]]:
    from udfs import avro_codec

    if encoding == "avro":
        return lambda event: (avro_codec.encode(event, catalog), None)
    return lambda event: (avro_codec.encode_schemaless(event),
                          [(avro_codec.EVENT_TYPE_HEADER, event["event_type"].encode())])


@dataclass(frozen=True)
class SinkOptions:
    client: Mapping[str, str]
    topic: str | None
    encode: str
    registry_url: str | None
    registry_client: Mapping[str, str]

    def __repr__(self) -> str:  # SASL / SSL passwords, registry userinfo: never in a log line
        from udfs.redact import redacted_repr

        return redacted_repr(self)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    check_known(options, SINK_OPTIONS, "the epochwatch-kafka-sink sink", strict=False)
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    encode = lowered.get("encode", "avro").strip().lower()
    if encode not in ENCODINGS:
        raise OptionError("encode", f"{encode!r} is not supported", f"use one of {', '.join(ENCODINGS)}")
    url, registry_client = registry_settings(options)
    return SinkOptions(shared_settings(client_settings(options)), lowered.get("topic") or None, encode, url,
                       registry_client)


def _check_columns(names: list[str], options: SinkOptions) -> None:
    if "alert" not in names and "value" not in names:
        raise OptionError("(columns)", f"the sink got columns {names}",
                          "select a 'value' column (with optional key, topic, partition, headers) "
                          "or an 'alert' struct column")
    if options.topic is None and "topic" not in names:
        raise OptionError("topic", "no topic option and no topic column",
                          '.option("topic", "epochwatch.alerts") or add a topic column')


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    records: int


class KafkaEventSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "epochwatch-kafka-sink"

    def streamWriter(self, schema, overwrite: bool) -> "KafkaStreamWriter":
        options = parse_sink_options(self.options)
        _check_columns(schema.fieldNames(), options)
        return KafkaStreamWriter(options)

    def writer(self, schema, overwrite: bool) -> "KafkaBatchWriter":
        options = parse_sink_options(self.options)
        _check_columns(schema.fieldNames(), options)
        return KafkaBatchWriter(options)


def write_batches(options: SinkOptions, batches: Iterator) -> SinkCommitMessage:
    """Produce every row of the Arrow batches, flush, raise on any delivery error (runs on executors)."""
    producer = ReliableProducer(options.client)
    encode = None
    for batch in batches:
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        topics = [options.topic] * batch.num_rows if options.topic else columns["topic"]
        if None in topics:
            raise ValueError("a row has a null topic column. Fix: fill the topic column or set the topic option")
        if "alert" in columns:
            if encode is None:
                encode = _encoder(options.encode, _catalog(options, topics[0] if topics else None))
            for topic, alert in zip(topics, columns["alert"]):
                event = alert_event(alert)
                value, headers = encode(event)
                producer.produce(topic, value=value, key=event["fingerprint"].encode(), headers=headers)
            continue
        keys = columns.get("key") or [None] * batch.num_rows
        headers = columns.get("headers") or [None] * batch.num_rows
        partitions = columns.get("partition") or [None] * batch.num_rows
        for topic, key, value, header, partition in zip(topics, keys, columns["value"], headers, partitions):
            producer.produce(topic, value=_as_bytes(value), key=_as_bytes(key),
                             headers=[(h["key"], h["value"]) for h in header] if header else None,
                             partition=partition)
    return SinkCommitMessage(producer.flush())


def _catalog(options: SinkOptions, topic: str | None):
    if not options.registry_url:
        return None
    from udfs.registry_catalog import RegistryCatalog

    return RegistryCatalog(options.registry_url, topic or "", dict(options.registry_client))


def _as_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode() if isinstance(value, str) else bytes(value)


def alert_event(alert: Mapping[str, Any]) -> dict:
    """The alert event dict of an ``alert`` struct as Arrow hands it over (timestamps as datetimes,
    maps as key/value pairs), checked against the alert schema."""
    from streaming import events

    event = {"event_type": "alert"}
    for name, value in alert.items():
        if isinstance(value, datetime):
            value = int((value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp() * 1000)
        elif isinstance(value, list) and name in ("labels", "annotations"):
            value = dict(value)
        event[name] = value
    event["event_type"] = "alert"
    return events.normalize(event)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator) -> SinkCommitMessage:
        return write_batches(self.options, iterator)


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator) -> SinkCommitMessage:
        return write_batches(self.options, iterator)
