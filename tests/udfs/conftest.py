"""Fixtures of the Kafka source / sink tests (helpers live in tests/support/kafka_io.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap_servers
