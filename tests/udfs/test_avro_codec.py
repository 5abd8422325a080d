"""The wire format of udfs.avro_codec: Confluent framing round trips for every event type, the
schemaless variant, and every decode error reason (a table of numbered cases)."""

from __future__ import annotations

import json
import struct
from importlib import resources

import pytest

from streaming import events
from udfs import avro_codec
from udfs.avro_codec import DecodeError


def _value(name: str, schema, nullable_as_none: bool):
    if isinstance(schema, list):  # ["null", X]
        inner = next(s for s in schema if s != "null")
        return None if nullable_as_none else _value(name, inner, nullable_as_none)
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "enum":
            return schema["symbols"][-1]
        if kind == "map":
            return {"summary": f"{name} summary", "runbook_url": "https://example.invalid/x"}
        return _value(name, kind, nullable_as_none)
    if schema == "BrokerState":  # the named enum, referenced a second time
        return "STOPPING"
    return {"string": f"{name}-\u00e9\u6f22", "int": -7, "long": 1_767_225_600_123, "boolean": True}[schema]


def example_event(event_type: str, nullable_as_none: bool = False) -> dict:
    """A valid event of that type with every field set (or every nullable field null)."""
    raw = events.raw_schema(event_type)
    obj = {"event_type": event_type}
    for f in raw["fields"]:
        obj[f["name"]] = _value(f["name"], f["type"], nullable_as_none)
    return events.normalize(obj)


def builtin_ids() -> dict[str, int]:
    text = resources.files("streaming.schemas").joinpath("ids.json").read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


@pytest.mark.parametrize("nullable_as_none", [False, True], ids=["all-set", "nulls"])
@pytest.mark.parametrize("event_type", events.EVENT_TYPES)
def test_confluent_round_trip_of_every_event_type(event_type, nullable_as_none):
    event = example_event(event_type, nullable_as_none)
    wire = avro_codec.encode(event)
    assert wire[0] == avro_codec.MAGIC_BYTE
    assert struct.unpack(">I", wire[1:5])[0] == builtin_ids()[event_type]
    assert avro_codec.decode(wire) == event


@pytest.mark.parametrize("event_type", events.EVENT_TYPES)
def test_schemaless_round_trip_of_every_event_type(event_type):
    event = example_event(event_type)
    body = avro_codec.encode_schemaless(event)
    assert body == avro_codec.encode(event)[avro_codec.HEADER.size:]  # same Avro, no framing
    assert avro_codec.decode_schemaless(body, event_type) == event


def test_every_event_type_has_a_builtin_schema_id_and_ids_are_unique():
    ids = builtin_ids()
    assert sorted(ids) == sorted(events.EVENT_TYPES)
    assert len(set(ids.values())) == len(ids)


HEARTBEAT = example_event("broker_heartbeat")
WIRE = avro_codec.encode(HEARTBEAT)
BODY = WIRE[avro_codec.HEADER.size:]
FAILED = example_event("connection_attempt")


def _with_enum_index(event: dict, field: str, index: int) -> bytes:
    """The wire bytes of ``event`` with ``field``'s enum index replaced (zigzag varint)."""
    symbols = next(f["type"]["symbols"] for f in events.raw_schema(event["event_type"])["fields"] if f["name"] == field)
    wire = avro_codec.encode({**event, field: symbols[0]})
    marker = avro_codec.encode({**event, field: symbols[1]})
    at = next(i for i, (a, b) in enumerate(zip(wire, marker)) if a != b)
    return wire[:at] + bytes([index * 2]) + wire[at + 1:]


