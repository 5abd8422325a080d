"""Fixtures of the Spark-side tests."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

from streaming.spark.engine_host import HostedSteps
from tests.support.engine_hosts import host_stats


@pytest.fixture
def address():
    """A host address in a fresh folder (AF_UNIX paths are short: not under pytest's tmp_path);
    the host started there is stopped afterwards."""
    folder = tempfile.mkdtemp(prefix="ew-host-", dir="/tmp")
    path = os.path.join(folder, "p0")
    yield path
    HostedSteps._connections.pop(path, None)
    stats = host_stats(path)
    if stats:
        os.kill(stats["pid"], signal.SIGTERM)
