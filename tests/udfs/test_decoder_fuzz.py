"""Hostile bytes against the decoders (property-based).

``udfs.avro_codec.decode`` either returns a dict of a known event type, with exactly that type's
fields, or raises DecodeError with a documented reason: never another exception, never a hang.
``udfs.record_batches.decoded_batch`` never raises: every message becomes a row or a dead letter,
and its verdict agrees with ``avro_codec.decode`` (the batch hot path and the per-record decoder
are two implementations of one contract, so each is the other's oracle).

The regular tests at the end pin three bugs the properties found (int fields beyond their Avro
range; values Arrow cannot hold made ``decoded_batch`` raise for the whole batch).
"""

from __future__ import annotations

import copy
import io
import struct

import fastavro
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streaming import events
from tests.support.event_strategies import (
    INT64_MAX,
    INT64_MIN,
    SPARK_MAX_MS,
    alert_events,
    examples,
    hang_timeout_s,
    input_events,
)
from udfs import avro_codec, record_batches
from udfs.avro_codec import DecodeError

pytestmark = pytest.mark.timeout(hang_timeout_s(300))  # a hang fails the test instead of blocking the run

DOCUMENTED_REASONS = {"null_value", "truncated_header", "bad_magic_byte", "unknown_schema_id", "unknown_event_type",
                      "truncated_avro", "bad_avro", "trailing_bytes", "id_too_long"}
SCHEMA_IDS = {t: avro_codec.builtin_catalog().id_for(t) for t in events.EVENT_TYPES}
OUTPUT_SCHEMA_IDS = {SCHEMA_IDS[t] for t in events.OUTPUT_EVENT_TYPES}
FAST = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- hostile values ----------------------------------------------------------------------------

any_event = st.one_of(input_events, input_events, alert_events)
encoded = any_event.map(avro_codec.encode)
schema_ids = st.one_of(st.sampled_from(sorted(SCHEMA_IDS.values())), st.sampled_from([0, 9, 2**31, 2**32 - 1]),
                       st.integers(0, 2**32 - 1))


def varint(n: int) -> bytes:
    """Avro's zig-zag varint of any Python int (also beyond 64 bits: hostile lengths)."""
    z = (n << 1) ^ (n >> 70) if n < 0 else n << 1
    out = bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        out.append(byte | (0x80 if z else 0))
        if not z:
            return bytes(out)


@st.composite
def truncated(draw) -> bytes:
    value = draw(encoded)
    return value[:draw(st.integers(0, len(value) - 1))]


@st.composite
def bit_flipped(draw) -> bytes:
    value = bytearray(draw(encoded))
    for bit in draw(st.lists(st.integers(0, len(value) * 8 - 1), min_size=1, max_size=4)):
        value[bit // 8] ^= 1 << (bit % 8)
    return bytes(value)


@st.composite
def wrong_schema_id(draw) -> bytes:
    """A valid body framed with another (or an unknown) schema id."""
    value = draw(encoded)
    return value[:1] + struct.pack(">I", draw(schema_ids)) + value[5:]


@st.composite
def huge_length_claim(draw) -> bytes:
    """A header and a varint that claims a gigantic string / map / long, then little or nothing."""
    header = b"\x00" + struct.pack(">I", draw(st.sampled_from(sorted(SCHEMA_IDS.values()))))
    claim = draw(st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1, -(2**62), 2**64 + 5, 2**100]))
    return header + varint(claim) + draw(st.binary(max_size=16))


@st.composite
def huge_record(draw) -> bytes:
    """A valid record with one string of a megabyte."""
    ev = dict(draw(input_events))
    ev["cluster_id"] = "x" * 1_000_000
    return avro_codec.encode(ev)


hostile_values = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.binary(max_size=300).map(lambda body: b"\x00" + body),  # right magic byte, anything after
    st.tuples(schema_ids, st.binary(max_size=200)).map(lambda t: b"\x00" + struct.pack(">I", t[0]) + t[1]),
    encoded,
    truncated(),
    bit_flipped(),
    wrong_schema_id(),
    huge_length_claim(),
    encoded.map(lambda v: v + b"\x00"),
    st.tuples(input_events, st.sampled_from([2**62, -(2**62), INT64_MAX, INT64_MIN])).map(
        lambda t: avro_codec.encode({**t[0], "event_time": t[1]})),  # valid Avro, beyond Spark's timestamps
)


# --- the contract ------------------------------------------------------------------------------

def outcome(value: bytes | None) -> tuple[str, dict | str]:
    """('event', dict) or ('dead', reason); any other exception escapes and fails the test."""
    try:
        return "event", avro_codec.decode(value)
    except DecodeError as exc:
        return "dead", exc.reason