# (case, decode call, expected reason, why)
DECODE_ERRORS = [
    (1, lambda: avro_codec.decode(None), "null_value",
     "a tombstone has no value: there is nothing to decode"),
    (2, lambda: avro_codec.decode(b""), "truncated_header",
     "zero bytes cannot hold the 5-byte magic + schema id header"),
    (3, lambda: avro_codec.decode(WIRE[:4]), "truncated_header",
     "4 bytes: the schema id is cut"),
    (4, lambda: avro_codec.decode(b"\x01" + WIRE[1:]), "bad_magic_byte",
     "magic byte 1 is not the Confluent wire format (0)"),
    (5, lambda: avro_codec.decode(b"{" + WIRE[1:]), "bad_magic_byte",
     "a JSON value sent to an Avro topic starts with '{'"),
    (6, lambda: avro_codec.decode(struct.pack(">bI", 0, 999) + BODY), "unknown_schema_id",
     "schema id 999 is not in the built-in catalog"),
    (7, lambda: avro_codec.decode(WIRE[:-3]), "truncated_avro",
     "the Avro body ends inside the last field"),
    (8, lambda: avro_codec.decode(WIRE[:avro_codec.HEADER.size]), "truncated_avro",
     "a header and no body at all"),
    (9, lambda: avro_codec.decode(WIRE + b"\x00"), "trailing_bytes",
     "one byte left after a complete record means writer and reader disagree on the schema"),
    (10, lambda: avro_codec.decode_schemaless(BODY, "not_an_event"), "unknown_event_type",
     "schemaless: the event_type header names no event type"),
    (11, lambda: avro_codec.decode_schemaless(BODY, None), "unknown_event_type",
     "schemaless: the event_type header is missing"),
    (12, lambda: avro_codec.decode_schemaless(None, "broker_heartbeat"), "null_value",
     "schemaless tombstone"),
    (13, lambda: avro_codec.decode_schemaless(BODY[:-2], "broker_heartbeat"), "truncated_avro",
     "schemaless body cut short"),
    (14, lambda: avro_codec.decode_schemaless(BODY + b"\x02", "broker_heartbeat"), "trailing_bytes",
     "schemaless body with a byte too many"),
    (15, lambda: avro_codec.decode_schemaless(avro_codec.encode_schemaless(FAILED), "broker_heartbeat"),
     "bad_avro", "a connection_attempt body read as a heartbeat does not fit: an index out of range mid-record"),
    (16, lambda: avro_codec.decode(WIRE[:6] + b"\xff" * (WIRE[5] // 2) + WIRE[6 + WIRE[5] // 2:]), "bad_avro",
     "the event_id string (length byte 5, zigzag) is not UTF-8"),
    (17, lambda: avro_codec.decode(avro_codec.encode({**HEARTBEAT, "cluster_id": "c" * 256})), "id_too_long",
     "a cluster id of 256 bytes: one more than an id may have (events.MAX_ID_BYTES, Kafka's topic-name limit)"),
    (18, lambda: avro_codec.decode_schemaless(avro_codec.encode_schemaless({**HEARTBEAT, "event_id": "\u6f22" * 86}),
                                              "broker_heartbeat"), "id_too_long",
     "86 characters but 258 UTF-8 bytes: the limit is in bytes"),
    (19, lambda: avro_codec.decode(avro_codec.encode({**HEARTBEAT, "incarnation_uuid": "u" * 300_000})), "id_too_long",
     "a nullable string field is an id too"),
]


@pytest.mark.parametrize("case,call,reason,why", DECODE_ERRORS, ids=[f"case{c[0]}-{c[2]}" for c in DECODE_ERRORS])
def test_decode_error_reasons(case, call, reason, why):
    with pytest.raises(DecodeError) as info:
        call()
    assert info.value.reason == reason, f"case {case}: {why}; detail: {info.value.detail}"
    assert info.value.detail, f"case {case}: the detail must say what was wrong"


def test_a_reason_says_the_same_for_the_same_bytes_in_every_process():
    """Why: fastavro names the stream it read by its repr, with a memory address; the detail on a
    dead letter must not change from one decode of the same bytes to the next."""
    details = set()
    for _ in range(3):
        with pytest.raises(DecodeError) as info:
            avro_codec.decode_schemaless(BODY[:73], "broker_heartbeat")  # cut before a boolean
        details.add(info.value.detail)
    (detail,) = details
    assert " at 0x" not in detail and "from the record" in detail, detail


def test_out_of_range_enum_index_is_bad_avro_not_truncation():
    # Why: the outcome enum sits in the middle of the record; nothing is truncated.
    with pytest.raises(DecodeError) as info:
        avro_codec.decode(_with_enum_index(FAILED, "outcome", 9))
    assert info.value.reason == "bad_avro"


def test_a_registry_schema_subject_uses_topic_record_name_strategy():
    # Why: one topic carries every record type, so subjects must differ per record, not per topic.
    raw = events.raw_schema("broker_heartbeat")
    assert f"{raw['namespace']}.{raw['name']}" == "io.epochwatch.events.v1.BrokerHeartbeat"
    assert events.event_type_of_record("io.epochwatch.events.v1.MetadataRequestFailed") == "metadata_request_failed"
