"""The hold keys reach every state partition (streaming.spark.hold_keys), and the count of state
partitions is the checkpoint's, not the session's, once a batch has run."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from streaming.spark.hold_keys import SHUFFLE_PARTITIONS, hold_shards, state_partition_count
from streaming.spark.packs import KEY_COLUMNS, PACK_SCHEMA, hold_rows

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("partitions", [1, 2, 7, 200])
def test_one_hold_row_lands_in_each_state_partition(spark, partitions):
    shards = hold_shards(spark, partitions)
    rows = spark.createDataFrame(hold_rows(123, shards).to_pandas(), PACK_SCHEMA)
    # the stateful operator's distribution: HashPartitioning of the grouping key over N partitions
    placed = rows.repartition(partitions, *KEY_COLUMNS).select(F.spark_partition_id().alias("p"))
    assert sorted(r.p for r in placed.collect()) == list(range(partitions))


def test_the_checkpoint_keeps_its_partition_count_whatever_the_session_says(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.txt").write_text("x\n")
    checkpoint = str(tmp_path / "checkpoint")
    assert state_partition_count(spark, checkpoint) == int(spark.conf.get(SHUFFLE_PARTITIONS))
    before = spark.conf.get(SHUFFLE_PARTITIONS)
    spark.conf.set(SHUFFLE_PARTITIONS, "3")
    try:
        query = (spark.readStream.text(str(source)).writeStream.format("noop")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)
        spark.conf.set(SHUFFLE_PARTITIONS, "5")
        assert state_partition_count(spark, checkpoint) == 3
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, before)
