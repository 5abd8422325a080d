"""Every simulator incident through the pure rules (no Spark): each expected alert fires within its
bound, nothing unexpected fires. The Spark + Kafka version is tests/integration/test_scenarios_e2e.py."""

import pytest

from streaming.local import detect_all
from streaming.simulate import SCENARIOS, check, run_scenario


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_against_ground_truth(name):
    result = run_scenario(name)
    truth = result.truth
    alerts = detect_all(result.events, truth.rule_settings(), until=truth.end_ms)
    report = check(alerts, truth)
    assert report.ok, report.summary()


@pytest.mark.parametrize("batch", [1, 333, 100_000])
def test_partitioned_broker_alerts_do_not_depend_on_batching(batch):
    result = run_scenario("partitioned_broker")
    settings = result.truth.rule_settings()
    reference = detect_all(result.events, settings, until=result.truth.end_ms)
    alerts = detect_all(result.events, settings, batch=batch, until=result.truth.end_ms)
    assert [a["event_id"] for a in alerts] == [a["event_id"] for a in reference]
