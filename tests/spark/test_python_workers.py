"""The session's Python workers run udfs.worker_daemon: pyspark from the installed package."""


def test_workers_import_pyspark_from_the_installed_package_not_sparks_zip(spark):
    """Why: imported from pyspark.zip, every new worker compiles pyspark's modules from source and
    every task re-reads the directories of the zip and of Spark's jar (~45 ms per task)."""

    def where_workers_import_from(rows):  # defined here: workers cannot import this test module
        import sys

        import pandas as pd
        import pyspark

        for _ in rows:
            yield pd.DataFrame({"pyspark": [pyspark.__file__],
                                "archives": [[p for p in sys.path if p.endswith((".zip", ".jar"))]]})

    (row,) = spark.range(1, numPartitions=1).mapInPandas(where_workers_import_from,
                                                          "pyspark string, archives array<string>").collect()
    assert ".zip" not in row.pyspark
    assert not [a for a in row.archives if a.endswith(("pyspark.zip", "-src.zip", ".jar"))]


def test_sparks_planner_processes_import_the_installed_pyspark_too(spark):
    """Why: Spark starts its own Python processes to look up and plan a data source and to start a
    query, with pyspark.zip first on their path: ~0.5 s more for each (streaming.spark.home)."""
    from pyspark.sql.datasource import DataSource

    class WhereFrom(DataSource):  # defined here: Spark's planner cannot import this test module
        @classmethod
        def name(cls):
            return "epochwatch-where-from"

        def schema(self):  # runs in a planner process
            import pyspark

            return "from_zip boolean" if ".zip" in pyspark.__file__ else "installed boolean"

    spark.dataSource.register(WhereFrom)
    assert spark.read.format("epochwatch-where-from").load().columns == ["installed"]


def test_workers_talk_to_the_jvm_over_unix_sockets_not_loopback_tcp(spark):
    """Why: Spark leaves Nagle's algorithm on for its TCP connections to Python workers, and a read
    task's input, written in small pieces after the task's first message, waited ~40 ms for the
    worker's delayed acknowledgement in most tasks (streaming.spark.session)."""

    def socket_kinds(rows):  # defined here: workers cannot import this test module
        import os

        import pandas as pd

        def inodes(table):
            with open(f"/proc/net/{table}") as f:
                lines = f.read().splitlines()[1:]
            column = 6 if table == "unix" else 9
            return {line.split()[column] for line in lines if len(line.split()) > column}

        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the listing's own descriptor, closed by now
                continue
            if target.startswith("socket:["):
                mine.add(target[len("socket:["):-1])
        tcp = inodes("tcp") | inodes("tcp6")
        for _ in rows:
            yield pd.DataFrame({"unix": [len(mine & inodes("unix"))], "tcp": [len(mine & tcp)]})

    rows = spark.range(2, numPartitions=2).mapInPandas(socket_kinds, "unix long, tcp long").collect()
    assert [row.tcp for row in rows] == [0, 0]
    assert all(row.unix >= 1 for row in rows)
