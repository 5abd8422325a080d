"""The event contract (streaming.events): normalize, JSON Lines, ISO-8601 times, the examples and
field tables of docs/events.md, and a property test that random valid events survive every
format (normalize -> wire -> decode, schemaless, JSON Lines)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import events
from streaming.events import EventError, JsonLinesError
from udfs import avro_codec

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"
COMMON_FIELDS = ("event_id", "cluster_id", "event_time")


def doc_examples() -> list[dict]:
    """Every one-line JSON example of docs/events.md."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    return [json.loads(line) for block in blocks for line in block.splitlines() if line.strip()]


# --- docs/events.md stays true ------------------------------------------------------------------

def test_docs_have_an_example_line_for_every_event_type():
    assert {e["event_type"] for e in doc_examples()} == set(events.EVENT_TYPES)


@pytest.mark.parametrize("example", doc_examples(), ids=lambda e: f"{e['event_type']}-{e['event_id']}")
def test_every_doc_example_is_valid_and_round_trips(example):
    event = events.normalize(example)
    assert avro_codec.decode(avro_codec.encode(event)) == event
    assert avro_codec.decode_schemaless(avro_codec.encode_schemaless(event), event["event_type"]) == event
    assert _jsonl_round_trip([event]) == [event]


def _doc_section(event_type: str) -> str:
    text = DOC.read_text()
    start = text.index(f"### `{event_type}`")
    end = text.find("\n### ", start + 1)
    return text[start:end if end > 0 else len(text)]


@pytest.mark.parametrize("event_type", events.EVENT_TYPES)
def test_docs_field_table_lists_every_schema_field(event_type):
    section = _doc_section(event_type)
    common = DOC.read_text().split("### ")[0]
    for name in events.field_names(event_type):
        where = common if name in COMMON_FIELDS else section
        assert f"| `{name}` |" in where, f"docs/events.md: {event_type}.{name} missing from its field table"


# --- normalize: a table of numbered cases ----------------------------------------------------------

HB = {"event_type": "broker_heartbeat", "event_id": "e1", "cluster_id": "cluster-a", "event_time": 1_767_225_600_000,
      "controller_id": 3000, "controller_epoch": 5, "broker_id": 2, "incarnation_id": 1058, "target_state": "ACTIVE"}

# (case, input, expected event_time or error fragment, why)
NORMALIZE_CASES = [
    (1, HB, 1_767_225_600_000, "integer ms are kept as they are"),
    (2, {**HB, "event_time": "2026-01-01T00:00:00Z"}, 1_767_225_600_000, "ISO-8601 with Z is UTC"),
    (3, {**HB, "event_time": "2026-01-01T00:00:00.123Z"}, 1_767_225_600_123, "milliseconds survive"),
    (4, {**HB, "event_time": "2026-01-01T01:00:00+01:00"}, 1_767_225_600_000, "an offset is applied"),
    (5, {**HB, "event_time": "2026-01-01T00:00:00"}, 1_767_225_600_000, "no zone means UTC, not local time"),
    (6, {**HB, "event_time": 1_767_225_600_000.9}, 1_767_225_600_000, "float ms are truncated to whole ms"),
    (7, {**HB, "event_time": "yesterday"}, "event_time", "text that is not ISO-8601 names the field"),
    (8, {**HB, "event_time": True}, "event_time", "a boolean is not a time"),
    (9, {k: v for k, v in HB.items() if k != "broker_id"}, "missing required field(s) broker_id",
     "a required field cannot be defaulted"),
    (10, {**HB, "brokerid": 2}, "unknown field(s) brokerid", "a typo must not become a silent null"),
    (11, {**HB, "target_state": "RUNNING"}, "broker_heartbeat", "an enum accepts only its symbols"),
    (12, {**HB, "broker_id": "two"}, "broker_heartbeat", "an int field rejects text"),
    (13, {**HB, "event_type": "heartbeat"}, "event_type", "the event type must be one of the contract's"),
    (14, {k: v for k, v in HB.items() if k != "event_type"}, "event_type", "no event_type at all"),
    (15, ["not", "an", "object"], "JSON object", "a JSON array is not an event"),
]


@pytest.mark.parametrize("case,obj,expected,why", NORMALIZE_CASES, ids=[f"case{c[0]}" for c in NORMALIZE_CASES])
def test_normalize(case, obj, expected, why):
    if isinstance(expected, int):
        assert events.normalize(obj)["event_time"] == expected, f"case {case}: {why}"
    else:
        with pytest.raises(EventError, match=re.escape(expected)):
            events.normalize(obj)


