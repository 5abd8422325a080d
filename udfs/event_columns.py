"""The columns of the Kafka source: Spark's raw Kafka columns, or one wide row per decoded event.

The decoded column list is derived from the Avro schemas of ``streaming.events.INPUT_EVENT_TYPES``
(first declaration of a field wins), so adding a field to a schema adds a column here without a
second list to keep in sync. See docs/CONTRACTS.md "Decoded columns".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pyspark.sql import types as T

from streaming import events

KAFKA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
DEAD_LETTER_COLUMNS = ("dlq_reason", "dlq_detail", "raw_key", "raw_value")

_PRIMITIVES = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "boolean": T.BooleanType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "bytes": T.BinaryType(),
}
_TIMESTAMP_LOGICAL_TYPES = ("timestamp-millis", "timestamp-micros")


@dataclass(frozen=True)
class EventField:
    """One decoded column: its Avro field name and Spark type."""

    name: str
    data_type: T.DataType

    @property
    def is_timestamp(self) -> bool:
        return isinstance(self.data_type, T.TimestampType)


def _named_types(node, found: dict[str, dict]) -> None:
    """Collect named Avro types (enums, records, fixed) so later references by name resolve."""
    if isinstance(node, dict):
        if node.get("type") in ("enum", "record", "fixed") and "name" in node:
            found[node["name"]] = node
            if "namespace" in node:
                found[f"{node['namespace']}.{node['name']}"] = node
        for value in node.values():
            _named_types(value, found)
    elif isinstance(node, list):
        for value in node:
            _named_types(value, found)


def spark_type_of(avro_type, named: dict[str, dict]) -> T.DataType:
    """Spark type of an Avro type: unions with null become nullable columns, enums strings,
    timestamp-millis timestamps."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"union {avro_type} has more than one non-null branch; no single column type fits")
        return spark_type_of(branches[0], named)
    if isinstance(avro_type, str):
        if avro_type in _PRIMITIVES:
            return _PRIMITIVES[avro_type]
        if avro_type in named:
            return spark_type_of(named[avro_type], named)
        raise ValueError(f"unknown Avro type {avro_type!r}")
    kind = avro_type.get("type")
    if avro_type.get("logicalType") in _TIMESTAMP_LOGICAL_TYPES:
        return T.TimestampType()
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    if kind == "map":
        return T.MapType(T.StringType(), spark_type_of(avro_type["values"], named))
    if kind == "array":
        return T.ArrayType(spark_type_of(avro_type["items"], named))
    if kind in _PRIMITIVES or isinstance(kind, (list, dict)):
        return spark_type_of(kind, named)
    raise ValueError(f"Avro type {avro_type} has no column mapping (nested records are not flattened)")


@cache
def event_fields(event_types: tuple[str, ...] = events.INPUT_EVENT_TYPES) -> tuple[EventField, ...]:
    """Every field of every event type, in declaration order; the first declaration wins."""
    seen: dict[str, EventField] = {}
    for event_type in event_types:
        schema = events.raw_schema(event_type)
        named: dict[str, dict] = {}
        _named_types(schema, named)
        for avro_field in schema["fields"]:
            if avro_field["name"] not in seen:
                seen[avro_field["name"]] = EventField(avro_field["name"], spark_type_of(avro_field["type"], named))
    return tuple(seen.values())


def decoded_column_names() -> tuple[str, ...]:
    return ("event_type",) + tuple(f.name for f in event_fields()) + KAFKA_COLUMNS + DEAD_LETTER_COLUMNS


@cache
def spark_schema(decoded: bool) -> T.StructType:
    """The source's output schema; every column nullable, as in Spark's Kafka source."""
    if not decoded:
        header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
        return T.StructType([
            T.StructField("key", T.BinaryType()),
            T.StructField("value", T.BinaryType()),
            T.StructField("topic", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.TimestampType()),
            T.StructField("timestampType", T.IntegerType()),
            T.StructField("headers", T.ArrayType(header)),
        ])
    columns = [T.StructField("event_type", T.StringType())]
    columns += [T.StructField(f.name, f.data_type) for f in event_fields()]
    columns += [
        T.StructField("kafka_topic", T.StringType()),
        T.StructField("kafka_partition", T.IntegerType()),
        T.StructField("kafka_offset", T.LongType()),
        T.StructField("kafka_timestamp", T.TimestampType()),
        T.StructField("dlq_reason", T.StringType()),
        T.StructField("dlq_detail", T.StringType()),
        T.StructField("raw_key", T.BinaryType()),
        T.StructField("raw_value", T.BinaryType()),
    ]
    return T.StructType(columns)


@cache
def arrow_schema(decoded: bool):
    """The Arrow schema Spark expects from read(): Spark's own conversion, so types match exactly."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(decoded), timezone="UTC")


@cache
def fields_by_event_type() -> dict[str, tuple[str, ...]]:
    """The decoded columns each input event type fills (its own Avro fields)."""
    return {t: events.field_names(t) for t in events.INPUT_EVENT_TYPES}
