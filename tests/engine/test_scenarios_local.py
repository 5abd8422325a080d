"""Every simulator incident through the pure rules (no Spark): each expected alert fires within its
bound, nothing unexpected fires. The Spark + Kafka version is tests/integration/test_scenarios_e2e.py."""

import pytest

from streaming.engine.local import detect_all
from streaming.rules.catalog import RULES
from streaming.tools.simulate import SCENARIOS, check, run_scenario


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_against_ground_truth(name):
    result = run_scenario(name)
    truth = result.truth
    alerts = detect_all(result.events, truth.rule_settings(), until=truth.end_ms)
    report = check(alerts, truth)
    assert report.ok, report.summary()
    # the labels each rule declares (catalog: what a deployment's own labels must not take) are
    # exactly the labels its records carry
    for a in alerts:
        assert set(a["labels"]) == {"alertname", "cluster", "severity", *RULES[a["alertname"]].labels}, a


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_alerts_do_not_depend_on_batching(name):
    """Why: replay must be deterministic on event time, whatever the micro-batch boundaries."""
    result = run_scenario(name)
    settings, until = result.truth.rule_settings(), result.truth.end_ms
    reference = [(a["event_id"], a["event_time"]) for a in detect_all(result.events, settings, until=until)]
    for batch in (1, 97, 1_000_000):
        alerts = detect_all(result.events, settings, batch=batch, until=until)
        assert [(a["event_id"], a["event_time"]) for a in alerts] == reference, f"batch={batch}"
