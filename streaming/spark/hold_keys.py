"""Keys that reach every state partition, for the *hold*: a partition of the events topic is behind.

In processing time a key stepped by its timer alone (no packs in the batch) would move its horizon
with the wall clock while its heartbeats wait unread in a partition that is behind.
The packs of the batch carry the clock held at that partition (udfs.read_progress), but a timer-
only key gets no pack. So while the source holds the clock it also sends one *hold* row to each
state partition (streaming.spark.packs.hold_rows); the processor handles a task's input rows before its
timers, so every timer of that task knows the hold (streaming.spark.processor).

Spark puts a state key in partition ``pmod(murmur3(cluster_id, kind, shard), N)``
(HashPartitioning, the stateful operator's required distribution), where N is the shuffle-
partition count the checkpoint was started with (a restart keeps it whatever the session says).
Spark's own ``hash`` is that murmur3, so Spark picks the shards here rather than a copy of it.
"""

from __future__ import annotations

import json

from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from streaming.engine.keys import HOLD

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def state_partition_count(spark, checkpoint_location: str | None) -> int:
    """The number of state partitions the query runs with: the checkpoint's, else the session's."""
    if checkpoint_location:
        try:
            # every offsets file says it on its second line ({"batchWatermarkMs":..,"conf":{..}})
            lines = (spark.read.text(checkpoint_location.rstrip("/") + "/offsets")
                     .where(F.col("value").contains(f'"{SHUFFLE_PARTITIONS}"')).limit(1).collect())
        except AnalysisException:  # no batch committed yet: the session's count will be written
            lines = []
        for (line,) in lines:
            return int(json.loads(line)["conf"][SHUFFLE_PARTITIONS])
    return int(spark.conf.get(SHUFFLE_PARTITIONS))


def hold_shards(spark, partitions: int) -> list[int]:
    """One shard per state partition such that the key ("", HOLD, shard) lands there."""
    tries = max(64, 32 * partitions)  # each partition is missed by all of them with odds ~e^-32
    rows = (spark.range(tries).select(F.col("id").cast("int").alias("shard"))
            .select("shard", F.pmod(F.hash(F.lit(""), F.lit(HOLD), F.col("shard")), F.lit(partitions))
                    .alias("partition"))
            .groupBy("partition").agg(F.min("shard").alias("shard")).collect())
    shards = sorted(row.shard for row in rows)
    if len(shards) != partitions:
        raise RuntimeError(f"found hold keys for {len(shards)} of {partitions} state partitions")
    return shards
