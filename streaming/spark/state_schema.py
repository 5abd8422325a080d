"""Spark schemas of the processor's state variables, derived from the rule records' type hints,
so the state declared in ``init`` and the dataclasses cannot drift apart."""

from __future__ import annotations

import typing
from dataclasses import fields

from pyspark.sql.types import ArrayType, BinaryType, BooleanType, LongType, StringType, StructField, StructType

from streaming.rules import records

_SCALARS = {int: LongType(), str: StringType(), bool: BooleanType()}


def _spark_type(hint):
    origin = typing.get_origin(hint)
    if origin is list:
        (inner,) = typing.get_args(hint)
        return ArrayType(_SCALARS[inner], containsNull=False)
    return _SCALARS[hint]


def schema_of(record_cls) -> StructType:
    hints = typing.get_type_hints(record_cls)
    return StructType([StructField(f.name, _spark_type(hints[f.name]), True) for f in fields(record_cls)])


META_SCHEMA = StructType([
    StructField("horizon_ms", LongType()),
    StructField("clock_offset_ms", LongType()),
    StructField("timer_ms", LongType()),
    StructField("generation", LongType()),  # changes at every store: see key_steps.EngineCache
])
ALERT_SCHEMA = StructType([
    StructField("alertname", StringType()),
    StructField("labels_json", StringType()),
    StructField("since_ms", LongType()),
    StructField("firing", BooleanType()),
    StructField("description", StringType()),
])
# High-cardinality tables (clients, consumer-group partitions) are stored as one JSON value per
# state key, {"fields": [...], "rows": [[...], ...]}: the state API serializes every ListState row
# on its own, in Python and again in the JVM, too slow for 100,000 clients in every micro-batch
# (figures: bench/RESULTS.md, Stateful stage throughput). The value stays readable: json_rows()
# below turns it back into records.
JSON_ROWS_SCHEMA = StructType([StructField("count", LongType()), StructField("rows", StringType())])
# Events within the allowed lateness of the newest, waiting: transient (one batch), kept as the
# Arrow IPC stream they arrived in (streaming.spark.packs.to_ipc_chunks).
BUFFER_SCHEMA = StructType([StructField("count", LongType()), StructField("events", BinaryType())])

# One output row per alert transition, broker transition, summary or dead letter, and one per
# brokers key and step with the status of every broker it touched (a JSON array: a row per broker
# would take every broker of a fleet through pandas, Arrow and the driver one by one, every live
# micro-batch).
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),        # alert | transition | broker_status | summary | dead_letter
    StructField("cluster_id", StringType()),
    StructField("event_time", LongType()),
    StructField("payload", StringType()),     # JSON of the record (broker_status: an array of them)
    StructField("raw_key", BinaryType()),     # dead letters: the record's bytes, as received
    StructField("raw_value", BinaryType()),
])


def json_rows(column, record_cls):
    """The records of a JSON state value (``clients``, ``commits``) as an array of structs, for
    reads with Spark's state data source: ``F.explode(json_rows("value.rows", ClientRecord))``.
    Positions follow the record's current fields (the value's ``fields`` names them as written)."""
    from pyspark.sql import functions as F

    doc = F.from_json(column, "struct<fields:array<string>,rows:array<array<string>>>")

    def record(row):
        return F.struct(*[(F.from_json(row[i], f.dataType) if isinstance(f.dataType, ArrayType)
                           else row[i].cast(f.dataType)).alias(f.name)
                          for i, f in enumerate(schema_of(record_cls).fields)])

    return F.transform(doc["rows"], record)


def table_rows(spark, checkpoint: str, name: str):
    """The tables of one kind of key (``brokers``, ``clients``, ``nodes``, ``commits``: the
    ``table`` state variable of those keys) of a checkpoint as a row per record: the grouping key's
    columns and the record's fields. A table stored with a log (streaming.spark.json_tables) is
    merged with it: each entity's latest row, dropped ones left out, as the job would rebuild it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from streaming.engine.keys import KINDS

    kind = KINDS[name]
    base = (_state_of(spark, checkpoint, "table", name)
            .select("key", F.lit(0).alias("seq"), F.explode(json_rows("value.rows", kind.record)).alias("r")))
    if not kind.incremental_json:
        return base.select("key.*", "r.*")
    record, ids = schema_of(kind.record), kind.id_fields
    # a log names a dropped entity by its id, or by the array of its ids (a commit's group, topic
    # and partition); JSON numbers read as strings here, cast back below
    removed = "array<string>" if len(ids) == 1 else "array<array<string>>"
    log = (_state_of(spark, checkpoint, "table_log", name)
           .select("key", F.col("list_element.rows").alias("text"))
           .withColumn("doc", F.from_json("text", f"struct<seq:long,removed:{removed}>")))
    changed = log.select("key", F.col("doc.seq").alias("seq"), F.explode(json_rows("text", kind.record)).alias("r"))
    dropped = log.select("key", F.col("doc.seq").alias("seq"), F.explode("doc.removed").alias("id"))
    parts = [F.col("id")] if len(ids) == 1 else [F.col("id")[i] for i in range(len(ids))]
    id_columns = [f"id_{field}" for field in ids]
    dropped = dropped.select("key", "seq", F.lit(None).cast(record).alias("r"),
                             *[part.cast(record[field].dataType).alias(column)
                               for part, field, column in zip(parts, ids, id_columns)])
    rows = (base.unionByName(changed)
            .select("key", "seq", "r", *[F.col(f"r.{field}").alias(column) for field, column in zip(ids, id_columns)])
            .unionByName(dropped))
    latest = Window.partitionBy("key", *id_columns).orderBy(F.col("seq").desc())
    return (rows.withColumn("n", F.row_number().over(latest)).where("n = 1 and r is not null")
            .select("key.*", "r.*"))


def cluster_rows(spark, checkpoint: str):
    """Each cluster's ClusterRecord (the brokers key's table holds it, as ``cluster``): the
    grouping key's columns and the record's fields."""
    from pyspark.sql import functions as F

    record = schema_of(records.ClusterRecord)
    doc = F.from_json("value.rows", StructType([StructField("cluster", record)]))
    return (_state_of(spark, checkpoint, "table", "brokers").select("key", doc.alias("doc"))
            .where("doc.cluster is not null").select("key.*", "doc.cluster.*"))


def _state_of(spark, checkpoint: str, variable: str, kind: str):
    from pyspark.sql import functions as F

    return (spark.read.format("statestore").option("stateVarName", variable).load(checkpoint)
            .where(F.col("key.kind") == kind))