def assert_known_event(record: dict) -> None:
    assert record["event_type"] in events.EVENT_TYPES
    assert set(record) == {"event_type", *events.field_names(record["event_type"])}


def assert_contract(value: bytes | None) -> None:
    kind, result = outcome(value)
    if kind == "event":
        assert_known_event(result)
    else:
        assert result in DOCUMENTED_REASONS, result


@FAST
@given(hostile_values)
@example(None)
@example(b"")
@example(b"\x00\x00\x00\x00\x01")  # a heartbeat header with no body
def test_decode_returns_a_known_event_or_raises_decode_error(value):
    assert_contract(value)


@FAST
@given(any_event)
def test_every_valid_event_round_trips(event):
    assert avro_codec.decode(avro_codec.encode(event)) == event


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(huge_record())
def test_a_megabyte_id_is_refused_with_its_reason(value):
    """Was: the record decoded, and its megabyte cluster id went on into state and alerts. Ids are
    at most events.MAX_ID_BYTES now (issue #22): the decoder reads it and refuses it."""
    assert outcome(value) == ("dead", "id_too_long")


def test_hostile_length_claims_fail_fast_with_a_reason():
    """Why: a length prefix of 2**62 must not make the decoder allocate or wait for that much."""
    for event_type, schema_id in SCHEMA_IDS.items():
        for claim in (2**31, 2**62, 2**63 - 1, -(2**62), 2**100):
            kind, reason = outcome(b"\x00" + struct.pack(">I", schema_id) + varint(claim))
            assert (kind, reason in DOCUMENTED_REASONS) == ("dead", True), (event_type, claim, reason)


# --- decoded_batch: rows or dead letters, never an exception ------------------------------------

def message(offset: int, value: bytes | None, headers=None) -> Message:
    return Message(topic="events", partition=0, offset=offset, key=f"k{offset}".encode(), value=value,
                   headers=headers, timestamp=(1, 1_790_000_000_000))


def expected_verdict(value: bytes | None) -> tuple[str, str]:
    """What the batch must make of a value: ('row', event_type) or ('dead', reason)."""
    framed = value is not None and len(value) >= 5 and value[0] == avro_codec.MAGIC_BYTE
    if framed and int.from_bytes(value[1:5], "big") in OUTPUT_SCHEMA_IDS:
        return "dead", "unknown_event_type"  # an alert's schema in the events topic: its body is not read
    kind, result = outcome(value)
    if kind == "dead":
        return "dead", result
    return verdict_on_decoded(result)


def verdict_on_decoded(event: dict) -> tuple[str, str]:
    if abs(event["event_time"]) > SPARK_MAX_MS:
        return "dead", "event_time_out_of_range"  # valid Avro, but no Spark timestamp holds it
    return "row", event["event_type"]


def assert_batch(messages: list[Message], expected: list[tuple[str, str]], keep_rows: bool, decoder) -> None:
    batch, dead = record_batches.decoded_batch(messages, decoder, keep_rows)
    dead_expected = [(m.offset(), why) for m, (kind, why) in zip(messages, expected) if kind == "dead"]
    assert [(d.offset, d.reason) for d in dead] == dead_expected
    assert all(d.value == m.value() and d.key == m.key()
               for d, m in zip(dead, [m for m, (k, _) in zip(messages, expected) if k == "dead"]))
    kept = [(m, e) for m, e in zip(messages, expected) if keep_rows or e[0] == "row"]
    if not kept:
        assert batch is None
        return
    # event_time can be beyond what a Python datetime holds (year 10000): read the other columns
    rows = batch.select(["event_type", "dlq_reason", "kafka_offset", "raw_value"]).to_pylist()
    assert [r["kafka_offset"] for r in rows] == [m.offset() for m, _ in kept]
    for row, (m, (kind, what)) in zip(rows, kept):
        if kind == "row":
            assert (row["event_type"], row["dlq_reason"]) == (what, None)
        else:
            assert (row["event_type"], row["dlq_reason"], row["raw_value"]) == (None, what, m.value())


@FAST
@given(st.lists(hostile_values, max_size=12), st.booleans())
def test_decoded_batch_turns_every_message_into_a_row_or_a_dead_letter(values, keep_rows):
    messages = [message(i, v) for i, v in enumerate(values)]
    if messages:
        assert_batch(messages, [expected_verdict(v) for v in values], keep_rows, record_batches.confluent_decoder())


def _schemaless_expected(value: bytes | None, header: str | None) -> tuple[str, str]:
    if header in events.EVENT_TYPES and header not in events.INPUT_EVENT_TYPES:
        return "dead", "unknown_event_type"
    try:
        event = avro_codec.decode_schemaless(value, header)
    except DecodeError as exc:
        return "dead", exc.reason
    return verdict_on_decoded(event)


