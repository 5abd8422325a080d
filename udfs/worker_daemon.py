"""Spark's Python worker daemon (``spark.python.daemon.module``), with pyspark imported from the
installed package instead of ``$SPARK_HOME/python/lib/pyspark.zip``, no archive on the path
that holds nothing to import, the job's heavy modules imported once before it forks its workers
(PRELOADED), the engine hosts' starter forked once they are (HOST_STARTER), and no full garbage
collection after every task (FreezeBetweenTasks).

Spark puts its pyspark.zip, its py4j zip and its spark-core jar first on every Python worker's
path. Imported from a zip, each module a new worker loads is compiled from source (zipimport keeps
no bytecode cache), and every task re-reads the directory of each archive on the path (the worker
calls importlib.invalidate_caches()): tens of milliseconds per task for pyspark.zip and the jar's
6,000 entries (figures: bench/RESULTS.md, Stateful stage throughput). When the same release is
installed as a package (epochwatch depends on pyspark, so it is), the zips are taken off the path
before anything is imported from them, and so is a jar without a Python module in it (a
pip-installed Spark's jar has none); otherwise they stay.
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import sys
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path

# Spark's zips, named by the package each holds
_SPARK_ZIP = re.compile(r"(?P<package>pyspark)\.zip|(?P<py4j>py4j)-[0-9.]+-src\.zip")


def without_redundant_archives(path: list[str]) -> list[str]:
    """``path`` less Spark's zips whose package is also installed elsewhere on it, same version,
    less jars that hold no Python module, and less Spark's archives that are not there (Spark
    names its zips whether or not they exist: streaming.spark.home's Spark home has none)."""
    kept = list(path)
    for entry in path:
        if _redundant(entry, [p for p in kept if p != entry]):
            kept = [p for p in kept if p != entry]
    return kept


def _redundant(entry: str, others: list[str]) -> bool:
    if (entry.endswith(".jar") or _SPARK_ZIP.fullmatch(Path(entry).name)) and not Path(entry).exists():
        return True
    package = _zipped_package(entry)
    if package is None:
        return _python_free_jar(entry)
    zipped = _zip_version(entry, package)
    return zipped is not None and _installed_version(package, others) == zipped


def _python_free_jar(entry: str) -> bool:
    if not entry.endswith(".jar"):
        return False
    try:
        with zipfile.ZipFile(entry) as z:
            return not any(name.endswith((".py", ".pyc")) for name in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _zipped_package(entry: str) -> str | None:
    match = _SPARK_ZIP.fullmatch(Path(entry).name)
    if not match or Path(entry).parent.parts[-2:] != ("python", "lib"):
        return None
    return match["package"] or match["py4j"]


def _zip_version(entry: str, package: str) -> str | None:
    try:
        with zipfile.ZipFile(entry) as z:
            return z.read(f"{package}/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _installed_version(package: str, path: list[str]) -> str | None:
    spec = PathFinder.find_spec(package, [p for p in path if not p.endswith((".zip", ".jar"))])
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        return (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None


class FreezeBetweenTasks:
    """What pyspark.daemon sees as the ``gc`` module.

    A reused worker runs ``gc.collect()`` after every task: a full collection, which in a worker
    that keeps its state keys' engines (hundreds of thousands of objects for 100,000 clients) costs
    hundreds of milliseconds per task, and the collector's own full collections come on top: in
    the live job, more than half of the CPU (figures: bench/RESULTS.md, Live detection latency).

    Here a task's end collects the young generations, then freezes what survived
    (``gc.freeze``): later collections, automatic ones included, only look at objects made since.
    A frozen object is still freed when its last reference goes; only reference cycles among
    frozen objects wait, until the frozen set has doubled since the last full collection (at
    least ``floor`` objects): then one full collection over everything. Memory stays bounded by
    about twice what is live.

    The frozen set's size is counted exactly (``gc.get_freeze_count``, a walk over every frozen
    object: ~34 ms for 1.4 million) only once what was frozen since the last count could have
    reached the next full collection's size; each task adds the survivors it freezes, counted
    among the young (figures: bench/HISTORY.md, session 32)."""

    def __init__(self, floor: int = 200_000):
        self._floor = floor
        self._full_at = floor
        # at least the frozen set's size: its last count plus what was frozen since (frozen
        # objects are freed too, so the count can only be lower)
        self._at_most = gc.get_freeze_count()

    def __getattr__(self, name):
        return getattr(gc, name)

    def collect(self, generation: int = 2) -> int:
        found = gc.collect(min(generation, 1))
        self._at_most += len(gc.get_objects(generation=2))  # the survivors, all in the oldest generation now
        gc.freeze()
        if self._at_most >= self._full_at:
            frozen = gc.get_freeze_count()
            if frozen >= self._full_at:
                gc.unfreeze()
                found += gc.collect()
                gc.freeze()
                frozen = gc.get_freeze_count()
                self._full_at = max(self._floor, 2 * frozen)
            self._at_most = frozen
        return found


def collector_for_frozen() -> FreezeBetweenTasks:
    """The collector for a process whose imports are frozen already (the daemon after its preload,
    and what it forks): its first full collection waits until the frozen set has doubled."""
    return FreezeBetweenTasks(floor=max(200_000, 2 * gc.get_freeze_count()))


# Imported once by the daemon, before it forks its workers, so that a worker starts with them rather
# than importing them on its first task (pandas, pyarrow and the project's modules: ~0.45 s in a
# fresh process; ~0.3 s off each of the job's first tasks on 1.4 cores: bench/HISTORY.md, session
# 43). No Python thread starts on import; pyarrow's starts two native ones (jemalloc's background
# thread among them), which a fork does not carry over and whose libraries set themselves up again
# in the child (their fork handlers: a forked child's threaded compute and conversions run).
PRELOADED = ("pandas", "pyarrow", "streaming.spark.processor", "udfs.kafka_source")


def preload(modules=PRELOADED) -> list[str]:
    """Import ``modules``; those that fail are left to the worker, whose own import reports why."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception:  # a missing module is the worker's error to raise, not the daemon's
            continue
    return loaded


# The engine hosts' starter, forked by the daemon after its preload; named, as PRELOADED names its
# modules, so that udfs imports nothing of streaming but its events, and the daemon runs without it.
HOST_STARTER = "streaming.spark.host_starter"


def start_host_starter() -> int | None:
    """Fork the engine hosts' starter (HOST_STARTER) from this daemon, which has the job's modules
    imported now; its pid, or None where it cannot start (the workers then start their hosts as
    new interpreters)."""
    try:
        return importlib.import_module(HOST_STARTER).fork_for_daemon(os.getpid())
    except Exception as exc:  # the job runs without it, as before
        print(f"epochwatch: no engine host starter ({exc!r}); hosts start as new interpreters",
              file=sys.stderr, flush=True)
        return None


def main() -> None:
    kept = without_redundant_archives(sys.path)
    for entry in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(entry, None)  # or importlib.invalidate_caches() still reads it
    sys.path[:] = kept
    from pyspark import daemon

    preload()
    gc.freeze()  # what the imports made stays out of every worker's collections (and its pages shared)
    start_host_starter()
    daemon.gc = collector_for_frozen()
    daemon.manager()


if __name__ == "__main__":
    main()
