"""Ground truth: its bounds come from the RuleSettings (change a threshold, the bound moves by
exactly that much), it survives JSON, and the checker's verdicts (a table of numbered cases)."""

from __future__ import annotations

import pytest

from streaming.tools.simulate import GroundTruth, check, run_scenario, scenario_settings
from streaming.tools.simulate.truth import SEVERITIES, AllowedAlert, ExpectedAlert, settings_dict

BASE = scenario_settings()


def expectation(name: str, alertname: str, **overrides) -> ExpectedAlert:
    truth = run_scenario(name, settings=scenario_settings(**overrides)).truth
    return next(e for e in truth.expected if e.alertname == alertname)


def width(e: ExpectedAlert) -> int:
    return e.not_after_ms - e.not_before_ms


# (case, scenario, alert, setting, delta, how the window width must move, why)
BOUND_CASES = [
    (1, "partitioned_broker", "BrokerHeartbeatTimeout", "controller_heartbeat_timeout_ms", 3000, 3000,
     "fires controller.heartbeat.timeout.ms + pending after the last heartbeat"),
    (2, "partitioned_broker", "BrokerHeartbeatTimeout", "heartbeat_timeout_pending_ms", 2000, 2000,
     "the pending period adds to the deadline"),
    (3, "partitioned_broker", "BrokerMetadataLag", "metadata_lag_grace_ms", 10_000, 10_000,
     "lag is reported metadata.lag.grace.ms after the broker fell behind"),
    (4, "stuck_stopping", "BrokerStuckStopping", "stopping_grace_ms", 30_000, 30_000,
     "STOPPING for broker.stopping.grace.ms"),
    (5, "broker_not_returned", "BrokerNotReturned", "not_returned_grace_ms", 60_000, 60_000,
     "away for broker.not.returned.grace.ms after the controller fenced it"),
    (6, "broker_not_returned", "BrokerNotReturned", "controller_heartbeat_timeout_ms", 4000, 4000,
     "the controller fences a silent broker controller.heartbeat.timeout.ms after its last heartbeat"),
    (7, "all_brokers_replaced", "ClientRebootstrapOverdue", "rebootstrap_trigger_ms", 30_000, 30_000,
     "overdue metadata.recovery.rebootstrap.trigger.ms after the first failure"),
    (8, "rolling_restart", "BrokerRestarted", "broker_heartbeat_interval_ms", -1000, -2000,
     "the slack is two heartbeat intervals"),
    (9, "commit_epoch_regression", "OffsetCommitEpochRegression", "broker_heartbeat_interval_ms", 1000, 2000,
     "an immediate alert is only given the slack"),
]


@pytest.mark.parametrize("case,name,alert,setting,delta,moves,why", BOUND_CASES,
                         ids=[f"case{c[0]}-{c[2]}-{c[3]}" for c in BOUND_CASES])
def test_bounds_move_with_the_thresholds(case, name, alert, setting, delta, moves, why):
    before = expectation(name, alert)
    after = expectation(name, alert, **{setting: getattr(BASE, setting) + delta})
    assert width(after) - width(before) == moves, f"case {case}: {why}"


def test_duplicate_bound_counts_broker_duplicate_min_heartbeats():
    # Why: DuplicateBrokerId is due at the n-th heartbeat of the lower incarnation.
    interval = BASE.broker_heartbeat_interval_ms
    three = expectation("duplicate_broker_id", "DuplicateBrokerId")
    five = expectation("duplicate_broker_id", "DuplicateBrokerId", duplicate_min_heartbeats=5)
    assert abs(width(five) - width(three) - 2 * interval) <= interval // 10


def test_flapping_bound_needs_one_more_return_per_two_transitions():
    s = BASE
    cycle = s.controller_heartbeat_timeout_ms + s.heartbeat_timeout_pending_ms + 4 * s.broker_heartbeat_interval_ms
    six = expectation("flapping_broker", "BrokerFlapping")
    eight = expectation("flapping_broker", "BrokerFlapping", flapping_transitions=8)
    assert width(eight) - width(six) == cycle


