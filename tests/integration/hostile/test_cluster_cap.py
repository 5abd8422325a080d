"""The cap on clusters per job through the real job (issue #22): with room for two clusters, once
the job holds two (its registry in the checkpoint, kept across a restart) a third's events are
dead letters with reason ``cluster_cap`` in the dead-letter topic, and the two are watched as
without it. (Which clusters a first batch admits, when more than the cap arrive at once, is
first come, first admitted: streaming.spark.cluster_gate.)"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streaming.sinks.memory import MemorySink
from streaming.spark.listeners import cluster_registry_path
from tests.integration.hostile.support import dead_letter_headers, job_settings, run_to_end, write_events
from tests.support.builders import hb

pytestmark = [pytest.mark.integration, pytest.mark.spark]
T0 = 1_767_225_600_000


def beats(cluster: str, start_s: int, end_s: int) -> list[dict]:
    out = []
    for t in range(start_s * 1000, end_s * 1000, 1000):
        for b in (1, 2):
            ev = hb(T0 + t + b, b)
            ev["cluster_id"] = cluster
            out.append(ev)
    return out


def test_a_cluster_past_the_cap_is_dead_letters_and_the_others_are_watched(broker, spark, tmp_path):
    settings = job_settings(broker.bootstrap_servers, tmp_path, **{
        "rules.state.max.clusters": 2, "kafka.maxOffsetsPerTrigger": 40})
    events_topic = settings.kafka.events_topic
    write_events(broker.bootstrap_servers, events_topic, beats("first", 0, 30) + beats("second", 0, 30))
    assert run_to_end(spark, settings, [MemorySink()]).exception() is None
    registry = Path(cluster_registry_path(settings.checkpoint_location))
    assert json.loads(registry.read_text()) == {"admitted": ["first", "second"]}

    # the job restarts on its checkpoint; a third cluster turns up among the two
    third = beats("third", 30, 60)
    later = sorted(beats("first", 30, 60) + beats("second", 30, 60) + third, key=lambda e: e["event_time"])
    write_events(broker.bootstrap_servers, events_topic, later)
    memory = MemorySink()
    query = run_to_end(spark, settings, [memory])
    assert query.exception() is None, query.exception()

    letters = dead_letter_headers(broker.bootstrap_servers, settings.kafka.dlq_topic, len(third) + 1, timeout_s=15)
    assert Counter(h["epochwatch.dlq.reason"] for h in letters) == {"cluster_cap": len(third)}
    assert "rules.state.max.clusters" in letters[0]["epochwatch.dlq.detail"]
    watched = {(s["cluster_id"], s["broker_id"]) for s in memory.all("broker_status")}
    assert watched == {("first", 1), ("first", 2), ("second", 1), ("second", 2)}
    assert json.loads(registry.read_text()) == {"admitted": ["first", "second"]}
