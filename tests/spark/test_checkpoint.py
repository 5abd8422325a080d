"""streaming.spark.checkpoint: what a checkpoint gets, and what is refused, before a query starts on it."""

import dataclasses
import io
import json

import pytest


def test_a_local_checkpoint_gets_the_file_system_manager_and_a_remote_one_does_not(spark, tmp_path):
    """Why: the default (FileContext) manager runs `readlink` as a process for every rename on a
    local disk; the FileSystem one's rename would not overwrite on HDFS or an object store."""
    from streaming.spark.checkpoint import CHECKPOINT_MANAGER_KEY, LOCAL_CHECKPOINT_MANAGER, use_checkpoint

    before = spark.conf.get(CHECKPOINT_MANAGER_KEY, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        use_checkpoint(spark, str(tmp_path / "ckpt"), 16)
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == LOCAL_CHECKPOINT_MANAGER
        use_checkpoint(spark, f"file://{tmp_path}/ckpt", 16)
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == LOCAL_CHECKPOINT_MANAGER
        use_checkpoint(spark, "s3a://bucket/ckpt", 16)  # no S3 jars here: not local either way
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY, None) is None

        chosen = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(CHECKPOINT_MANAGER_KEY, chosen)
        use_checkpoint(spark, str(tmp_path / "ckpt"), 16)
        use_checkpoint(spark, "s3a://bucket/ckpt", 16)
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


@pytest.mark.spark
def test_a_checkpoint_keyed_by_another_client_shard_count_is_refused(spark, tmp_path):
    """Why: a client lives in the key its id hashes to among the shards; under another count its
    history and open alerts would stay in the old key while its new events start it afresh in
    another, and Spark cannot tell (the keys have the same shape)."""
    from streaming import config
    from streaming.config import ConfigError
    from streaming.sinks.memory import MemorySink
    from streaming.spark.checkpoint import SHARDS_RECORD, keep_client_shards
    from streaming.spark.replay import replay
    from streaming.tools.simulate import run_scenario

    result = run_scenario("partitioned_broker")
    text = "".join(json.dumps(ev) + "\n" for ev in result.events)
    base = config.load()

    def replay_with(shards: int, sink: MemorySink):
        rules = dataclasses.replace(result.truth.rule_settings(), client_shards=shards)
        settings = type(base)(kafka=base.kafka, rules=rules, sinks=base.sinks)
        replay(spark, settings, io.StringIO(text), "scenario", [sink], chunk_events=500, checkpoint=checkpoint)

    checkpoint = str(tmp_path / "ckpt")
    keep_client_shards(spark, checkpoint, 16)  # no state yet: any count may start it
    replay_with(4, MemorySink())
    assert json.loads((tmp_path / "ckpt" / SHARDS_RECORD).read_text()) == {"client_shards": 4}

    with pytest.raises(ConfigError) as refused:
        replay_with(16, MemorySink())
    assert refused.value.key == "rules.state.client.shards"
    assert "keyed by 4 client shards" in refused.value.problem and "client.shards: 4" in refused.value.fix

    replay_with(4, MemorySink())  # the same count goes on where it was
    assert json.loads((tmp_path / "ckpt" / SHARDS_RECORD).read_text()) == {"client_shards": 4}

    # A checkpoint of a build before the record (16 shards by default then): its keys' highest
    # shard says the fewest shards it can be keyed by, and fewer are refused.
    (tmp_path / "ckpt" / SHARDS_RECORD).unlink()
    (tmp_path / "ckpt" / f".{SHARDS_RECORD}.crc").unlink()
    with pytest.raises(ConfigError) as unrecorded:
        keep_client_shards(spark, checkpoint, 2)
    assert unrecorded.value.key == "rules.state.client.shards"
    assert "keyed by at least 4 client shards" in unrecorded.value.problem and "16 unless" in unrecorded.value.fix
    assert not (tmp_path / "ckpt" / SHARDS_RECORD).exists()
    keep_client_shards(spark, checkpoint, 4)
    assert json.loads((tmp_path / "ckpt" / SHARDS_RECORD).read_text()) == {"client_shards": 4}


@pytest.mark.spark
def test_a_checkpoint_without_a_shard_record_takes_the_count_configured_now(spark, tmp_path):
    """A checkpoint of a build before the record whose keys say nothing of the count (here: no
    state committed): the configured one is recorded (the upgrade notes say so); a record that
    cannot be read names itself."""
    from streaming.config import ConfigError
    from streaming.spark.checkpoint import SHARDS_RECORD, keep_client_shards

    checkpoint = tmp_path / "ckpt"
    (checkpoint / "state").mkdir(parents=True)
    keep_client_shards(spark, str(checkpoint), 8)
    assert json.loads((checkpoint / SHARDS_RECORD).read_text()) == {"client_shards": 8}
    keep_client_shards(spark, str(checkpoint), 8)

    (checkpoint / SHARDS_RECORD).write_text('{"client_shards": 4}')  # by hand: Hadoop's checksum fails
    with pytest.raises(ConfigError) as unreadable:
        keep_client_shards(spark, str(checkpoint), 8)
    assert unreadable.value.key == "checkpoint_location" and SHARDS_RECORD in unreadable.value.problem
    (checkpoint / f".{SHARDS_RECORD}.crc").unlink()
    (checkpoint / SHARDS_RECORD).write_text("{}")
    with pytest.raises(ConfigError, match="client_shards") as not_ours:
        keep_client_shards(spark, str(checkpoint), 8)
    assert not_ours.value.key == "checkpoint_location"
    (checkpoint / SHARDS_RECORD).unlink()  # the fix it names
    keep_client_shards(spark, str(checkpoint), 8)
    assert json.loads((checkpoint / SHARDS_RECORD).read_text()) == {"client_shards": 8}


@pytest.mark.spark
def test_a_checkpoint_that_cannot_be_written_names_the_key_and_the_fix(spark, tmp_path):
    """Why: the job's first write there is the shard record; Hadoop's failure came out as a py4j
    trace without a word of which setting to change. (The tests run as root, whom permissions do
    not stop: the folder here lies under a file.)"""
    from streaming.config import ConfigError
    from streaming.spark.checkpoint import use_checkpoint

    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(ConfigError) as refused:
        use_checkpoint(spark, str(tmp_path / "a-file" / "ckpt"), 16)
    assert refused.value.key == "checkpoint_location"
    assert str(tmp_path / "a-file" / "ckpt") in refused.value.problem and "calling o" not in refused.value.problem
    assert "write access" in refused.value.fix
