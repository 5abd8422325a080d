"""streaming.spark.checkpoint: what a checkpoint gets, and what is refused, before a query starts on it."""

import pytest


def test_a_local_checkpoint_gets_the_file_system_manager_and_a_remote_one_does_not(spark, tmp_path):
    """Why: the default (FileContext) manager runs `readlink` as a process for every rename on a
    local disk; the FileSystem one's rename would not overwrite on HDFS or an object store."""
    from streaming.spark.checkpoint import CHECKPOINT_MANAGER_KEY, LOCAL_CHECKPOINT_MANAGER, use_checkpoint

    before = spark.conf.get(CHECKPOINT_MANAGER_KEY, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        use_checkpoint(spark, str(tmp_path / "ckpt"))
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == LOCAL_CHECKPOINT_MANAGER
        use_checkpoint(spark, f"file://{tmp_path}/ckpt")
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == LOCAL_CHECKPOINT_MANAGER
        use_checkpoint(spark, "s3a://bucket/ckpt")  # no S3 jars here: not local either way
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY, None) is None

        chosen = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(CHECKPOINT_MANAGER_KEY, chosen)
        use_checkpoint(spark, str(tmp_path / "ckpt"))
        use_checkpoint(spark, "s3a://bucket/ckpt")
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == chosen, "the operator's choice stays"
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        spark.conf.unset("spark.epochwatch.localCheckpointManager")
        if before is not None:
            spark.conf.set(CHECKPOINT_MANAGER_KEY, before)


def test_a_path_without_a_scheme_goes_where_hadoop_sends_it(spark):
    from streaming.spark.checkpoint import checkpoint_file_system

    assert checkpoint_file_system(spark, "/var/lib/epochwatch/checkpoint") == "file"  # fs.defaultFS here
    assert checkpoint_file_system(spark, "no-such-scheme://x/y") is None


@pytest.mark.spark
def test_a_checkpoint_of_a_retired_state_layout_is_refused_before_the_query_starts(spark, tmp_path):
    """Why: Spark starts a query on a checkpoint whose state variables it no longer declares, each
    new variable empty: a job upgraded from a build with a variable per kind of key would forget
    every broker and client it knew, and say nothing (seen: its first batches resolved every open
    alert of a cluster it no longer held)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    from streaming.config import ConfigError
    from streaming.spark.checkpoint import refuse_retired_state

    class OldLayout(StatefulProcessor):
        def init(self, handle):
            self.brokers = handle.getValueState("brokers", "count long")

        def handleInputRows(self, key, rows, timerValues):
            count = sum(len(pdf) for pdf in rows)
            self.brokers.update((count,))
            yield pd.DataFrame({"k": [key[0]], "n": [count]})

    source = tmp_path / "in"
    spark.createDataFrame([("c1",), ("c1",), ("c2",)], "k string").write.parquet(str(source))
    checkpoint = str(tmp_path / "ckpt")
    refuse_retired_state(spark, checkpoint)  # nothing there yet: nothing to refuse
    query = (spark.readStream.schema("k string").parquet(str(source)).groupBy("k")
             .transformWithStateInPandas(OldLayout(), outputStructType="k string, n long", outputMode="Append",
                                         timeMode="None")
             .writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    with pytest.raises(ConfigError, match="brokers") as refused:
        refuse_retired_state(spark, checkpoint)
    assert refused.value.key == "checkpoint_location" and "new checkpoint" in refused.value.fix

