"""streaming.spark.home: a Spark home without pyspark's zips, for a pip-installed pyspark."""

import os
from pathlib import Path

from streaming.spark import home as spark_home


def unset_spark_home(monkeypatch):
    # set first, so that monkeypatch restores "unset" whatever the code under test exports
    monkeypatch.setenv("SPARK_HOME", "")
    monkeypatch.delenv("SPARK_HOME")


def pip_pyspark(root: Path) -> Path:
    """The layout pip installs: the package directory is the Spark home, zips under python/lib."""
    package = root / "site-packages" / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    (package / "jars").mkdir()
    (package / "bin").mkdir()
    (package / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (package / "version.py").write_text('__version__ = "4.3.0"\n')
    return package


def test_the_home_links_everything_but_python(tmp_path):
    """Why: the JVM needs jars/ and bin/ as before; python/lib holds the zips it would put first on
    every Python process's path."""
    package = pip_pyspark(tmp_path)
    home = spark_home.zipless_home(package, tmp_path / "cache")
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars", "version.py"]
    assert (home / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    assert (home / "jars").resolve() == (package / "jars").resolve()


def test_the_home_is_made_once_and_reused(tmp_path):
    """Why: every session start asks for it; a second call must find the first one's home, not pile
    up directories."""
    package = pip_pyspark(tmp_path)
    first = spark_home.zipless_home(package, tmp_path / "cache")
    assert spark_home.zipless_home(package, tmp_path / "cache") == first
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]


def test_another_release_gets_another_home(tmp_path):
    """Why: an upgrade in place may add entries the old home does not link."""
    package = pip_pyspark(tmp_path)
    first = spark_home.zipless_home(package, tmp_path / "cache")
    (package / "version.py").write_text('__version__ = "4.3.1"\n')
    assert spark_home.zipless_home(package, tmp_path / "cache") != first


def test_a_spark_distribution_without_the_zips_is_left_alone(tmp_path):
    """Why: nothing to gain, and a distribution's layout is not pip's."""
    package = pip_pyspark(tmp_path)
    (package / "python" / "lib" / "pyspark.zip").unlink()
    assert spark_home.zipless_home(package, tmp_path / "cache") is None


def test_a_spark_home_the_user_set_is_kept(tmp_path, monkeypatch):
    """Why: SPARK_HOME names the Spark to run; epochwatch only fills it in when it is unset."""
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert spark_home.use_zipless_home(tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()


def test_a_cache_that_cannot_be_made_keeps_sparks_own_home(tmp_path, monkeypatch):
    """Why: a read-only or odd home directory (containers) must not stop the job, only leave it
    slower."""
    unset_spark_home(monkeypatch)
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache directory would go")
    assert spark_home.use_zipless_home(cache) is None
    assert "SPARK_HOME" not in os.environ


def test_the_installed_pyspark_gets_a_home_without_python(tmp_path, monkeypatch):
    """Why: this is what build_session uses before the JVM starts."""
    unset_spark_home(monkeypatch)
    home = spark_home.use_zipless_home(tmp_path / "cache")
    assert home is not None and not (home / "python").exists() and (home / "jars").is_dir()
    assert os.environ["SPARK_HOME"] == str(home)
