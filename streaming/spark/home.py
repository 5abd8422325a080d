"""A Spark home for the pip-installed pyspark without its ``python/lib`` zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on the path of every
Python process it starts. Imported from a zip, pyspark is compiled from source each time (zipimport
keeps no bytecode cache), several times slower than from the installed package, and Spark starts
such a process for every data source lookup, every query start, the transformWithState schema
check and every read planning (figures: bench/RESULTS.md, Head to head). The workers strip the
zips themselves (udfs.worker_daemon); these planner processes run Spark's own daemon.

When pyspark comes from pip, its package directory is the Spark home. This module makes a
directory of links to everything in it except ``python``: the JVM then finds jars and scripts as
before, the zips' path entries name nothing, and every Python process imports the installed pyspark,
which is the same release. A Spark home the user set is never replaced.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

ZIPS_DIR = Path("python", "lib")


def zipless_home(pyspark_dir: Path, cache_dir: Path) -> Path | None:
    """The zip-less Spark home for ``pyspark_dir`` under ``cache_dir`` (made once per pyspark
    installation), or None if ``pyspark_dir`` is not a pip layout with its zips (nothing to gain)."""
    if not (pyspark_dir / ZIPS_DIR / "pyspark.zip").is_file() or not (pyspark_dir / "jars").is_dir():
        return None
    version = pyspark_dir / "version.py"
    identity = str(pyspark_dir.resolve()) + (version.read_text() if version.is_file() else "")
    tag = hashlib.sha256(identity.encode()).hexdigest()[:12]  # a new release gets a new home
    home = cache_dir / f"spark-home-{tag}"
    if _links_to(home, pyspark_dir):
        return home
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=cache_dir))
    for entry in pyspark_dir.iterdir():
        if entry.name != "python":
            (staging / entry.name).symlink_to(entry.resolve())
    try:
        staging.rename(home)  # atomic: another process may be making the same home
    except OSError:
        _remove(staging)
        if not _links_to(home, pyspark_dir):
            return None
    return home


def use_zipless_home(cache_dir: Path | None = None) -> Path | None:
    """Point SPARK_HOME at the zip-less home before the JVM starts, unless SPARK_HOME is set or
    the home cannot be made (then nothing changes). Returns the home used, if any."""
    if os.environ.get("SPARK_HOME"):
        return None
    import pyspark

    try:
        home = zipless_home(Path(pyspark.__file__).parent, cache_dir or _cache_dir())
    except OSError:  # read-only cache, no symlinks: Spark's own home still works, only slower
        return None
    if home is not None:
        os.environ["SPARK_HOME"] = str(home)
    return home


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "epochwatch")


def _links_to(home: Path, pyspark_dir: Path) -> bool:
    jars = home / "jars"
    return jars.is_symlink() and jars.resolve() == (pyspark_dir / "jars").resolve() and not (home / "python").exists()


def _remove(staging: Path) -> None:
    for entry in staging.iterdir():
        entry.unlink()
    staging.rmdir()
