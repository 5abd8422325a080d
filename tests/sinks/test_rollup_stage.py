"""The roll-up stage between the detector and the sinks: a broker partitioned from the controller
while every client asks it (simulator scenario partitioned_broker_fleet) through the single-process
detector, batch by batch, into RollupStage and the sinks after it."""

from __future__ import annotations

import pytest

from streaming.rules.rollup import CLIENT_COUNT, PER_BROKER, PER_CLIENT, RollupPolicy, is_rollup, per_client, rolled_up
from streaming.sinks.alert_book import latest_alert_states
from streaming.sinks.base import OutputBatch
from streaming.sinks.memory import MemorySink
from streaming.sinks.rollup_stage import RollupStage
from streaming.tools.simulate import run_scenario
from streaming.tools.simulate.model import ClusterShape
from tests.support.detector_batches import alert_batches

CLIENTS = 400


@pytest.fixture(scope="module")
def fleet():
    result = run_scenario("partitioned_broker_fleet", shape=ClusterShape(clients=CLIENTS))
    return result, {size: alert_batches(result.events, result.truth.rule_settings(), size, result.truth.end_ms)
                    for size in (97, 500, 5000)}


def run(batches: list[list[dict]], policy: RollupPolicy) -> MemorySink:
    stage, memory = RollupStage(policy), MemorySink()
    for batch_id, alerts in enumerate(batches):
        batch = OutputBatch(batch_id, alerts=list(alerts))
        for sink in (stage, memory):
            sink.write(batch)
    return memory


def identities(records: list[dict]) -> set:
    """What Alertmanager tells alerts apart by: their labels."""
    return {tuple(sorted(r["labels"].items())) for r in records}


def test_every_client_of_the_partitioned_broker_is_one_alert_per_alert_name(fleet):
    result, by_size = fleet
    k = str(result.truth.expected[0].labels["broker_id"])
    memory = run(by_size[500], RollupPolicy(PER_BROKER))
    clients = [a for a in memory.all("alerts") if per_client(a)]
    assert len({a["fingerprint"] for a in clients}) == CLIENTS, "the engine found every client's incident"
    assert all(rolled_up(a) for a in clients), "and each is on record, marked as counted in a roll-up"
    pages = memory.all("pages")
    assert {(dict(i)["alertname"], dict(i).get("broker_id")) for i in identities(pages)} == {
        ("BrokerHeartbeatTimeout", k), ("BrokerMetadataLag", k), ("StaleMetadataResponse", k)}
    rollups = [p for p in pages if is_rollup(p)]
    assert len({r["fingerprint"] for r in rollups}) == 1, "one incident: its updates keep the fingerprint"
    assert max(int(r["annotations"][CLIENT_COUNT]) for r in rollups) == CLIENTS
    assert rollups[-1]["status"] == "resolved" and rollups[0]["status"] == "firing"


def test_the_roll_up_does_not_depend_on_the_batches(fleet):
    """Why: a replay and the live job cut the same events into other micro-batches."""
    _, by_size = fleet
    runs = {size: run(batches, RollupPolicy(PER_BROKER)).all("rollups") for size, batches in by_size.items()}
    for size, rollups in runs.items():
        assert {(r["fingerprint"], r["starts_at"]) for r in rollups} == \
            {(r["fingerprint"], r["starts_at"]) for r in runs[5000]}, f"batch={size}: one incident, one identity"
        assert max(int(r["annotations"][CLIENT_COUNT]) for r in rollups) == CLIENTS, f"batch={size}: its peak"
        assert [r for r in rollups if r["status"] == "resolved"] == [r for r in runs[5000] if r["status"] == "resolved"]


def test_per_client_delivers_up_to_the_cap_and_rolls_up_the_rest(fleet):
    _, by_size = fleet
    pages = run(by_size[500], RollupPolicy(PER_CLIENT, max_per_cluster=20)).all("pages")
    stale = [p for p in pages if p["alertname"] == "StaleMetadataResponse"]
    assert len(identities([p for p in stale if per_client(p)])) == 20
    assert len(identities([p for p in stale if is_rollup(p)])) == 1
    assert max(int(p["annotations"][CLIENT_COUNT]) for p in stale if is_rollup(p)) == CLIENTS - 20


def test_a_driver_restart_mid_incident_goes_on_with_the_same_alert(fleet):
    """The restarted driver's stage is seeded from the alerts topic (what the sinks before it wrote):
    from there on it delivers exactly what an uninterrupted driver delivers."""
    _, by_size = fleet
    batches = by_size[500]
    uninterrupted = run(batches, RollupPolicy(PER_BROKER))
    firing_at = [i for i, b in enumerate(uninterrupted.batches) if b.rollups][0] + 1   # the roll-up is open
    topic = latest_alert_states(r for b in uninterrupted.batches[:firing_at] for r in b.alerts + b.rollups)
    restarted = RollupStage(RollupPolicy(PER_BROKER))
    seeded = restarted.seed(topic.values())
    (open_rollup,) = [r for r in seeded if is_rollup(r)]
    assert open_rollup == uninterrupted.batches[firing_at - 1].rollups[-1], "Alertmanager is re-sent the alert it has"
    memory = MemorySink()
    for batch_id, alerts in enumerate(batches[firing_at:], start=firing_at):
        batch = OutputBatch(batch_id, alerts=list(alerts))
        for sink in (restarted, memory):
            sink.write(batch)
    assert memory.all("pages") == [p for b in uninterrupted.batches[firing_at:] for p in b.pages]
