"""Kafka messages -> Arrow batches (udfs.record_batches), with real confluent_kafka.Message objects."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from confluent_kafka import Message

from streaming import events
from udfs import avro_codec, event_columns, record_batches

HEARTBEAT = events.normalize({
    "event_type": "broker_heartbeat", "event_id": "e-1", "cluster_id": "c1", "event_time": 1_790_000_000_123,
    "controller_id": 1, "controller_epoch": 4, "broker_id": 3, "incarnation_id": 17, "target_state": "ACTIVE",
    "current_state": "ACTIVE", "want_fence": False,
})
COMMIT = events.normalize({
    "event_type": "offset_commit", "event_id": "e-2", "cluster_id": "c1", "event_time": 1_790_000_000_456,
    "group_id": "g", "topic": "orders", "partition": 3, "offset": 99, "metadata_epoch": -1,
})
ALERT = events.normalize({
    "event_type": "alert", "event_id": "fp:firing", "cluster_id": "c1", "event_time": 1, "alertname": "X",
    "severity": "info", "status": "firing", "labels": {}, "annotations": {}, "starts_at": 1, "fingerprint": "fp",
})


def message(offset: int, value: bytes | None, key: bytes | None = b"k", headers=None, stamp=(1, 1_790_000_001_000)):
    return Message(topic="events", partition=2, offset=offset, key=key, value=value, headers=headers, timestamp=stamp)


def test_raw_batch_has_sparks_kafka_columns():
    batch = record_batches.raw_batch([
        message(7, b"v1", headers=[("event_type", b"x"), ("empty", None)]),
        message(8, None, key=None, stamp=(0, -1)),
    ])
    assert batch.schema == event_columns.arrow_schema(False)
    rows = batch.to_pylist()
    assert rows[0]["key"] == b"k" and rows[0]["value"] == b"v1" and rows[0]["offset"] == 7
    assert (rows[0]["topic"], rows[0]["partition"], rows[0]["timestampType"]) == ("events", 2, 0)
    assert rows[0]["timestamp"] == datetime(2026, 9, 21, 14, 13, 21, tzinfo=timezone.utc)
    assert rows[0]["headers"] == [{"key": "event_type", "value": b"x"}, {"key": "empty", "value": None}]
    assert rows[1]["value"] is None and rows[1]["timestamp"] is None and rows[1]["timestampType"] is None


def test_decoded_batch_fills_each_event_types_columns_and_keeps_order():
    messages = [message(1, avro_codec.encode(HEARTBEAT)), message(2, avro_codec.encode(COMMIT))]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), True)
    assert dead == [] and batch.schema == event_columns.arrow_schema(True)
    heartbeat, commit = batch.to_pylist()
    assert heartbeat["event_type"] == "broker_heartbeat" and heartbeat["broker_id"] == 3
    assert heartbeat["event_time"] == datetime.fromtimestamp(1_790_000_000.123, timezone.utc)
    assert heartbeat["want_fence"] is False and heartbeat["group_id"] is None
    assert commit["event_type"] == "offset_commit" and commit["offset"] == 99 and commit["broker_id"] is None
    assert (commit["kafka_topic"], commit["kafka_partition"], commit["kafka_offset"]) == ("events", 2, 2)
    assert commit["dlq_reason"] is None and commit["raw_value"] is None


GOOD = avro_codec.encode(HEARTBEAT)


@pytest.mark.parametrize("value, reason, why", [
    (b"\x01" + GOOD[1:], "bad_magic_byte", "not the Confluent wire format"),
    (GOOD[:1] + (999).to_bytes(4, "big") + GOOD[5:], "unknown_schema_id", "id not in the catalog"),
    (GOOD[:-3], "truncated_avro", "cut short"),
    (GOOD + b"\x00", "trailing_bytes", "bytes after the record"),
    (avro_codec.encode(ALERT), "unknown_event_type", "alert is an output type, not an input"),
    (None, "null_value", "tombstone"),
    (b"\x00\x00", "truncated_header", "shorter than the header"),
])
def test_malformed_records_become_dead_letter_rows(value, reason, why):
    messages = [message(1, GOOD), message(2, value, key=b"bad-key"), message(3, GOOD)]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), True)
    assert [d.reason for d in dead] == [reason], why
    assert (dead[0].offset, dead[0].key, dead[0].value) == (2, b"bad-key", value), why
    rows = batch.to_pylist()
    assert [r["event_type"] for r in rows] == ["broker_heartbeat", None, "broker_heartbeat"], why
    assert rows[1]["dlq_reason"] == reason and rows[1]["dlq_detail"], why
    assert (rows[1]["raw_key"], rows[1]["raw_value"], rows[1]["kafka_offset"]) == (b"bad-key", value, 2), why


def test_dead_letters_left_out_of_the_batch_when_the_source_produces_them():
    messages = [message(1, b"junk"), message(2, GOOD)]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), False)
    assert [d.offset for d in dead] == [1]
    assert batch.num_rows == 1 and batch.column("kafka_offset").to_pylist() == [2]
    only_junk, dead = record_batches.decoded_batch([message(1, b"junk")], record_batches.confluent_decoder(), False)
    assert only_junk is None and len(dead) == 1


@pytest.mark.parametrize("headers, reason, why", [
    ([("event_type", b"broker_heartbeat")], None, "event type from the header"),
    ([("other", b"1")], "unknown_event_type", "header missing"),
    ([("event_type", b"nope")], "unknown_event_type", "not an event type"),
])
def test_schemaless_decoder_reads_the_event_type_header(headers, reason, why):
    value = avro_codec.encode_schemaless(HEARTBEAT)
    batch, dead = record_batches.decoded_batch([message(5, value, headers=headers)],
                                               record_batches.schemaless_decoder(), True)
    assert [d.reason for d in dead] == ([reason] if reason else []), why
    assert batch.to_pylist()[0]["event_type"] == (None if reason else "broker_heartbeat"), why


def test_an_id_longer_than_255_bytes_is_a_dead_letter_on_the_fast_path_too():
    """Why: the batch decoder reads with fastavro directly (not avro_codec.decode); a record long
    enough to hold a long id must still be refused, with the reason avro_codec names."""
    longest = {**HEARTBEAT, "cluster_id": "c" * events.MAX_ID_BYTES}
    hostile = {**COMMIT, "group_id": "g" * 300_000}
    messages = [message(1, avro_codec.encode(longest)), message(2, avro_codec.encode(hostile))]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), False)
    assert [row["cluster_id"] for row in batch.to_pylist()] == ["c" * events.MAX_ID_BYTES]
    assert [(d.offset, d.reason) for d in dead] == [(2, "id_too_long")]
    assert "group_id is 300000 bytes" in dead[0].detail
