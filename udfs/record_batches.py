"""Kafka messages -> pyarrow RecordBatches in the source's schema (runs on executors).

Columns are built as whole arrays (one list per column, or one struct array converted by Arrow in
C++), never row by row through Spark's tuple converter: that is what makes the Python source
fast. A record that does not decode becomes a :class:`~udfs.dead_letters.DeadLetter`, and, unless
the source produces dead letters itself, a row with ``event_type`` null and the ``dlq_*`` /
``raw_*`` columns set.
"""

from __future__ import annotations

from functools import cache
from io import BytesIO
from typing import Callable, Sequence

import fastavro
import pyarrow as pa

from streaming import events
from udfs import avro_codec, event_columns
from udfs.avro_codec import DecodeError
from udfs.dead_letters import DeadLetter
from udfs.registry_catalog import RegistryError

# confluent-kafka timestamp types -> Spark's Kafka timestampType (0 CreateTime, 1 LogAppendTime)
_TIMESTAMP_TYPES = {1: 0, 2: 1}
_MS = pa.timestamp("ms", tz="UTC")
_US = pa.timestamp("us", tz="UTC")
_INPUT_TYPES = frozenset(events.INPUT_EVENT_TYPES)
_SHORT_RECORD = events.MAX_ID_BYTES + avro_codec.HEADER.size


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


Failure = tuple[int, str, str]  # (index in the batch, reason, detail)
Decoder = Callable[[Sequence], tuple[list, list[Failure]]]


def _failure(index: int, exc: Exception) -> Failure:
    if isinstance(exc, DecodeError):
        return index, exc.reason, exc.detail
    return index, "bad_avro", f"{type(exc).__name__}: {exc}"[:500]  # anything fastavro raises on hostile bytes


def confluent_decoder(catalog: avro_codec.SchemaCatalog | None = None) -> Decoder:
    """Decoder of the Confluent wire format (magic byte + schema id + Avro) for whole batches.

    The hot path reads with fastavro exactly as ``avro_codec.decode`` does, minus the per-record
    overhead (schema ids resolved once per batch decoder); any record it does not accept is handed
    to ``avro_codec.decode`` itself, which names the reason.
    """
    catalog = catalog or avro_codec.builtin_catalog()
    schemas: dict[int, tuple[str, dict] | DecodeError] = {}
    read = fastavro.schemaless_reader

    def schema_for(schema_id: int) -> tuple[str, dict] | DecodeError:
        try:
            event_type = catalog.event_type_for(schema_id)
            if event_type not in _INPUT_TYPES:
                raise DecodeError("unknown_event_type", f"{event_type} is an output event type, not an input event")
            found = event_type, events.parsed_schema(event_type)
        except DecodeError as exc:
            found = exc
        schemas[schema_id] = found
        return found

    def decode_values(values: Sequence, messages: Sequence) -> tuple[list, list[Failure]]:
        rows: list[dict | None] = []
        failures: list[Failure] = []
        for index, value in enumerate(values):
            found = schemas.get(int.from_bytes(value[1:5], "big")) if value and value[0] == 0 else None
            if found is not None and not isinstance(found, DecodeError) and len(value) > 5:
                stream = BytesIO(value)
                stream.seek(5)
                try:
                    record = read(stream, found[1], None)
                except Exception:
                    record = None
                if record is not None and stream.tell() == len(value):
                    record["event_type"] = found[0]
                    # a record this short cannot hold an id that is too long: nothing to look at
                    if len(value) <= _SHORT_RECORD or events.too_long_id(record) is None:
                        rows.append(record)
                        continue
            try:
                rows.append(_slow_decode(value, catalog, schemas, schema_for))
            except RegistryError:
                raise   # the registry's fault, not the record's: the task fails and reads it again
            except Exception as exc:
                rows.append(None)
                failures.append(_failure(index, exc))
        return rows, failures

    return decode_values


def _slow_decode(value, catalog, schemas, schema_for) -> dict:
    """avro_codec.decode with the input-type check: raises DecodeError with the reason."""
    if value is not None and len(value) >= 5 and value[0] == 0:
        schema_id = int.from_bytes(value[1:5], "big")
        found = schemas.get(schema_id) or schema_for(schema_id)
        if isinstance(found, DecodeError):
            raise found
    return avro_codec.decode(value, catalog)


