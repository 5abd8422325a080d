"""Build the SparkSession the job and the tests share: RocksDB state store (transformWithState
needs it), Python workers on this interpreter, the project's data sources registered, and Spark's
Python processes importing the installed pyspark (streaming.spark.home)."""

from __future__ import annotations

import atexit
import os
import re
import sys
from typing import Mapping

from streaming.spark.home import use_zipless_home

# local[cores, task attempts]: plain local[N] tries each task once, so one Python worker killed
# (the OOM killer, a segfault) would fail its micro-batch and end the query; cluster masters retry
# a task 4 times (spark.task.maxFailures), and so does this.
LOCAL_TASK_ATTEMPTS = 4
DEFAULT_MASTER = f"local[2,{LOCAL_TASK_ATTEMPTS}]"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m"

DEFAULTS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # a micro-batch commits a changelog of what changed, not a new snapshot of the whole store
    # (as deploy/spark-submit sets for clusters)
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    # workers import pyspark from the installed package, not Spark's pyspark.zip (udfs.worker_daemon)
    "spark.python.daemon.module": "udfs.worker_daemon",
    # local mode runs everything in the driver JVM: state values of large micro-batches need room
    "spark.driver.memory": "4g",
    # The JIT's quick compiler only: the optimising one keeps part of a core busy for the first
    # minute and more after every start, and the JVM's share of this job is small (the rules run
    # in Python): faster on catch-up and live (figures: bench/RESULTS.md, Head to head and Live
    # detection latency). Its code cache is then 48 MB, which a live driver fills within 2-3
    # minutes; when full the JVM stops compiling (docs/operations.md, JVM).
    "spark.driver.extraJavaOptions": JIT_OPTIONS,
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
    # Projections interpreted, not compiled: the rows here are packs, a few a task (streaming.spark.packs),
    # and the state servers build their state variables' encoders again in every task (with
    # streaming.spark.sessionless_conf; figures: bench/RESULTS.md, Live latency and silence).
    # Whole-stage code generation is another setting and stays on.
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # Python workers talk to their JVM over Unix sockets, not loopback TCP: Spark leaves Nagle's
    # algorithm on for the TCP ones, and a read task's input, written in small pieces after the
    # task's first message, waited ~40 ms in most tasks: the mark of Nagle's algorithm holding them
    # for Python's delayed acknowledgement (figures: bench/RESULTS.md, Live latency and silence).
    "spark.python.unix.domain.socket.enabled": "true",
}


def build_session(app_name: str = "epochwatch", master: str | None = None, conf: Mapping[str, str] | None = None):
    # Workers must run this interpreter (the one with the project installed), not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:  # the JVM reads SPARK_HOME once, at its start
        use_zipless_home()

    builder = SparkSession.builder.appName(app_name)
    if master or not os.environ.get("SPARK_MASTER_SET_BY_SUBMIT"):
        master = with_task_retries(master or os.environ.get("EPOCHWATCH_SPARK_MASTER", DEFAULT_MASTER))
        builder = builder.master(master)
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("EPOCHWATCH_SPARK_LOG_LEVEL", "ERROR"))
    register_data_sources(spark)
    remove_accumulator_socket_at_exit(spark.sparkContext)
    return spark


_SOCKETS_TO_REMOVE: set[str] = set()


def remove_accumulator_socket_at_exit(sc) -> None:
    """Over Unix sockets PySpark's accumulator server listens on a file in the temporary folder
    that only ``SparkContext.stop()`` removes; a job ends without it (its JVM stops on its own),
    and each start would leave one empty socket file behind."""
    path = getattr(getattr(sc, "_accumulatorServer", None), "server_address", None)
    if isinstance(path, str) and path not in _SOCKETS_TO_REMOVE:
        _SOCKETS_TO_REMOVE.add(path)
        atexit.register(_remove_if_there, path)


def _remove_if_there(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:  # stopped properly: the server removed it
        pass


def session_conf(master: str | None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """DEFAULTS, one state partition per local core, then the caller's ``conf``. ``master`` None:
    spark-submit's, whose state partitions the submit script sets (executors x cores); a cluster
    master given here gets 4."""
    partitions = {} if master is None else {"spark.sql.shuffle.partitions": str(local_cores(master) or 4)}
    return {**DEFAULTS, **partitions, **(conf or {})}


def with_task_retries(master: str) -> str:
    """A local master that retries failed tasks: ``local[N]`` becomes ``local[N,4]``; a master that
    says how many attempts it wants, or a cluster's, is kept as given."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if not match:
        return master
    return f"local[{match[1] or 1},{LOCAL_TASK_ATTEMPTS}]"


def local_cores(master: str) -> int | None:
    """The cores of a local master (None for a cluster's): as many state partitions as that.
    With more partitions than cores a key's task lands on the other Python worker in most
    micro-batches (Spark hands out idle workers first in, first out) and the key rebuilds its
    state every time (docs/operations.md, Sizing)."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if not match:
        return None
    if match[1] == "*":
        return os.cpu_count() or 1
    return int(match[1] or 1)


def register_data_sources(spark) -> None:
    """Register the Kafka Python data sources (udfs.kafka_source / udfs.kafka_sink) if present."""
    try:
        from streaming.spark.source_packs import PackingKafkaSource
    except ImportError:
        return
    spark.dataSource.register(PackingKafkaSource)
    try:
        from udfs.kafka_sink import KafkaEventSink
    except ImportError:
        return
    spark.dataSource.register(KafkaEventSink)