def test_scenarios_refuse_settings_they_cannot_honour():
    from streaming.tools.simulate import SimulationError

    with pytest.raises(SimulationError, match="broker.flapping.window.ms"):
        run_scenario("flapping_broker", settings=scenario_settings(flapping_window_ms=30_000))
    with pytest.raises(SimulationError, match="broker.stopping.grace.ms"):
        run_scenario("rolling_restart", settings=scenario_settings(stopping_grace_ms=1000))


def test_truth_survives_json_and_gives_back_the_settings_used():
    settings = scenario_settings(metadata_lag_grace_ms=20_000)
    truth = run_scenario("partitioned_broker", settings=settings).truth
    again = GroundTruth.from_json(truth.to_json())
    assert again == truth
    assert again.rule_settings() == settings
    assert truth.settings["metadata.lag.grace.ms"] == 20_000  # YAML names: paste into rules:


def test_every_contract_alert_has_a_severity_matching_the_engine_catalog():
    from streaming.rules.catalog import RULES

    assert {name: rule.severity.name for name, rule in RULES.items()} == dict(SEVERITIES)


# --- the checker -----------------------------------------------------------------------------

TRUTH = GroundTruth(
    scenario="table", seed=1, cluster_id="c1", settings=settings_dict(BASE), start_ms=0, end_ms=100_000,
    incident_at_ms=10_000,
    expected=(ExpectedAlert("BrokerHeartbeatTimeout", {"cluster": "c1", "broker_id": "2"}, "warning",
                            10_000, 20_000, resolves_by_ms=50_000, max_count=1),
              ExpectedAlert("ClusterIdMismatch", {"cluster": "c1", "client_id": "x"}, "critical", 10_000, 30_000)),
    allowed=(AllowedAlert("StaleMetadataResponse", {"cluster": "c1", "broker_id": "2"}),),
)


def rec(alertname, t, status="firing", fp=None, cluster="c1", severity=None, **labels):
    severity = severity or SEVERITIES[alertname]
    fp = fp or f"{alertname}-{sorted(labels.items())}"
    return {"event_type": "alert", "event_id": f"{fp}:{status}", "cluster_id": cluster, "event_time": t,
            "alertname": alertname, "severity": severity, "status": status, "fingerprint": fp,
            "labels": {"alertname": alertname, "cluster": cluster, "severity": severity, **labels},
            "starts_at": t, "ends_at": t if status == "resolved" else None}


TIMEOUT = rec("BrokerHeartbeatTimeout", 15_000, broker_id="2")
TIMEOUT_RESOLVED = rec("BrokerHeartbeatTimeout", 40_000, status="resolved", broker_id="2")
MISMATCH = rec("ClusterIdMismatch", 12_000, client_id="x")
GOOD = [TIMEOUT, TIMEOUT_RESOLVED, MISMATCH]

# (case, records, expected finding kinds, why)
CHECK_CASES = [
    (1, GOOD, [], "both expected alerts in their windows, the timeout resolved in time"),
    (2, [], ["missing", "missing"], "nothing fired"),
    (3, [rec("BrokerHeartbeatTimeout", 25_000, broker_id="2"), TIMEOUT_RESOLVED, MISMATCH], ["late"],
     "fired 5 s after not_after"),
    (4, [rec("BrokerHeartbeatTimeout", 5_000, broker_id="2"), TIMEOUT_RESOLVED, MISMATCH], ["early"],
     "fired before the cause: a spurious alert, not a detection"),
    (5, [rec("BrokerHeartbeatTimeout", 15_000, severity="critical", broker_id="2"), TIMEOUT_RESOLVED, MISMATCH],
     ["wrong_severity"], "severity is part of the contract"),
    (6, [TIMEOUT, MISMATCH], ["not_resolved"], "no resolved record at all"),
    (7, [TIMEOUT, rec("BrokerHeartbeatTimeout", 60_000, status="resolved", broker_id="2"), MISMATCH],
     ["not_resolved"], "resolved 10 s after resolves_by"),
    (8, GOOD + [rec("BrokerFlapping", 30_000, broker_id="2")], ["unexpected"], "neither expected nor allowed"),
    (9, GOOD + [rec("StaleMetadataResponse", 30_000, broker_id="2", client_id="y")], [],
     "allowed: the allowance's labels are a subset of the record's"),
    (10, GOOD + [TIMEOUT, dict(MISMATCH)], [], "a replayed batch rewrites the same records (same event_id)"),
    (11, GOOD + [rec("BrokerHeartbeatTimeout", 18_000, fp="second", broker_id="2")], ["too_many", "not_resolved"],
     "max_count 1: a second incident for the same broker (and that one never resolved)"),
    (12, GOOD + [rec("BrokerFlapping", 30_000, cluster="other", broker_id="2")], [],
     "another cluster's alerts are not this scenario's business"),
    (13, [rec("BrokerHeartbeatTimeout", 15_000, broker_id="3"), TIMEOUT_RESOLVED, MISMATCH],
     ["missing", "unexpected"], "the wrong broker: broker 2 missing, broker 3 unexpected"),
    (14, GOOD + [rec("BrokerHeartbeatTimeout", 70_000, fp="again", broker_id="2")], ["too_many", "unexpected"],
     "met once in its window, then a second incident long after: extra and unexplained"),
    (15, GOOD + [rec("StaleMetadataResponse", 30_000, broker_id="4", client_id="y")], ["unexpected"],
     "allowed only for broker 2"),
]