def schemaless_decoder() -> Decoder:
    """Decoder of bare Avro with the event type in the ``event_type`` header."""
    decode = avro_codec.decode_schemaless
    header = avro_codec.EVENT_TYPE_HEADER

    def decode_values(values: Sequence, messages: Sequence) -> tuple[list, list[Failure]]:
        rows: list[dict | None] = []
        failures: list[Failure] = []
        for index, (value, message) in enumerate(zip(values, messages)):
            event_type = None
            for name, header_value in message.headers() or ():
                if name == header and header_value is not None:
                    event_type = header_value.decode("utf-8", "replace")
            try:
                if event_type not in _INPUT_TYPES and event_type in events.EVENT_TYPES:
                    raise DecodeError("unknown_event_type", f"{event_type} is an output event type, not an input")
                rows.append(decode(value, event_type))
            except Exception as exc:
                rows.append(None)
                failures.append(_failure(index, exc))
        return rows, failures

    return decode_values


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


def decoded_batch(messages: Sequence, decode_values: Decoder, keep_dead_letters_as_rows: bool
                  ) -> tuple[pa.RecordBatch | None, list[DeadLetter]]:
    """Decoded rows of one partition's messages, and the records that did not decode.

    With ``keep_dead_letters_as_rows`` false the malformed records are left out of the batch (the
    caller produces them to the dead-letter topic). Returns ``None`` for an empty batch.
    """
    values = [m.value() for m in messages]
    rows, failures = decode_values(values, messages)
    try:
        return _batch_of(messages, values, rows, failures, keep_dead_letters_as_rows)
    except (pa.ArrowInvalid, OverflowError):
        # A record decoded to a value its column cannot hold (an int beyond 32 bits, a time beyond
        # Spark's timestamp range): dead-letter those records, keep the rest of the batch.
        unfit = _unrepresentable(rows)
        rows = [None if i in unfit else row for i, row in enumerate(rows)]
        failures = sorted(failures + [(i, *why) for i, why in unfit.items()])
        return _batch_of(messages, values, rows, failures, keep_dead_letters_as_rows)


def _unrepresentable(rows: list) -> dict[int, tuple[str, str]]:
    struct_type, stamp_columns = _event_struct()
    found = {}
    for index, row in enumerate(rows):
        if row is None:
            continue
        try:
            columns = pa.array([row], struct_type).flatten()
        except (pa.ArrowInvalid, OverflowError) as exc:
            found[index] = ("bad_avro", f"{row['event_type']}: {exc}"[:500])
            continue
        for i in stamp_columns:
            try:
                columns[i].cast(_MS).cast(_US)
            except pa.ArrowInvalid:
                found[index] = ("event_time_out_of_range",
                                f"{row['event_type']}: {struct_type[i].name}={columns[i][0].as_py()} ms is beyond "
                                f"what a Spark timestamp can hold")
                break
    return found


def _batch_of(messages, values, rows, failures, keep_dead_letters_as_rows):
    dead = []
    for index, reason, detail in failures:
        message = messages[index]
        kind, ms = message.timestamp()
        dead.append(DeadLetter(message.topic(), message.partition(), message.offset(), ms if kind else None,
                               message.key(), values[index], reason, detail))
    dead_rows = [index for index, _, _ in failures]
    if failures and not keep_dead_letters_as_rows:
        failed = set(dead_rows)
        messages = [m for i, m in enumerate(messages) if i not in failed]
        rows = [r for i, r in enumerate(rows) if i not in failed]
        dead_rows = []
    if not rows:
        return None, dead
    return _assemble(rows, messages, dead if dead_rows else [], dead_rows), dead


def _assemble(rows, messages, dead: list[DeadLetter], dead_rows: list[int]) -> pa.RecordBatch:
    schema = event_columns.arrow_schema(True)
    first = messages[0]
    offsets = [m.offset() for m in messages]
    stamps = [m.timestamp() for m in messages]
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


# Marks a dead letter that the read task produced to the dead-letter topic itself: what travels on
# is only that it happened (streaming.spark.processor: for the counts and the console, never produced again).
PUBLISHED_COLUMN = "dlq_published"


def as_notices(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with every dead letter's key and value left out and ``dlq_published`` set (null
    for events): the bytes stay in the task that read them, however many and large they are."""
    import pyarrow.compute as pc

    dead = pc.is_valid(batch.column("dlq_reason"))
    columns = [pc.if_else(dead, pa.scalar(None, column.type), column) if name in ("raw_key", "raw_value") else column
               for name, column in zip(batch.schema.names, batch.columns)]
    published = pc.if_else(dead, pa.scalar(True), pa.scalar(None, pa.bool_()))
    return pa.RecordBatch.from_arrays([*columns, published], names=[*batch.schema.names, PUBLISHED_COLUMN])
