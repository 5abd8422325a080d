"""The collector's protocol client (streaming/collect/probes.py) against real brokers: a paused
broker first on the bootstrap list must not hold a fresh collector at "unreachable". kafka-python
alone bootstraps from a random server and waits for it the whole bootstrap timeout (30 s), which
kept the real-incident collector blind for over a minute after a restart."""

from __future__ import annotations

import time

import pytest

from streaming.collect.probes import ClusterProbe

pytestmark = pytest.mark.integration

TIMEOUT_MS = 2000


def test_a_paused_first_bootstrap_server_costs_one_request_timeout(kafka_cluster):
    c = kafka_cluster
    assert c.bootstrap_servers.split(",")[0] == c.client_address(1)
    c.pause(1)
    took = []
    try:
        for attempt in range(4):  # each a fresh collector: at random, 4 in a row would pass 1 time in 16
            probe = ClusterProbe(c.bootstrap_servers, f"probe-test-{attempt}", TIMEOUT_MS)
            started = time.monotonic()
            try:
                state = probe.cluster()
            finally:
                took.append(time.monotonic() - started)
                probe.close()
            assert state.cluster_id == c.cluster_id and set(state.brokers) == set(c.broker_ids)
    finally:
        c.resume(1)
        c.wait_for_brokers([1], 60)
    assert max(took) < 2 * TIMEOUT_MS / 1000 + 2, took
