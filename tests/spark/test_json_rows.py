"""The clients / commits state value: {"fields": [...], "rows": [[...], ...]} and back, including
values written by older versions."""

import orjson

from streaming.rules.records import ClientRecord, CommitRecord
from streaming.spark.processor import from_json_rows, to_json_rows

CLIENTS = [ClientRecord("a", accepted_epoch=7, stale_broker_ids=[1, 2], stale_since_ms=[10, 20],
                        stale_last_ms=[11, 21], stale_counts=[3, 1], last_event_ms=99),
           ClientRecord("b")]


def test_round_trip_keeps_every_field_and_names_them_once():
    text = to_json_rows(CLIENTS)
    assert from_json_rows(ClientRecord, text) == CLIENTS
    assert text.count('"client_id"') == 1


def test_a_value_written_as_an_array_of_objects_still_loads():
    """Why: a checkpoint written before the compact layout must restart without losing clients."""
    old = orjson.dumps(CLIENTS).decode()
    assert from_json_rows(ClientRecord, old) == CLIENTS


def test_fields_added_or_removed_since_are_matched_by_name():
    """Why: a new record field gets its default, a dropped one is ignored, the rest keep their value."""
    doc = orjson.loads(to_json_rows([CommitRecord("g", "t", 0, metadata_epoch=5, offset=42)]))
    names = [n for n in doc["fields"] if n != "offset"] + ["gone"]
    rows = [[v for n, v in zip(doc["fields"], row) if n != "offset"] + ["x"] for row in doc["rows"]]
    (commit,) = from_json_rows(CommitRecord, orjson.dumps({"fields": names, "rows": rows}).decode())
    assert commit == CommitRecord("g", "t", 0, metadata_epoch=5)