def test_normalize_fills_defaults_and_keeps_schema_order():
    event = events.normalize(HB)
    assert list(event) == ["event_type", *events.field_names("broker_heartbeat")]
    assert event["error_code"] == 0 and event["current_state"] is None and event["want_fence"] is None


# --- JSON Lines ---------------------------------------------------------------------------------

def _jsonl_round_trip(items: list[dict]) -> list:
    buf = io.StringIO()
    assert events.write_jsonl(items, buf) == len(items)
    buf.seek(0)
    return list(events.read_jsonl(buf))


def test_jsonl_skips_blank_and_comment_lines_and_reports_bad_lines_without_losing_good_ones():
    good = events.normalize(HB)
    text = "\n".join([
        "# simulated cluster", "", events.dumps(good), "{not json", json.dumps({**HB, "broker_id": -1, "x": 1}),
        json.dumps({**HB, "event_time": "2026-01-01T00:00:01Z"}),
    ]) + "\n"
    out = list(events.read_jsonl(io.StringIO(text)))
    assert out[0] == good
    assert isinstance(out[1], JsonLinesError) and out[1].line_no == 4 and "not JSON" in out[1].reason
    assert isinstance(out[2], JsonLinesError) and out[2].line_no == 5 and "unknown field(s) x" in out[2].reason
    assert out[3]["event_time"] == 1_767_225_601_000
    assert len(out) == 4


def test_jsonl_without_validation_gives_the_raw_objects():
    line = json.dumps({**HB, "event_time": "2026-01-01T00:00:00Z"})
    assert list(events.read_jsonl(io.StringIO(line), validate=False)) == [json.loads(line)]


# --- property: random valid events survive every format ----------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
INT = st.integers(-(2**31), 2**31 - 1)
LONG = st.integers(-(2**63), 2**63 - 1)


def _strategy(schema, named: dict):
    if isinstance(schema, list):
        return st.one_of(*(_strategy(s, named) for s in schema))
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "enum":
            named[schema["name"]] = st.sampled_from(schema["symbols"])
            return named[schema["name"]]
        if kind == "map":
            return st.dictionaries(TEXT, _strategy(schema["values"], named), max_size=4)
        return _strategy(kind, named)
    primitives = {"null": st.none(), "string": TEXT, "int": INT, "long": LONG, "boolean": st.booleans()}
    return primitives[schema] if schema in primitives else named[schema]  # a named enum used again


def event_strategy(event_type: str):
    named: dict = {}
    fields = {f["name"]: _strategy(f["type"], named) for f in events.raw_schema(event_type)["fields"]}
    return st.fixed_dictionaries({"event_type": st.just(event_type), **fields})


ANY_EVENT = st.sampled_from(events.EVENT_TYPES).flatmap(event_strategy)


@settings(max_examples=300, deadline=None)
@given(ANY_EVENT)
def test_random_valid_events_round_trip_through_every_format(obj):
    event = events.normalize(obj)
    assert event == obj  # a complete valid event is already canonical
    assert events.normalize(event) == event
    assert avro_codec.decode(avro_codec.encode(event)) == event
    assert avro_codec.decode_schemaless(avro_codec.encode_schemaless(event), event["event_type"]) == event
    assert _jsonl_round_trip([event]) == [event]


def test_an_id_longer_than_255_bytes_is_refused_with_its_own_reason():
    """Why: ids reach state rows, alert labels and records; a JSON Lines file (replay) must not
    grow them without bound any more than a Kafka record may (docs/events.md, Fields)."""
    base = {"event_type": "offset_commit", "event_id": "e", "cluster_id": "c", "event_time": 0, "group_id": "g",
            "topic": "t", "partition": 0, "offset": 1, "metadata_epoch": -1}
    assert events.normalize({**base, "topic": "t" * events.MAX_ID_BYTES})["topic"] == "t" * 255
    with pytest.raises(events.IdTooLong, match="topic is 256 bytes"):
        events.normalize({**base, "topic": "t" * 256})
    [item] = events.read_jsonl(io.StringIO(json.dumps({**base, "group_id": "g" * 300_000}) + "\n"))
    assert isinstance(item, events.JsonLinesError) and item.code == "id_too_long" and item.line_no == 1
