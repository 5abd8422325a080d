"""The event contract: event types, their Avro schemas (package data) and JSON Lines I/O.

Events are plain dicts keyed by the Avro field names plus ``event_type``; ``event_time``
(and an alert's ``starts_at`` / ``ends_at``) are integer UTC milliseconds everywhere in
the pipeline. JSON Lines input may also give them as ISO-8601 strings.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import IO, Iterable, Iterator

import fastavro

SCHEMA_VERSION = "v1"
NAMESPACE = "io.epochwatch.events.v1"

INPUT_EVENT_TYPES = (
    "broker_heartbeat",
    "metadata_update",
    "metadata_response",
    "metadata_request_failed",
    "client_rebootstrap",
    "connection_attempt",
    "offset_commit",
    "cluster_reset",  # a control record: epochwatch reset-cluster
)
OUTPUT_EVENT_TYPES = ("alert",)
EVENT_TYPES = INPUT_EVENT_TYPES + OUTPUT_EVENT_TYPES

BROKER_STATES = ("INITIAL", "INACTIVE", "ACTIVE", "STOPPING")
TIMESTAMP_FIELDS = ("event_time", "starts_at", "ends_at")

CLUSTER_RESET = "cluster_reset"

# Kafka error codes the rules look at (org.apache.kafka.common.protocol.Errors).
STALE_BROKER_EPOCH = 77
DUPLICATE_BROKER_REGISTRATION = 101
BROKER_ID_NOT_REGISTERED = 102
INCONSISTENT_CLUSTER_ID = 104
REBOOTSTRAP_REQUIRED = 129
# KIP-343's INVALID_INCARNATION_ID never got a code in released Kafka; epochwatch uses this one.
INVALID_INCARNATION_ID = 1001

# A heartbeat's incarnation when its sender could not tell which process sent it (the collector
# before a broker's start time is seen): it counts for the broker's current incarnation, and the
# first real one after it is learned, not a restart.
UNKNOWN_INCARNATION = 0


# The longest id (every string field of an event is one: cluster, client, group, topic, event
# and incarnation ids) in UTF-8 bytes, Kafka's own limit for a topic name. Longer ones are refused
# at decode (dead-letter reason ``id_too_long``): ids end up in state rows, alert labels and alert
# records, and a producer must not be able to make those grow without bound.
MAX_ID_BYTES = 255
ID_TOO_LONG = "id_too_long"


class EventError(ValueError):
    """An event that does not match the contract; the message says which field and why."""


class IdTooLong(EventError):
    """An id longer than MAX_ID_BYTES (dead-letter reason ``id_too_long``)."""


def record_name(event_type: str) -> str:
    return "".join(part.capitalize() for part in event_type.split("_"))


def event_type_of_record(name: str) -> str:
    short = name.rsplit(".", 1)[-1]
    out = [short[0].lower()]
    for ch in short[1:]:
        out.append("_" + ch.lower() if ch.isupper() else ch)
    return "".join(out)


@cache
def raw_schema(event_type: str) -> dict:
    """The .avsc document of an event type, as shipped (with logical types)."""
    if event_type not in EVENT_TYPES:
        raise EventError(f"unknown event_type {event_type!r}; expected one of {', '.join(EVENT_TYPES)}")
    text = resources.files("streaming.schemas").joinpath(SCHEMA_VERSION, f"{event_type}.avsc").read_text()
    return json.loads(text)


def _strip_logical_types(node):
    if isinstance(node, dict):
        return {k: _strip_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_strip_logical_types(v) for v in node]
    return node


@cache
def parsed_schema(event_type: str) -> dict:
    """fastavro-parsed schema with timestamp logical types removed.

    The binary encoding is identical (a long), and keeping timestamps as integer
    milliseconds avoids a datetime round trip per event on the hot path.
    """
    return fastavro.parse_schema(_strip_logical_types(copy.deepcopy(raw_schema(event_type))))


@cache
def field_names(event_type: str) -> tuple[str, ...]:
    return tuple(f["name"] for f in raw_schema(event_type)["fields"])


@cache
def required_fields(event_type: str) -> frozenset[str]:
    return frozenset(f["name"] for f in raw_schema(event_type)["fields"] if "default" not in f)


@cache
def string_fields(event_type: str) -> tuple[str, ...]:
    """The fields of an event type whose value is a string (nullable or not): its ids."""
    def is_string(schema) -> bool:
        return schema == "string" or isinstance(schema, list) and "string" in schema

    return tuple(f["name"] for f in raw_schema(event_type)["fields"] if is_string(f["type"]))


def too_long_id(event: dict) -> str | None:
    """Why the event has an id longer than MAX_ID_BYTES, or None."""
    for name in string_fields(event["event_type"]):
        value = event.get(name)
        # a UTF-8 character is at most 4 bytes: short text needs no encoding to be measured
        if value is not None and len(value) * 4 > MAX_ID_BYTES:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_ID_BYTES:
                return f"{event['event_type']}: {name} is {size} bytes, an id may have at most {MAX_ID_BYTES}"
    return None


def to_millis(value, field: str = "event_time") -> int:
    """Integer UTC ms from an int, a float, or an ISO-8601 string (``Z`` or offset)."""
    if isinstance(value, bool):
        raise EventError(f"{field}: expected epoch milliseconds or ISO-8601 text, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise EventError(f"{field}: {value!r} is not ISO-8601 (e.g. 2026-11-21T07:30:00.123Z)") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return int(parsed.timestamp() * 1000)
    raise EventError(f"{field}: expected epoch milliseconds or ISO-8601 text, got {type(value).__name__}")


def normalize(obj: dict) -> dict:
    """Check a dict against its event type's schema and return the canonical event.

    Raises EventError naming the offending field; unknown fields are rejected so that a
    typo in a producer does not silently become a null.
    """
    if not isinstance(obj, dict):
        raise EventError(f"expected a JSON object, got {type(obj).__name__}")
    event_type = obj.get("event_type")
    if event_type not in EVENT_TYPES:
        raise EventError(f"event_type: {event_type!r} is not one of {', '.join(EVENT_TYPES)}")
    names = field_names(event_type)
    unknown = set(obj) - set(names) - {"event_type"}
    if unknown:
        raise EventError(f"{event_type}: unknown field(s) {', '.join(sorted(unknown))}")
    missing = required_fields(event_type) - set(obj)
    if missing:
        raise EventError(f"{event_type}: missing required field(s) {', '.join(sorted(missing))}")
    event = {"event_type": event_type}
    for name in names:
        value = obj.get(name)
        if name in TIMESTAMP_FIELDS and value is not None:
            value = to_millis(value, name)
        event[name] = value
    for f in raw_schema(event_type)["fields"]:
        if event[f["name"]] is None and "default" in f:
            event[f["name"]] = f["default"]
    try:
        fastavro.validation.validate(avro_record(event), parsed_schema(event_type), raise_errors=True)
    except fastavro.validation.ValidationError as exc:
        raise EventError(f"{event_type}: {_validation_reason(exc)}") from None
    too_long = too_long_id(event)
    if too_long:
        raise IdTooLong(too_long)
    return event


def _validation_reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None) or [str(exc)]
    return "; ".join(str(e) for e in errors)[:500]


def avro_record(event: dict) -> dict:
    """The Avro payload of an event (everything but ``event_type``)."""
    return {k: v for k, v in event.items() if k != "event_type"}


def from_avro_record(event_type: str, record: dict) -> dict:
    event = {"event_type": event_type}
    event.update(record)
    return event


# --- JSON Lines -------------------------------------------------------------------------

def dumps(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"), sort_keys=False)


def write_jsonl(events: Iterable[dict], stream: IO[str]) -> int:
    count = 0
    for event in events:
        stream.write(dumps(event))
        stream.write("\n")
        count += 1
    return count


class JsonLinesError(EventError):
    """A line that is not an event: ``reason`` says why, ``code`` is its dead-letter reason."""

    def __init__(self, line_no: int, reason: str, raw: str, code: str = "bad_json_line"):
        super().__init__(f"line {line_no}: {reason}")
        self.line_no = line_no
        self.reason = reason
        self.raw = raw
        self.code = code


def json_lines(stream: IO[str]) -> Iterator[tuple[int, str, object | JsonLinesError]]:
    """Every JSON Lines file the project reads (recordings, alerts, transitions): (line number,
    text, the value or a JsonLinesError for a line that is no JSON). Blank lines and lines
    starting with ``#`` are skipped."""
    for line_no, line in enumerate(stream, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            yield line_no, text, json.loads(text)
        except json.JSONDecodeError as exc:
            yield line_no, text, JsonLinesError(line_no, f"not JSON: {exc.msg} at column {exc.colno}", text)


def read_jsonl(stream: IO[str], *, validate: bool = True) -> Iterator[dict | JsonLinesError]:
    """Yield events, or a JsonLinesError for a bad line (the caller decides: DLQ or stop)."""
    for line_no, text, obj in json_lines(stream):
        if not validate or isinstance(obj, JsonLinesError):
            yield obj
            continue
        try:
            yield normalize(obj)
        except IdTooLong as exc:
            yield JsonLinesError(line_no, str(exc), text, code=ID_TOO_LONG)
        except EventError as exc:
            yield JsonLinesError(line_no, str(exc), text)
