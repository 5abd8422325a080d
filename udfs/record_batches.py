"""Kafka messages -> pyarrow RecordBatches in the source's schema (runs on executors).

Columns are built as whole arrays (one list per column, or one struct array converted by Arrow in
C++), never row by row through Spark's tuple converter: that is what makes the Python source
fast. A record that does not decode becomes a :class:`~udfs.dead_letters.DeadLetter`, and, unless
the source produces dead letters itself, a row with ``event_type`` null and the ``dlq_*`` /
``raw_*`` columns set.
"""

from __future__ import annotations

from functools import cache
from typing import Callable, Sequence

import pyarrow as pa

from streaming import events
from udfs import avro_codec, event_columns
from udfs.avro_codec import DecodeError
from udfs.dead_letters import DeadLetter

# confluent-kafka timestamp types -> Spark's Kafka timestampType (0 CreateTime, 1 LogAppendTime)
_TIMESTAMP_TYPES = {1: 0, 2: 1}
_MS = pa.timestamp("ms", tz="UTC")
_US = pa.timestamp("us", tz="UTC")
_INPUT_TYPES = frozenset(events.INPUT_EVENT_TYPES)


def _timestamps(stamps: list[tuple[int, int]]) -> tuple[pa.Array, list]:
    millis = [ms if kind else None for kind, ms in stamps]
    return pa.array(millis, pa.int64()).cast(_MS).cast(_US), [_TIMESTAMP_TYPES.get(kind) for kind, _ in stamps]


def raw_batch(messages: Sequence) -> pa.RecordBatch:
    """Spark's Kafka source columns for messages of one partition."""
    schema = event_columns.arrow_schema(False)
    n = len(messages)
    first = messages[0]
    timestamps, kinds = _timestamps([m.timestamp() for m in messages])
    return pa.RecordBatch.from_arrays([
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([first.topic()] * n, pa.string()),
        pa.array([first.partition()] * n, pa.int32()),
        pa.array([m.offset() for m in messages], pa.int64()),
        timestamps,
        pa.array(kinds, pa.int32()),
        pa.array([m.headers() for m in messages], schema.field("headers").type),
    ], schema=schema)


def confluent_decoder(catalog: avro_codec.SchemaCatalog | None = None) -> Callable:
    """Decoder for the Confluent wire format (magic byte + schema id + Avro)."""
    catalog = catalog or avro_codec.builtin_catalog()
    decode = avro_codec.decode

    def decode_message(message) -> dict:
        return decode(message.value(), catalog)

    return decode_message


def schemaless_decoder() -> Callable:
    """Decoder for bare Avro with the event type in the ``event_type`` header."""
    decode = avro_codec.decode_schemaless
    header = avro_codec.EVENT_TYPE_HEADER

    def decode_message(message) -> dict:
        event_type = None
        for name, value in message.headers() or ():
            if name == header and value is not None:
                event_type = value.decode("utf-8", "replace")
        return decode(message.value(), event_type)

    return decode_message


@cache
def _event_struct() -> tuple[pa.StructType, tuple[int, ...]]:
    """Struct of the event columns as fastavro returns them (times still in ms), and the positions
    of the timestamp columns."""
    schema = event_columns.arrow_schema(True)
    names = ("event_type",) + tuple(f.name for f in event_columns.event_fields())
    fields, stamps = [], []
    for i, name in enumerate(names):
        field = schema.field(name)
        if pa.types.is_timestamp(field.type):
            field = pa.field(name, pa.int64())
            stamps.append(i)
        fields.append(field)
    return pa.struct(fields), tuple(stamps)


def decoded_batch(messages: Sequence, decode_message: Callable, keep_dead_letters_as_rows: bool
                  ) -> tuple[pa.RecordBatch | None, list[DeadLetter]]:
    """Decoded rows of one partition's messages, and the records that did not decode.

    With ``keep_dead_letters_as_rows`` false the malformed records are left out of the batch (the
    caller produces them to the dead-letter topic). Returns ``None`` for an empty batch.
    """
    rows: list[dict | None] = []
    offsets: list[int] = []
    stamps: list[tuple[int, int]] = []
    dead: list[DeadLetter] = []
    dead_rows: list[int] = []
    for message in messages:
        try:
            event = decode_message(message)
            if event["event_type"] not in _INPUT_TYPES:
                raise DecodeError("unknown_event_type",
                                  f"{event['event_type']} is an output event type, not an input event")
        except Exception as exc:  # DecodeError, or anything fastavro raises on hostile bytes
            reason, detail = ((exc.reason, exc.detail) if isinstance(exc, DecodeError)
                              else ("bad_avro", f"{type(exc).__name__}: {exc}"[:500]))
            kind, ms = message.timestamp()
            dead.append(DeadLetter(message.topic(), message.partition(), message.offset(), ms if kind else None,
                                   message.key(), message.value(), reason, detail))
            if not keep_dead_letters_as_rows:
                continue
            dead_rows.append(len(rows))
            event = None
        rows.append(event)
        offsets.append(message.offset())
        stamps.append(message.timestamp())
    if not rows:
        return None, dead
    return _assemble(rows, offsets, stamps, messages[0], dead if keep_dead_letters_as_rows else [], dead_rows), dead


def _assemble(rows, offsets, stamps, first, dead: list[DeadLetter], dead_rows: list[int]) -> pa.RecordBatch:
    schema = event_columns.arrow_schema(True)
    struct_type, stamp_columns = _event_struct()
    columns = pa.array(rows, struct_type).flatten()
    for i in stamp_columns:
        columns[i] = columns[i].cast(_MS).cast(_US)
    n = len(rows)
    kafka_timestamps, _ = _timestamps(stamps)
    columns += [
        pa.array([first.topic()] * n, pa.string()),
        pa.array([first.partition()] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        kafka_timestamps,
    ]
    if dead_rows:
        reason, detail, key, value = ([None] * n for _ in range(4))
        for row, letter in zip(dead_rows, dead):
            reason[row], detail[row], key[row], value[row] = letter.reason, letter.detail, letter.key, letter.value
        columns += [pa.array(reason, pa.string()), pa.array(detail, pa.string()),
                    pa.array(key, pa.binary()), pa.array(value, pa.binary())]
    else:
        columns += [pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), pa.nulls(n, pa.binary()),
                    pa.nulls(n, pa.binary())]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
