"""Forged values through the real job (issue #22): an incarnation near 2^63, a metadata epoch
leaping 2^41 past the cluster's and an event time 30 years ahead are dead letters with their
reasons, and the cluster's alerts are those of the same events without them."""

from __future__ import annotations

import uuid

import pytest

from streaming.sinks.memory import MemorySink
from tests.integration.hostile.support import dead_letter_headers, job_settings, run_to_end, write_events
from tests.support.builders import hb, update

pytestmark = [pytest.mark.integration, pytest.mark.spark]
T0 = 1_767_225_600_000


def cluster_events() -> list[dict]:
    evs = [hb(T0 + t + b, b) for t in range(0, 30_000, 1000) for b in (1, 2)]
    evs += [update(T0 + t + b, b, 100 + t // 5000) for t in range(0, 30_000, 5000) for b in (1, 2)]
    return sorted(evs, key=lambda e: e["event_time"])


def test_forged_values_are_dead_letters_and_change_no_alert(broker, spark, tmp_path):
    forged = [hb(T0 + 10_500, 1, inc=2**63 - 1), update(T0 + 11_500, 1, 102 + 2**41), hb(T0 + 10**12, 2)]
    results = {}
    for name, extra in (("clean", []), ("forged", forged)):
        evs = cluster_events()
        evs[len(evs) // 2:len(evs) // 2] = extra  # amid the cluster's events, in the same batch
        for ev in evs:
            ev["cluster_id"] = "forged-values"
        settings = job_settings(broker.bootstrap_servers, tmp_path / f"{name}-{uuid.uuid4().hex[:4]}")
        write_events(broker.bootstrap_servers, settings.kafka.events_topic, evs)
        memory = MemorySink()
        query = run_to_end(spark, settings, [memory])
        assert query.exception() is None, query.exception()
        results[name] = memory
        letters = dead_letter_headers(broker.bootstrap_servers, settings.kafka.dlq_topic, len(extra), timeout_s=10)
        assert sorted(h["epochwatch.dlq.reason"] for h in letters) == sorted(
            ["implausible_value", "implausible_jump", "future_event_time"][:len(extra)])

    def alerts(memory):
        return sorted((a["alertname"], a["status"], a["event_time"]) for a in memory.all("alerts"))

    assert alerts(results["forged"]) == alerts(results["clean"])
    assert [s["incarnation_id"] for s in results["forged"].all("broker_status") if s["broker_id"] == 1][-1] == 1
