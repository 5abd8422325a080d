"""Hostile-input fixtures: a broker of the test's own, for tests that load it with a gigabyte
(its log dir goes with it at teardown, instead of staying in the session broker's)."""

from __future__ import annotations

import pytest


@pytest.fixture
def own_broker(kafka_cluster_factory):
    return kafka_cluster_factory(controllers=1, brokers=1)