@pytest.mark.parametrize("case,records,kinds,why", CHECK_CASES, ids=[f"case{c[0]}" for c in CHECK_CASES])
def test_checker(case, records, kinds, why):
    report = check(records, TRUTH)
    assert sorted(f.kind for f in report.findings) == sorted(kinds), f"case {case}: {why}\n{report.summary()}"
    assert report.ok == (not kinds)


def test_summary_reads_well():
    ok = check(GOOD + [rec("StaleMetadataResponse", 30_000, broker_id="2")], TRUTH).summary()
    assert ok.startswith("table: OK (2 expected met, 1 allowed, 0 unexpected)")
    bad = check([rec("BrokerFlapping", 30_000, broker_id="2")], TRUTH)
    text = bad.summary()
    assert text.startswith("table: FAILED")
    assert "MISSING" in text and "BrokerHeartbeatTimeout{broker_id=2,cluster=c1}" in text
    assert "UNEXPECTED" in text and "BrokerFlapping" in text
    assert check(GOOD + [rec("BrokerFlapping", 1, cluster="other")], TRUTH).ignored_other_clusters == 1


def test_min_count_needs_that_many_firings_in_the_window():
    truth = GroundTruth(**{**TRUTH.__dict__, "expected": (
        ExpectedAlert("StaleMetadataResponse", {"cluster": "c1", "broker_id": "2"}, "warning", 0, 50_000,
                      min_count=2),)})
    one = [rec("StaleMetadataResponse", 10_000, client_id="a", broker_id="2")]
    two = one + [rec("StaleMetadataResponse", 11_000, client_id="b", broker_id="2")]
    assert [f.kind for f in check(one, truth).findings] == ["missing"]
    assert check(two, truth).ok


UNUSUAL = [
    ("pending below the heartbeat spread", dict(broker_heartbeat_interval_ms=3000, controller_heartbeat_timeout_ms=7000,
                                                heartbeat_timeout_pending_ms=1000)),
    ("lag grace below the heartbeat timeout", dict(metadata_lag_grace_ms=5000, stale_incident_quiet_ms=5000)),
]


@pytest.mark.parametrize("name", ["cluster_silent", "rolling_restart", "broker_not_returned", "all_brokers_replaced",
                                  "flapping_broker", "zombie_incarnation"])
@pytest.mark.parametrize("label,overrides", UNUSUAL, ids=[u[0] for u in UNUSUAL])
def test_truth_allows_what_no_engine_can_avoid_under_unusual_thresholds(name, label, overrides):
    # Why: the truth must stay fair when thresholds make an alert unavoidable (e.g. a broker's
    # timeout falls due before the whole cluster has been silent long enough to say so).
    from streaming.engine.local import detect_all

    result = run_scenario(name, settings=scenario_settings(**overrides))
    truth = result.truth
    report = check(detect_all(result.events, truth.rule_settings(), until=truth.end_ms), truth)
    assert report.ok, report.summary()
