"""Avro encoding of events: Confluent wire format (magic byte 0 + 4-byte schema id + Avro
binary) or schemaless (bare Avro binary, event type in the ``event_type`` Kafka header).

Schema ids come from a :class:`SchemaCatalog`: the built-in one (fixed ids shipped in
``streaming/schemas/ids.json``) or a Schema Registry (udfs.registry_catalog).
"""

from __future__ import annotations

import io
import json
import re
import struct
from functools import cache
from importlib import resources

import fastavro

from streaming import events

MAGIC_BYTE = 0
HEADER = struct.Struct(">bI")
EVENT_TYPE_HEADER = "event_type"


class DecodeError(ValueError):
    """A record that cannot be decoded; ``reason`` is a short machine-friendly code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SchemaCatalog:
    """Maps event types to schema ids and back."""

    def id_for(self, event_type: str) -> int:
        raise NotImplementedError

    def event_type_for(self, schema_id: int) -> str:
        raise NotImplementedError


class BuiltinCatalog(SchemaCatalog):
    def __init__(self):
        text = resources.files("streaming.schemas").joinpath("ids.json").read_text()
        self._ids = {k: int(v) for k, v in json.loads(text).items() if not k.startswith("_")}
        self._types = {v: k for k, v in self._ids.items()}

    def id_for(self, event_type: str) -> int:
        return self._ids[event_type]

    def event_type_for(self, schema_id: int) -> str:
        try:
            return self._types[schema_id]
        except KeyError:
            raise DecodeError("unknown_schema_id", f"schema id {schema_id} is not in the built-in catalog") from None


@cache
def builtin_catalog() -> BuiltinCatalog:
    return BuiltinCatalog()


def encode(event: dict, catalog: SchemaCatalog | None = None) -> bytes:
    """Confluent wire format bytes of an event dict (as produced by events.normalize)."""
    event_type = event["event_type"]
    catalog = catalog or builtin_catalog()
    buf = io.BytesIO()
    buf.write(HEADER.pack(MAGIC_BYTE, catalog.id_for(event_type)))
    fastavro.schemaless_writer(buf, events.parsed_schema(event_type), events.avro_record(event))
    return buf.getvalue()


def encode_schemaless(event: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, events.parsed_schema(event["event_type"]), events.avro_record(event))
    return buf.getvalue()


def decode(value: bytes | None, catalog: SchemaCatalog | None = None) -> dict:
    """Event dict from Confluent wire format bytes; raises DecodeError with a reason."""
    if value is None:
        raise DecodeError("null_value", "record has no value (tombstone)")
    if len(value) < HEADER.size:
        raise DecodeError("truncated_header", f"{len(value)} bytes, the wire format header needs {HEADER.size}")
    magic, schema_id = HEADER.unpack_from(value)
    if magic != MAGIC_BYTE:
        raise DecodeError("bad_magic_byte", f"first byte is {value[0]}, expected {MAGIC_BYTE}")
    event_type = (catalog or builtin_catalog()).event_type_for(schema_id)
    return _read(event_type, value, HEADER.size)


def decode_schemaless(value: bytes | None, event_type: str | None) -> dict:
    if value is None:
        raise DecodeError("null_value", "record has no value (tombstone)")
    if event_type not in events.EVENT_TYPES:
        raise DecodeError("unknown_event_type", f"header {EVENT_TYPE_HEADER}={event_type!r} is not an event type")
    return _read(event_type, value, 0)


def _message(exc: Exception) -> str:
    """fastavro names the stream it read by its repr (``<_io.BytesIO object at 0x7f...>``): the
    same record would get a different reason text in every process."""
    return _OBJECT_REPR.sub("the record", str(exc))


_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def _read(event_type: str, value: bytes, offset: int) -> dict:
    stream = io.BytesIO(value)
    stream.seek(offset)
    try:
        record = fastavro.schemaless_reader(stream, events.parsed_schema(event_type), None)
    except (EOFError, StopIteration, struct.error) as exc:
        raise DecodeError("truncated_avro", f"{event_type}: {type(exc).__name__} {_message(exc)}") from None
    except IndexError as exc:  # past the end (truncated) or an enum/union index out of range
        reason = "truncated_avro" if stream.tell() >= len(value) else "bad_avro"
        raise DecodeError(reason, f"{event_type}: IndexError {exc}") from None
    except (ValueError, UnicodeDecodeError, TypeError, OverflowError) as exc:
        raise DecodeError("bad_avro", f"{event_type}: {type(exc).__name__} {_message(exc)}") from None
    if stream.tell() != len(value):
        raise DecodeError("trailing_bytes", f"{event_type}: {len(value) - stream.tell()} bytes after the record")
    for name, low, high in _int_ranges(event_type):
        v = record[name]
        if v is not None and not low <= v <= high:  # fastavro reads any varint into an int / long
            raise DecodeError("bad_avro", f"{event_type}: {name}={v} is outside the Avro {_INT_KIND[low]} range")
    record["event_type"] = event_type
    too_long = events.too_long_id(record)
    if too_long:
        raise DecodeError(events.ID_TOO_LONG, too_long)
    return record


_INT_KIND = {-(2**31): "int", -(2**63): "long"}


@cache
def _int_ranges(event_type: str) -> tuple[tuple[str, int, int], ...]:
    """(field, low, high) of every int / long field (nullable too) of an event type's schema."""
    def bounds(schema):
        if isinstance(schema, list):
            return next(filter(None, map(bounds, schema)), None)
        if isinstance(schema, dict):
            return bounds(schema["type"]) if schema["type"] in ("int", "long") else None
        return {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}.get(schema)

    return tuple((f["name"], *b) for f in events.raw_schema(event_type)["fields"] if (b := bounds(f["type"])))
