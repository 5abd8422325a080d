"""Spark's Python worker daemon (``spark.python.daemon.module``), with pyspark imported from the
installed package instead of ``$SPARK_HOME/python/lib/pyspark.zip``.

Spark puts its pyspark.zip and py4j zip first on every Python worker's path. Imported from a zip,
each module a new worker loads is compiled from source (zipimport keeps no bytecode cache), and
every task re-reads the 4 MB zip's directory (the worker calls importlib.invalidate_caches()).
When the same release is installed as a package (epochwatch depends on pyspark, so it is), the
zips are taken off the path before anything is imported from them; otherwise they stay.
"""

from __future__ import annotations

import re
import sys
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path

# Spark's zips, named by the package each holds
_SPARK_ZIP = re.compile(r"(?P<package>pyspark)\.zip|(?P<py4j>py4j)-[0-9.]+-src\.zip")


def without_spark_zips(path: list[str]) -> list[str]:
    """``path`` less Spark's zips whose package is also installed elsewhere on it, same version."""
    kept = list(path)
    for entry in path:
        package = _zipped_package(entry)
        zipped = package and _zip_version(entry, package)
        if zipped and _installed_version(package, [p for p in kept if p != entry]) == zipped:
            kept.remove(entry)
    return kept


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
    spec = PathFinder.find_spec(package, [p for p in path if not p.endswith(".zip")])
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        return (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None


def main() -> None:
    dropped = set(sys.path) - set(without_spark_zips(sys.path))
    sys.path[:] = [p for p in sys.path if p not in dropped]
    for entry in dropped:
        sys.path_importer_cache.pop(entry, None)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