schemaless_messages = st.tuples(
    st.one_of(st.none(), st.binary(max_size=80), any_event.map(avro_codec.encode_schemaless),
              bit_flipped().map(lambda v: v[5:])),
    st.one_of(st.none(), st.sampled_from(events.EVENT_TYPES), st.sampled_from(["", "Broker_Heartbeat", "x" * 100])),
)


@FAST
@given(st.lists(schemaless_messages, max_size=12), st.booleans())
def test_schemaless_batch_turns_every_message_into_a_row_or_a_dead_letter(pairs, keep_rows):
    messages = [message(i, v, None if h is None else [("event_type", h.encode())]) for i, (v, h) in enumerate(pairs)]
    if messages:
        assert_batch(messages, [_schemaless_expected(v, h) for v, h in pairs], keep_rows,
                     record_batches.schemaless_decoder())


# --- found by the properties: the failing examples, as regular tests --------------------------------------------

HEARTBEAT = events.normalize({
    "event_type": "broker_heartbeat", "event_id": "e-1", "cluster_id": "c1", "event_time": 1_790_000_000_000,
    "controller_id": 1, "controller_epoch": 4, "broker_id": 3, "incarnation_id": 17, "target_state": "ACTIVE"})


def heartbeat_with_broker_id_varint(broker_id: int) -> bytes:
    """Wire bytes of HEARTBEAT whose broker_id varint holds a 64-bit value (Avro int is 32 bits):
    written with the heartbeat schema where broker_id is a long; the bytes differ only there."""
    schema = copy.deepcopy(events.raw_schema("broker_heartbeat"))
    for field in schema["fields"]:
        if field["name"] == "broker_id":
            field["type"] = "long"
    buf = io.BytesIO()
    buf.write(avro_codec.HEADER.pack(avro_codec.MAGIC_BYTE, SCHEMA_IDS["broker_heartbeat"]))
    record = {**events.avro_record(HEARTBEAT), "broker_id": broker_id}
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()



def test_decode_rejects_an_int_field_beyond_32_bits():
    """Why: an Avro int is 32 bits; fastavro reads any varint, so broker_id 2**40 came back as a
    'valid' heartbeat that events.normalize rejects and Arrow cannot put in its int32 column."""
    value = heartbeat_with_broker_id_varint(2**40)
    assert avro_codec.decode(heartbeat_with_broker_id_varint(3)) == HEARTBEAT  # the framing is right
    assert outcome(value) == ("dead", "bad_avro")


def test_decoded_batch_dead_letters_an_int_field_beyond_32_bits():
    """Why: one such record raised ArrowInvalid for its whole batch; Spark retries the task and
    the query dies on it (a poison pill), instead of one dead letter."""
    good = avro_codec.encode(HEARTBEAT)
    messages = [message(0, good), message(1, heartbeat_with_broker_id_varint(2**40)), message(2, good)]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), True)
    assert [(d.offset, d.reason) for d in dead] == [(1, "bad_avro")]
    assert [r["event_type"] for r in batch.to_pylist()] == ["broker_heartbeat", None, "broker_heartbeat"]


def test_decoded_batch_dead_letters_an_event_time_beyond_sparks_timestamp_range():
    """Why: event_time 2**62 ms is valid Avro but no Spark timestamp (microseconds in a long) can
    hold it; the cast raised for the whole batch (poison pill) instead of one dead letter."""
    far = avro_codec.encode({**HEARTBEAT, "event_time": 2**62})
    messages = [message(0, avro_codec.encode(HEARTBEAT)), message(1, far)]
    batch, dead = record_batches.decoded_batch(messages, record_batches.confluent_decoder(), False)
    assert [(d.offset, d.reason) for d in dead] == [(1, "event_time_out_of_range")]
    assert batch.num_rows == 1


def test_schemaless_batch_dead_letters_an_event_time_beyond_sparks_timestamp_range():
    """Why: the same for schemaless values (the event type in a header); the property's expected
    verdict once missed it (found: a heartbeat whose event_time varint decoded out of that range)."""
    far = avro_codec.encode_schemaless({**HEARTBEAT, "event_time": 2**62})
    header = [("event_type", b"broker_heartbeat")]
    messages = [message(0, avro_codec.encode_schemaless(HEARTBEAT), header), message(1, far, header)]
    batch, dead = record_batches.decoded_batch(messages, record_batches.schemaless_decoder(), False)
    assert [(d.offset, d.reason) for d in dead] == [(1, "event_time_out_of_range")]
    assert batch.num_rows == 1
