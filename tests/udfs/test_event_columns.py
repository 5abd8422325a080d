"""The decoded column list and schemas (udfs.event_columns), derived from the Avro schemas."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from streaming import events
from udfs import event_columns

# docs/CONTRACTS.md "Decoded columns", copied on purpose: a schema change must be a contract change.
CONTRACT_COLUMNS = (
    "event_type, event_id, cluster_id, event_time, controller_id, controller_epoch, broker_id, "
    "incarnation_id, incarnation_uuid, target_state, want_fence, want_shutdown, current_metadata_offset, "
    "error_code, current_state, metadata_epoch, client_id, broker_count, response_cluster_id, node_id, "
    "reason, cluster_id_before, cluster_id_after, outcome, setup_timeout_ms, consecutive_failures, "
    "group_id, topic, partition, offset, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
    "dlq_reason, dlq_detail, raw_key, raw_value"
).split(", ")


def test_decoded_columns_match_the_contract_in_order():
    assert list(event_columns.decoded_column_names()) == CONTRACT_COLUMNS
    assert event_columns.spark_schema(True).fieldNames() == CONTRACT_COLUMNS


def test_every_field_of_every_input_event_type_has_a_column():
    names = set(event_columns.decoded_column_names())
    for event_type in events.INPUT_EVENT_TYPES:
        assert set(events.field_names(event_type)) <= names, event_type
    assert "alertname" not in names, "alert is an output event, not a decoded column"


@pytest.mark.parametrize("column, spark_type, why", [
    ("event_time", T.TimestampType(), "timestamp-millis logical type -> Spark timestamp"),
    ("target_state", T.StringType(), "enums are strings"),
    ("current_state", T.StringType(), "a union with a named enum declared earlier resolves to it"),
    ("incarnation_id", T.LongType(), "long"),
    ("want_fence", T.BooleanType(), "nullable boolean union"),
    ("node_id", T.IntegerType(), "first declaration (metadata_request_failed, nullable int) wins"),
    ("reason", T.StringType(), "two different enums named reason: both strings"),
    ("kafka_timestamp", T.TimestampType(), "record timestamp"),
    ("raw_value", T.BinaryType(), "undecodable bytes kept as they were"),
])
def test_column_types(column, spark_type, why):
    assert event_columns.spark_schema(True)[column].dataType == spark_type, why


def test_every_column_is_nullable_because_each_row_fills_only_its_event_type():
    assert all(f.nullable for f in event_columns.spark_schema(True).fields)


def test_raw_columns_are_sparks_kafka_source_columns():
    schema = event_columns.spark_schema(False)
    assert schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_arrow_schema_is_sparks_conversion_with_utc_microseconds():
    import pyarrow as pa

    schema = event_columns.arrow_schema(True)
    assert schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert schema.names == CONTRACT_COLUMNS


@pytest.mark.parametrize("avro_type, expected, why", [
    ({"type": "array", "items": "string"}, T.ArrayType(T.StringType()), "arrays"),
    ({"type": "map", "values": "long"}, T.MapType(T.StringType(), T.LongType()), "maps (alert labels)"),
    (["null", {"type": "long", "logicalType": "timestamp-millis"}], T.TimestampType(), "nullable timestamp"),
    ({"type": "string"}, T.StringType(), "primitive in object form"),
])
def test_spark_type_of(avro_type, expected, why):
    assert event_columns.spark_type_of(avro_type, {}) == expected, why


def test_spark_type_of_rejects_a_union_of_two_types():
    with pytest.raises(ValueError, match="more than one non-null branch"):
        event_columns.spark_type_of(["null", "string", "long"], {})
