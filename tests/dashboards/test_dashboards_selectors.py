"""The shared selector helper, and the dashboards' PromQL checked by the real Prometheus (promtool)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from dashboards import build_all
from dashboards.selectors import broker_state_code, histogram_quantile, increase, rate, selector, sum_by

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package 'prometheus') not installed")


@pytest.mark.parametrize("args, kwargs, expected, why", [
    (("epochwatch_broker_state",), {}, 'epochwatch_broker_state{kafka_cluster=~"$kafka_cluster"}',
     "1: a metric with a cluster label is always filtered by the cluster variable"),
    (("epochwatch_up",), {}, "epochwatch_up{}",
     "2: the monitor's own metrics have no cluster label: a matcher would hide them once a cluster is picked"),
    (("epochwatch_broker_state",), {"state": "ACTIVE"},
     'epochwatch_broker_state{kafka_cluster=~"$kafka_cluster",state="ACTIVE"}',
     "3: a string is an equality matcher"),
    (("epochwatch_alerts_firing",), {"alertname": ("A", "B")},
     'epochwatch_alerts_firing{kafka_cluster=~"$kafka_cluster",alertname=~"A|B"}',
     "4: a tuple is an alternation"),
    (("epochwatch_dead_letters_total",), {"reason": 'say "hi"'}, 'epochwatch_dead_letters_total{reason="say \\"hi\\""}',
     "5: quotes in values are escaped"),
    (("epochwatch_batch_duration_seconds", "_bucket"), {}, "epochwatch_batch_duration_seconds_bucket{}",
     "6: histograms have _bucket / _sum / _count series"),
    (("epochwatch_up",), {"scrape_target": True}, 'epochwatch_up{job=~"$job",instance=~"$instance"}',
     "7: the monitor dashboard picks scrape targets by the job and instance variables"),
    (("epochwatch_alerts_firing",), {"scrape_target": True, "severity": "critical"},
     'epochwatch_alerts_firing{kafka_cluster=~"$kafka_cluster",severity="critical",job=~"$job",instance=~"$instance"}',
     "8: ... after the cluster and label matchers"),
])
def test_selector(args, kwargs, expected, why):
    assert selector(*args, **kwargs) == expected, why


@pytest.mark.parametrize("call, message", [
    (lambda: selector("epochwatch_broker_states"), "not a metric of docs/CONTRACTS.md"),
    (lambda: selector("epochwatch_up", cluster="x"), "has no label 'cluster'"),
    (lambda: selector("epochwatch_broker_state", "_bucket"), "suffix '_bucket' does not exist"),
    (lambda: rate("epochwatch_up"), "is a gauge, not a counter"),
    (lambda: histogram_quantile(0.5, "epochwatch_state_rows"), "is a gauge, not a histogram"),
])
def test_selector_mistakes_fail_when_building(call, message):
    with pytest.raises((KeyError, ValueError), match=message):
        call()


def test_query_helpers():
    assert sum_by((), "x") == "sum (x)"
    assert sum_by(("a", "b"), "x") == "sum by (a, b) (x)"
    assert increase("epochwatch_broker_restarts_total", "$__range") == \
        'increase(epochwatch_broker_restarts_total{kafka_cluster=~"$kafka_cluster"}[$__range])'
    assert histogram_quantile(0.95, "epochwatch_batch_duration_seconds") == \
        "histogram_quantile(0.95, sum by (le) (rate(epochwatch_batch_duration_seconds_bucket{}[$__rate_interval])))"
    assert rate("epochwatch_late_events_total", scrape_target=True) == \
        'rate(epochwatch_late_events_total{job=~"$job",instance=~"$instance"}[$__rate_interval])'
    assert histogram_quantile(0.5, "epochwatch_batch_duration_seconds", scrape_target=True) == (
        "histogram_quantile(0.5, sum by (le) (rate(epochwatch_batch_duration_seconds_bucket"
        '{job=~"$job",instance=~"$instance"}[$__rate_interval])))')


def grafana_interpolate(expr: str, cluster: str = ".*") -> str:
    """What Grafana sends to Prometheus: variables replaced ('All' is '.*', see cluster_variable)."""
    return (expr.replace("$kafka_cluster", cluster).replace("$job", ".*").replace("$instance", ".*")
            .replace("$__rate_interval", "1m").replace("$__range", "1h"))


def annotation_exprs() -> list[str]:
    return [a["target"]["expr"] for d in build_all().values() for a in d["annotations"]["list"]]


def run_promtool(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path):
    exprs = [t["expr"] for d in build_all().values() for p in d["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 40 and len(annotation_exprs()) == 6
    rules = [{"record": f"epochwatch:dashboard_query:{i}", "expr": grafana_interpolate(expr)}
             for i, expr in enumerate(exprs + annotation_exprs())]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = run_promtool(tmp_path, "check", "rules", "queries.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def assert_promql(tmp_path, series: list[dict], tests: list[dict]) -> None:
    """promtool evaluates each PromQL test over the input series (minutes apart)."""
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["empty.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
    }))
    result = run_promtool(tmp_path, "test", "rules", "test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_broker_state_code_evaluates_to_kafka_state_codes_for_the_picked_cluster(tmp_path):
    """Broker 1 of c1 goes INITIAL -> INACTIVE -> ACTIVE -> STOPPING, one state per minute.

    The expression must give 0, 1, 2, 3 and must not return c2's broker when only c1 is picked.
    """
    timeline = {"INITIAL": "1 0 0 0", "INACTIVE": "0 1 0 0", "ACTIVE": "0 0 1 0", "STOPPING": "0 0 0 1"}
    series = [{"series": f'epochwatch_broker_state{{kafka_cluster="c1",broker_id="1",state="{s}"}}', "values": v}
              for s, v in timeline.items()]
    series += [{"series": f'epochwatch_broker_state{{kafka_cluster="c2",broker_id="7",state="{s}"}}',
                "values": "1 1 1 1" if s == "ACTIVE" else "0 0 0 0"} for s in timeline]
    expr = grafana_interpolate(broker_state_code(), cluster="c1")
    tests = [{"expr": expr, "eval_time": f"{minute}m",
              "exp_samples": [{"labels": '{kafka_cluster="c1",broker_id="1"}', "value": code}]}
             for minute, code in enumerate((0, 1, 2, 3))]
    assert_promql(tmp_path, series, tests)


@needs_promtool
def test_firing_annotation_spans_the_alert_from_firing_to_resolved(tmp_path):
    """c1's BrokerMetadataLag fires from minute 1 to minute 2 (c2's fires throughout): the
    fleet's annotation query returns samples, which Grafana joins into one region, exactly
    while c1's fires when only c1 is picked."""
    fleet = build_all()["epochwatch-fleet"]
    [annotation] = fleet["annotations"]["list"]
    labels = 'alertname="BrokerMetadataLag",severity="critical"'
    series = [{"series": f'epochwatch_alerts_firing{{kafka_cluster="c1",{labels}}}', "values": "0 1 1 0 0"},
              {"series": f'epochwatch_alerts_firing{{kafka_cluster="c2",{labels}}}', "values": "1 1 1 1 1"}]
    expr = grafana_interpolate(annotation["target"]["expr"], cluster="c1")
    firing = [{"labels": f'{{kafka_cluster="c1",{labels}}}', "value": 1}]
    tests = [{"expr": expr, "eval_time": f"{minute}m", "exp_samples": firing if minute in (1, 2) else []}
             for minute in range(5)]
    assert_promql(tmp_path, series, tests)
