"""The checkpoint a query starts on, before it starts: Spark's checkpoint file manager for a local
one, and the refusal of a checkpoint this build cannot continue (streaming.spark.job and
streaming.spark.replay call use_checkpoint)."""

from __future__ import annotations

import json

from streaming.config import ConfigError

# Hadoop's local file system shells out where its native library is missing (pip's pyspark ships
# none): the default checkpoint file manager (FileContext) runs `readlink` as a process twice for
# every rename of a checkpoint file, ~18 processes a micro-batch, most of the offset and commit log
# writes' ~35 ms each and of the state commit's. The FileSystem-based manager renames with a plain
# rename(2), atomic on a local disk; on HDFS or an object store its rename would not overwrite, so
# it is only used for a checkpoint on the local file system (figures: bench/RESULTS.md, Live
# latency and silence).
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
_SET_BY_US = "spark.epochwatch.localCheckpointManager"


def use_checkpoint(spark, location: str) -> None:
    """Before a query starts on ``location``: the local checkpoint file manager if that is on the
    local file system and the user chose no manager; taken back for a checkpoint elsewhere. A
    checkpoint of a retired state layout is refused (refuse_retired_state)."""
    refuse_retired_state(spark, location)
    local = checkpoint_file_system(spark, location) == "file"
    if local and spark.conf.get(CHECKPOINT_MANAGER_KEY, None) is None:
        spark.conf.set(CHECKPOINT_MANAGER_KEY, LOCAL_CHECKPOINT_MANAGER)
        spark.conf.set(_SET_BY_US, "true")
    elif not local and spark.conf.get(_SET_BY_US, None) == "true":
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        spark.conf.unset(_SET_BY_US)


def checkpoint_file_system(spark, location: str) -> str | None:
    """The scheme of the Hadoop file system ``location`` resolves to (a path without one goes to
    ``fs.defaultFS``), or None if Hadoop has none for it."""
    fs = _file_system(spark, location)
    return None if fs is None else str(fs[0].getScheme())


def _file_system(spark, location: str):
    """(Hadoop FileSystem, Path) of ``location``, or None if Hadoop has no file system for it."""
    try:
        path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path
    except Exception:  # no file system for the scheme here: the query's start says so itself
        return None


# State variables of builds that kept a variable per kind of key (streaming.spark.processor keeps a
# key's table in ``table`` whatever its kind): Spark would start on such a checkpoint with every
# table empty, as a new variable, and forget every broker and client without a word.
RETIRED_STATE_VARIABLES = frozenset({"brokers", "clients", "clients_log", "nodes", "commits", "cluster"})


def refuse_retired_state(spark, location: str) -> None:
    """Raise a ConfigError if the checkpoint at ``location`` holds state of a retired layout."""
    fs = _file_system(spark, location.rstrip("/") + "/state")
    if fs is None or not fs[0].exists(fs[1]):
        return
    variables = set()
    try:
        for row in spark.read.format("state-metadata").load(location).collect():
            properties = json.loads(row["operatorProperties"] or "{}")
            variables |= {v["stateName"] for v in properties.get("stateVariables", [])}
    except Exception:  # no operator metadata yet (stopped before its first commit): nothing retired
        return
    retired = sorted(variables & RETIRED_STATE_VARIABLES)
    if retired:
        raise ConfigError("checkpoint_location", f"{location} holds state variables of an older epochwatch build "
                          f"({', '.join(retired)}) that this one keeps in 'table'; started on it, the job would "
                          "forget every broker and client it knew",
                          "start on a new checkpoint (docs/operations.md, Upgrades, says what that loses and how "
                          "to skip nothing)")

