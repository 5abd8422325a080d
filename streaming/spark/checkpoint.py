"""The checkpoint a query starts on, before it starts: Spark's checkpoint file manager for a local
one, and the refusal of a checkpoint this build cannot continue (streaming.spark.job and
streaming.spark.replay call use_checkpoint)."""

from __future__ import annotations

import json

from streaming.config import ConfigError
from streaming.engine.keys import KINDS

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


def use_checkpoint(spark, location: str, client_shards: int) -> None:
    """Before a query starts on ``location``: the local checkpoint file manager if that is on the
    local file system and the user chose no manager; taken back for a checkpoint elsewhere. A
    checkpoint of a retired state layout is refused (refuse_retired_state), and one whose state
    is keyed by another client shard count (keep_client_shards)."""
    refuse_retired_state(spark, location)
    keep_client_shards(spark, location, client_shards)
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


def _holds_state(spark, fs, root) -> bool:
    """Whether Spark has written state into the checkpoint at ``root`` (its first commit has)."""
    return bool(fs.exists(spark.sparkContext._jvm.org.apache.hadoop.fs.Path(root, "state")))


# State variables of builds that kept a variable per kind of key (streaming.spark.processor keeps a
# key's table in ``table`` whatever its kind): Spark would start on such a checkpoint with every
# table empty, as a new variable, and forget every broker and client without a word.
RETIRED_STATE_VARIABLES = frozenset({"brokers", "clients", "clients_log", "nodes", "commits", "cluster"})


def refuse_retired_state(spark, location: str) -> None:
    """Raise a ConfigError if the checkpoint at ``location`` holds state of a retired layout."""
    found = _file_system(spark, location)
    if found is None or not _holds_state(spark, *found):
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


# A client or consumer group lives in the key its id hashes to among rules.state.client.shards
# (streaming.spark.routing): under another count its history, open alerts included, would stay in
# its old key while its new events start it afresh in another. Spark cannot tell: the keys are
# the same shape. So the count a checkpoint's state was keyed by is recorded beside it.
SHARDS_RECORD = "epochwatch-shards.json"


def keep_client_shards(spark, location: str, client_shards: int) -> None:
    """Raise a ConfigError if the state at ``location`` is keyed by another client shard count;
    record ``client_shards`` there when nothing is recorded yet or the checkpoint holds no state.
    A checkpoint of a build before the record is refused if its state holds a shard the count
    configured now does not have (those builds had 16 unless set); otherwise it is taken to hold
    the count configured now, which its keys cannot disprove."""
    found = _file_system(spark, location)
    if found is None:
        return
    fs, root = found
    record = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(root, SHARDS_RECORD)
    if _holds_state(spark, fs, root):
        if fs.exists(record):
            recorded = _recorded_shards(spark, fs, record)
            if recorded != client_shards:
                raise _keyed_otherwise(location, f"{recorded} client shards", f"{recorded}", client_shards)
            return
        fewest = _fewest_shards(spark, location)
        if fewest > client_shards:
            raise _keyed_otherwise(location, f"at least {fewest} client shards (the checkpoint has no record of "
                                             "the count: builds before the record had 16 unless set)",
                                   "the count this checkpoint ran with (16 unless it was set)", client_shards)
    try:
        out = fs.create(record, True)
        try:
            out.write(bytearray(json.dumps({"client_shards": client_shards}).encode()))
        finally:
            out.close()
    except Exception as exc:  # the job's first write there: Spark's own would fail the query's start the same way
        raise ConfigError("checkpoint_location", f"{location} cannot be written ({_java_reason(exc)})",
                          "give the job's user write access to it, or set checkpoint_location to a folder it can "
                          "write (a restart must find the same one: the checkpoint holds where the job is)") from None


def _keyed_otherwise(location: str, keyed: str, fix: str, configured: int) -> ConfigError:
    return ConfigError("rules.state.client.shards",
                       f"the state in {location} is keyed by {keyed}, this config says {configured}: "
                       "every client and consumer group would keep its history and open alerts in the key of the "
                       "old count and start afresh in another",
                       f"set rules.state.client.shards: {fix}, or start on a new checkpoint (docs/operations.md, "
                       "Checkpoint)")


def _fewest_shards(spark, location: str) -> int:
    """The fewest client shards the state at ``location`` can be keyed by: one more than the
    highest shard any key of a sharded kind (clients, commits) has (0 without such keys)."""
    from pyspark.sql import functions as F

    sharded = [kind.name for kind in KINDS.values() if kind.sharded_by]
    try:
        keys = spark.read.format("statestore").option("stateVarName", "meta").load(location)
        highest = keys.where(F.col("key.kind").isin(*sharded)).agg(F.max("key.shard")).first()[0]
    except Exception:  # no state committed yet (stopped before its first commit): no key to go by
        return 0
    return 0 if highest is None else int(highest) + 1


def _java_reason(exc: Exception) -> str:
    """The Hadoop file system's own words for a failed call (py4j's error begins with the call)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def _recorded_shards(spark, fs, record) -> int:
    try:
        stream = fs.open(record)
        try:
            text = spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        return int(json.loads(text)["client_shards"])
    except Exception as exc:  # unreadable (a local file edited by hand fails its checksum), or not ours
        raise ConfigError("checkpoint_location", f"{record} is not the client shard record this build writes "
                          f"({_java_reason(exc)})",
                          "delete it if the checkpoint's state is keyed by the rules.state.client.shards configured "
                          "now (the start records that count again), or start on a new checkpoint") from None
