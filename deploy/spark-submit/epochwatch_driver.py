"""spark-submit entry point: ``spark-submit ... epochwatch_driver.py --config FILE [run options]``
runs ``epochwatch run`` with those options on the cluster spark-submit targets.

The session is created first from spark-submit's configuration (master, driver host, the confs
given with --conf), so that ``streaming.spark.session.build_session`` reuses it: its defaults
(local[2], a driver on 127.0.0.1) are for running on one machine, and on a cluster they would
keep the executors from reaching the driver. Runtime SQL settings (the RocksDB state store
provider, the config file's ``spark:`` section) are still applied to it; the state partitions
stay spark-submit's (the submit script sets executors x cores).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import os

    from pyspark.sql import SparkSession

    from streaming import commands as cli

    os.environ.setdefault("SPARK_MASTER_SET_BY_SUBMIT", "1")  # build_session: keep spark-submit's master
    SparkSession.builder.getOrCreate()
    return cli.main(["run", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
