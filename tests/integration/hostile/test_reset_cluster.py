"""`epochwatch reset-cluster` against the real broker and the real job: what a producer left that
no check could refuse (heartbeats of a broker id that never existed) keeps an alert open until
the operator resets the cluster; then it resolves, and the cluster's events go on afresh."""

from __future__ import annotations

import time

import pytest
import yaml

from streaming.commands import main
from streaming.sinks.memory import MemorySink
from tests.integration.hostile.support import job_settings, run_to_end, write_events
from tests.support.builders import hb

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def beats(cluster: str, start: int, end: int, brokers=(1, 2)) -> list[dict]:
    out = [hb(t, b) for t in range(start, end, 500) for b in brokers]
    for ev in out:
        ev["cluster_id"] = cluster
    return out


def test_reset_cluster_resolves_what_a_bogus_broker_left_open(broker, spark, tmp_path, capsys):
    settings = job_settings(broker.bootstrap_servers, tmp_path)
    k = settings.kafka
    config = tmp_path / "epochwatch.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"bootstrap.servers": k.bootstrap_servers,
                                                "topics": {"events": k.events_topic}}}))
    now = int(time.time() * 1000)
    bogus = hb(now - 50_000, 999)
    bogus["cluster_id"] = "resettable"
    write_events(broker.bootstrap_servers, k.events_topic, beats("resettable", now - 60_000, now) + [bogus])

    assert main(["reset-cluster", "--config", str(config), "--cluster-id", "resettable"]) == 0
    said = capsys.readouterr().out
    reset_at = int(said.split("(event_time ")[1].split(")")[0])
    assert now <= reset_at <= int(time.time() * 1000)
    write_events(broker.bootstrap_servers, k.events_topic, beats("resettable", reset_at + 1, reset_at + 10_000))

    memory = MemorySink()
    query = run_to_end(spark, settings, [memory])

    assert query.exception() is None, query.exception()
    bogus_alerts = [(a["status"], a["event_time"]) for a in memory.all("alerts") if a["labels"].get("broker_id") == "999"]
    assert [status for status, _ in bogus_alerts] == ["firing", "resolved"]
    assert bogus_alerts[0][1] < reset_at and bogus_alerts[1][1] == reset_at, "open until the reset, resolved by it"
    after = [s for b in memory.batches for s in b.broker_status]
    assert {s["broker_id"] for s in after[-2:]} == {1, 2}
    assert not [a for a in memory.all("alerts") if a["status"] == "firing" and a["event_time"] > reset_at]
    assert memory.all("dead_letters") == []
