"""Hostile-input fixtures: a broker of the test's own, for tests that load it with a gigabyte
(tansu keeps topics in memory: gone with the broker at teardown, not left in the shared one)."""

from __future__ import annotations

import pytest

from streaming.embedded import EmbeddedBroker


@pytest.fixture
def own_broker(tmp_path):
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        yield broker
