"""Fixtures of the Spark-side tests."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

import pytest

from streaming.spark.engine_host import HostedSteps
from tests.support.engine_hosts import host_stats


@pytest.fixture
def short_tmp():
    """A fresh folder under /tmp, removed afterwards (AF_UNIX paths are short: pytest's tmp_path is
    too long for them)."""
    folder = tempfile.mkdtemp(prefix="ew-", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def address(short_tmp):
    """A host address in a fresh short folder; the host started there is stopped afterwards."""
    path = os.path.join(short_tmp, "p0")
    yield path
    HostedSteps._connections.pop(path, None)
    stats = host_stats(path)
    if stats:
        os.kill(stats["pid"], signal.SIGTERM)
