"""streaming.spark.session: one state partition per core of a local master."""

import os

import pytest

from streaming.spark.session import local_cores, session_conf


@pytest.mark.parametrize("master, cores, why", [
    ("local[2]", 2, "the default: two cores, two state partitions, one Python worker each"),
    ("local", 1, "Spark's plain local runs one core"),
    ("local[1]", 1, "one core: one partition, so the only worker keeps every key's state"),
    ("local[4, 3]", 4, "local[N, maxFailures] counts N cores"),
    ("local[*]", os.cpu_count(), "every core of the machine"),
    ("yarn", None, "a cluster: spark-submit sets executors x cores (deploy/spark-submit)"),
    ("spark://127.0.0.1:7077", None, "a standalone cluster: the same"),
    ("local-cluster[2,1,1024]", None, "Spark's test cluster has executors, not local cores"),
])
def test_local_cores(master, cores, why):
    assert local_cores(master) == cores, why


def test_the_session_gets_one_state_partition_per_local_core_unless_told_otherwise():
    """Why: more partitions than cores moved every key to the other Python worker each batch."""
    assert session_conf("local[2]")["spark.sql.shuffle.partitions"] == "2"
    assert session_conf("local[1]")["spark.sql.shuffle.partitions"] == "1"
    assert session_conf("yarn")["spark.sql.shuffle.partitions"] == "4"
    assert "spark.sql.shuffle.partitions" not in session_conf(None)  # spark-submit's stays
    told = session_conf("local[2]", {"spark.sql.shuffle.partitions": "8"})
    assert told["spark.sql.shuffle.partitions"] == "8"
    assert told["spark.python.daemon.module"] == "udfs.worker_daemon"


RETRIES = [
    ("local[2]", "local[2,4]", "plain local[N] tries a task once: one crashed Python worker ended the query"),
    ("local", "local[1,4]", "local means one core"),
    ("local[*]", "local[*,4]", "every core, retried"),
    ("local[2,1]", "local[2,1]", "an operator who asks for one attempt gets one"),
    ("yarn", "yarn", "cluster masters retry tasks already (spark.task.maxFailures)"),
]


@pytest.mark.parametrize("master, expected, why", RETRIES)
def test_local_masters_retry_failed_tasks(master, expected, why):
    from streaming.spark.session import with_task_retries

    assert with_task_retries(master) == expected, why


def test_a_job_that_ends_without_stopping_spark_leaves_no_socket_file_behind():
    """Why: over Unix sockets PySpark's accumulator server listens on a file that only
    SparkContext.stop() removes, and the job's process ends without it: one empty file in the
    temporary folder per start."""
    import subprocess
    import sys

    script = ("from streaming.spark.session import build_session\n"
              "spark = build_session('socket-file-test')\n"
              "print(spark.sparkContext._accumulatorServer.server_address)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    path = done.stdout.strip().splitlines()[-1]
    assert path.endswith(".sock")
    assert not os.path.exists(path)
