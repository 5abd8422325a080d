"""udfs.worker_daemon: which of Spark's zips come off the Python workers' path, and what the
daemon collects after a task."""

import gc
import sys
import weakref
import zipfile
from pathlib import Path

import pyspark
import pytest

from udfs.worker_daemon import FreezeBetweenTasks, without_redundant_archives

INSTALLED = str(Path(pyspark.__file__).parent.parent)  # site-packages
SPARK_LIB = Path(pyspark.__file__).parent / "python" / "lib"


def spark_zip(tmp_path: Path, name: str, files: dict[str, str]) -> str:
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(lib / name, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return str(lib / name)


def same_version_zip(tmp_path: Path, name="pyspark.zip", package="pyspark") -> str:
    installed = (Path(INSTALLED) / package / "version.py").read_text()
    return spark_zip(tmp_path, name, {f"{package}/__init__.py": "", f"{package}/version.py": installed})


def test_case_1_the_zips_spark_ships_with_the_installed_pyspark_come_off():
    """Why: this is the layout of every pip-installed PySpark (SPARK_HOME is the package)."""
    zips = [str(SPARK_LIB / "pyspark.zip"), *map(str, SPARK_LIB.glob("py4j-*-src.zip"))]
    assert len(zips) == 2
    assert without_redundant_archives(zips + sys.path) == sys.path


def test_case_2_a_zip_of_another_release_stays(tmp_path):
    """Why: a Spark installation whose pyspark differs from the installed package must run its own."""
    other = spark_zip(tmp_path, "pyspark.zip", {"pyspark/version.py": '__version__: str = "3.5.0"\n'})
    assert without_redundant_archives([other, INSTALLED]) == [other, INSTALLED]


def test_case_3_a_zip_without_the_package_installed_elsewhere_stays(tmp_path):
    """Why: on a node where pyspark exists only in Spark's zip, taking it away breaks every worker."""
    zipped = same_version_zip(tmp_path)
    assert without_redundant_archives([zipped, str(tmp_path)]) == [zipped, str(tmp_path)]


def test_case_4_a_zip_without_a_version_file_stays(tmp_path):
    """Why: two unknown versions are not the same version."""
    zipped = spark_zip(tmp_path, "pyspark.zip", {"pyspark/__init__.py": ""})
    assert without_redundant_archives([zipped, INSTALLED]) == [zipped, INSTALLED]


@pytest.mark.parametrize("name", ["python311.zip", "deps.zip", "pyspark-extras.zip"])
def test_case_5_other_zips_stay(tmp_path, name):
    """Why: the interpreter's own zip and a user's --py-files are none of Spark's."""
    zipped = same_version_zip(tmp_path, name)
    assert without_redundant_archives([zipped, INSTALLED]) == [zipped, INSTALLED]


def test_case_6_py4j_is_matched_on_its_own_version(tmp_path):
    zipped = same_version_zip(tmp_path, "py4j-0.10.9.9-src.zip", "py4j")
    assert without_redundant_archives([zipped, INSTALLED]) == [INSTALLED]
    older = spark_zip(tmp_path / "old", "py4j-0.10.9.7-src.zip", {"py4j/version.py": "__version__ = '0.10.9.7'\n"})
    assert without_redundant_archives([older, INSTALLED]) == [older, INSTALLED]


def test_case_7_a_jar_without_python_comes_off_one_with_python_stays(tmp_path):
    """Why: Spark adds its spark-core jar to the path for the Python it may hold; a pip-installed
    Spark's jar holds none, and re-reading its 6,000 entries costs every task ~35 ms."""
    spark_core = next((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert without_redundant_archives([str(spark_core), INSTALLED]) == [INSTALLED]
    with_python = tmp_path / "app.jar"
    with zipfile.ZipFile(with_python, "w") as z:
        z.writestr("helpers/__init__.py", "")
    assert without_redundant_archives([str(with_python), INSTALLED]) == [str(with_python), INSTALLED]


def test_case_9_archives_that_are_not_there_come_off(tmp_path):
    """Why: Spark names $SPARK_HOME/python/lib's zips whether or not they exist, and
    streaming.spark.home's Spark home has none; an entry for nothing only costs lookups."""
    missing = [str(tmp_path / "python" / "lib" / "pyspark.zip"), str(tmp_path / "py4j-0.10.9.9-src.zip"),
               str(tmp_path / "missing.jar")]
    assert without_redundant_archives([*missing, INSTALLED]) == [INSTALLED]


def test_case_8_an_entry_listed_twice_comes_off_both_times():
    """Why: Spark merges its own path with PYTHONPATH; one copy left keeps the cost."""
    zips = [str(SPARK_LIB / "pyspark.zip")] * 2
    assert without_redundant_archives(zips + [INSTALLED]) == [INSTALLED]


class Cycle:
    def __init__(self):
        self.me = self


def _unreferenced_cycle():
    """A reference cycle nothing references any more, as a weak reference that says whether it
    has been collected."""
    cycle = Cycle()
    alive = weakref.ref(cycle)
    del cycle
    return alive


@pytest.fixture
def no_automatic_collection():
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()


def test_after_a_task_what_survived_is_frozen(no_automatic_collection):
    """Why: pyspark.daemon runs a full collection after every task of a reused worker; in a worker
    that keeps its keys' engines (~590,000 objects for 100,000 clients) that took ~470 ms a task,
    and the collector's own full collections as much again: more than half of two cores in the
    live job. Frozen, the engines are not looked at again by any collection."""
    collector = FreezeBetweenTasks(floor=10**9)
    kept = Cycle()
    young_garbage = _unreferenced_cycle()
    collector.collect()
    assert young_garbage() is None  # the task's own garbage still goes at its end
    assert gc.get_freeze_count() > 0 and not any(o is kept for o in gc.get_objects(generation=2))
    assert collector.get_threshold() == gc.get_threshold()  # the rest of gc, unchanged


def test_frozen_garbage_cycles_go_once_the_frozen_set_has_doubled(no_automatic_collection):
    """Why: a cycle that was alive at a freeze and dies later is never looked at again by the
    young collections: memory must not grow without bound in a job that runs for months."""
    collector = FreezeBetweenTasks(floor=gc.get_freeze_count() + len(gc.get_objects()) + 10_000)
    held = [Cycle() for _ in range(10)]
    collector.collect()  # held's cycles are frozen
    dead = [weakref.ref(c) for c in held]
    del held
    collector.collect()
    assert all(ref() is not None for ref in dead)  # frozen: waits
    filler = [[] for _ in range(20_000)]  # the frozen set grows past the floor
    collector.collect()
    assert all(ref() is None for ref in dead)
    assert collector._full_at >= 2 * len(filler)


def test_the_frozen_set_is_counted_only_when_it_may_have_doubled(no_automatic_collection, monkeypatch):
    """Why: gc.get_freeze_count() walks every frozen object (~34 ms for 1.4 million), and every
    task of a worker or engine host paid it at its end, ~45 % of a core in the live job: it is
    asked only once the objects frozen since the last count could reach the next full
    collection's size."""
    collector = FreezeBetweenTasks(floor=gc.get_freeze_count() + len(gc.get_objects()) + 50_000)
    counts = []
    real_count = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counts.append(1) or real_count())
    tasks = []
    for _ in range(20):
        tasks.append([[] for _ in range(1_000)])  # each task keeps 1,000 objects
        collector.collect()
    assert counts == [], "20,000 frozen since the last count: below the next full collection's 50,000 more"
    tasks.append([[] for _ in range(40_000)])
    collector.collect()
    assert counts, "the frozen set may have reached it: counted"
    assert collector._full_at >= 2 * 60_000, "and it had: one full collection, the next at twice the set"


def test_main_gives_the_daemon_the_collector_that_freezes(monkeypatch):
    from pyspark import daemon

    from udfs import worker_daemon

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(daemon, "gc", daemon.gc)
    steps = []
    monkeypatch.setattr(daemon, "manager", lambda: steps.append("manager"))
    monkeypatch.setattr(gc, "freeze", lambda: steps.append("freeze"))  # not this test process's objects
    monkeypatch.setattr(worker_daemon, "start_host_starter", lambda: steps.append("starter"))  # no fork of pytest
    worker_daemon.main()
    assert isinstance(daemon.gc, FreezeBetweenTasks)
    assert all(name in sys.modules for name in worker_daemon.PRELOADED)
    assert steps == ["freeze", "starter", "manager"], \
        "imported and frozen, then the hosts' starter forked with them, then Spark's daemon"


def test_preload_imports_what_it_can_and_leaves_the_rest_to_the_worker():
    """Why: the daemon imports pandas, pyarrow and the project's modules once, before it forks its
    workers, so that a new worker does not spend its first task on them (the job's first
    micro-batches); a module it cannot import must not stop the daemon: the worker's own import
    says why."""
    from udfs import worker_daemon

    assert worker_daemon.preload(("json", "no_such_module_of_epochwatch")) == ["json"]
    assert worker_daemon.preload() == list(worker_daemon.PRELOADED)


def test_a_daemon_that_cannot_start_the_hosts_starter_runs_on(monkeypatch, capsys):
    """Why: the starter only saves each engine host's imports; where it cannot start (here: the
    sockets' folder is not this user's alone) the workers start their hosts as new interpreters,
    and the daemon must say so and go on."""
    from streaming.spark import engine_host
    from udfs import worker_daemon

    def not_ours(owner, partition):
        raise OSError("/tmp/epochwatch-engines-0 is not a folder of this user's alone")

    monkeypatch.setattr(engine_host, "host_address", not_ours)
    assert worker_daemon.start_host_starter() is None
    assert "no engine host starter" in capsys.readouterr().err
