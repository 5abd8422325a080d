"""Which state key(s) each event goes to: (cluster_id, kind, shard). Spark expressions plus a
pure twin (``routes``) used by the single-process engine; tests check that they agree.

- brokers (shard 0): heartbeats, metadata updates, and the epoch a broker served to a client
- clients (sharded by client_id): metadata responses / failures / rebootstraps
- nodes (shard 0): REBOOTSTRAP_REQUIRED answers and connection attempts
- commits (sharded by group_id): offset commits
- dead_letter: records the source could not decode, and events from the far future
"""

from __future__ import annotations

import zlib

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming import events

DEAD_LETTER_SHARDS = 4


def shard_of(entity: str, shards: int) -> int:
    """Stable across processes and languages (crc32), unlike Python's hash()."""
    return zlib.crc32(entity.encode()) % shards


def routes(ev: dict, client_shards: int) -> list[tuple[str, int]]:
    kind = ev["event_type"]
    if kind in ("broker_heartbeat", "metadata_update"):
        return [("brokers", 0)]
    if kind == "metadata_response":
        out = [("clients", shard_of(ev["client_id"], client_shards))]
        if ev.get("error_code", 0) == 0 and ev["metadata_epoch"] >= 0:
            out.append(("brokers", 0))
        if ev.get("error_code") == events.REBOOTSTRAP_REQUIRED:
            out.append(("nodes", 0))
        return out
    if kind in ("metadata_request_failed", "client_rebootstrap"):
        return [("clients", shard_of(ev["client_id"], client_shards))]
    if kind == "connection_attempt":
        return [("nodes", 0)]
    if kind == "offset_commit":
        return [("commits", shard_of(ev["group_id"], client_shards))]
    return []


def _crc_shard(col: str, shards: int) -> Column:
    return F.pmod(F.crc32(F.col(col).cast("binary")), F.lit(shards)).cast("int")


def _route(kind: str, shard: Column | int) -> Column:
    return F.struct(F.lit(kind).alias("kind"), (shard if isinstance(shard, Column) else F.lit(shard)).alias("shard"))


def with_routes(df: DataFrame, client_shards: int, max_future_ms: int) -> DataFrame:
    """Explode each row into one row per state key it feeds; adds kind, shard, event_ms."""
    t = F.col("event_type")
    future = F.col("event_time") > F.timestamp_add("MILLISECOND", F.lit(max_future_ms), F.current_timestamp())
    # Before 1970: -1 is the rules' NO_TIME, and before 1677 pandas (transformWithStateInPandas)
    # cannot even convert the row: the task fails and the query with it, on every retry.
    too_old = F.col("event_time") < F.timestamp_millis(F.lit(0))
    dead = t.isNull() | future | too_old
    response_ok = (F.col("error_code") == 0) & (F.col("metadata_epoch") >= 0)
    candidates = F.array(
        F.when(dead, _route("dead_letter", F.pmod(F.coalesce(F.col("kafka_partition"), F.lit(0)),
                                                  F.lit(DEAD_LETTER_SHARDS)).cast("int"))),
        F.when(~dead & t.isin("broker_heartbeat", "metadata_update"), _route("brokers", 0)),
        F.when(~dead & (t == "metadata_response") & response_ok, _route("brokers", 0)),
        F.when(~dead & t.isin("metadata_response", "metadata_request_failed", "client_rebootstrap"),
               _route("clients", _crc_shard("client_id", client_shards))),
        F.when(~dead & (t == "metadata_response") & (F.col("error_code") == events.REBOOTSTRAP_REQUIRED),
               _route("nodes", 0)),
        F.when(~dead & (t == "connection_attempt"), _route("nodes", 0)),
        F.when(~dead & (t == "offset_commit"), _route("commits", _crc_shard("group_id", client_shards))),
    )
    routed = df.withColumn("_route", F.explode(F.filter(candidates, lambda r: r.isNotNull())))
    routed = routed.withColumn(
        "dlq_reason", F.when(~t.isNull() & future, F.lit("future_event_time"))
        .when(~t.isNull() & too_old, F.lit("event_time_out_of_range")).otherwise(F.col("dlq_reason")))
    routed = routed.withColumn(
        "dlq_detail", F.when(~t.isNull() & future,
                             F.concat(F.lit("event_time "), F.col("event_time").cast("string"),
                                      F.lit(f" is more than {max_future_ms} ms ahead of the clock")))
        .when(~t.isNull() & too_old,
              F.concat(F.lit("event_time "), F.col("event_time").cast("string"), F.lit(" is before 1970")))
        .otherwise(F.col("dlq_detail")))
    return (routed
            .withColumn("cluster_id", F.coalesce(F.col("cluster_id"), F.lit("")))
            .withColumn("kind", F.col("_route.kind"))
            .withColumn("shard", F.col("_route.shard"))
            .withColumn("event_ms", F.unix_millis(F.col("event_time")))
            # a dead letter's time must not move the watermark (a year-3000 timestamp would make
            # every later event "late"); its time stays in event_ms and dlq_detail
            .withColumn("event_time", F.when(F.col("kind") == "dead_letter", F.lit(None)).otherwise(F.col("event_time")))
            .drop("_route"))
