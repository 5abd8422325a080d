"""deploy/alertmanager and deploy/prometheus checked by the real amtool / promtool."""

from __future__ import annotations

import os
import subprocess

import pytest

from streaming.rules.catalog import runbook_url
from tests.integration.observability.services import (
    AM_RENDER,
    AM_TEMPLATE,
    AMTOOL_BIN,
    PROMETHEUS_CONFIG,
    PROMTOOL_BIN,
    WebhookReceiver,
    collector_down_within_s,
    render_alertmanager_config,
    seconds,
)

pytestmark = pytest.mark.integration
PROMETHEUS_DIR = PROMETHEUS_CONFIG.parent


def run(*argv, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def rendered(tmp_path):
    receiver = WebhookReceiver()
    yield render_alertmanager_config(tmp_path / "alertmanager.yml", receiver, fast=False)
    receiver.close()


def test_rendered_alertmanager_config_is_valid(rendered):
    result = run(AMTOOL_BIN, "check-config", rendered)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 inhibit rules" in result.stdout and "2 receivers" in result.stdout


ROUTES = [
    (1, "critical pages", {"severity": "critical", "alertname": "ClusterSilent", "kafka_cluster": "c1"}, "pager"),
    (2, "warning goes to the team channel", {"severity": "warning", "alertname": "BrokerHeartbeatTimeout"}, "team"),
    (3, "info goes to the team channel", {"severity": "info", "alertname": "BrokerRestarted"}, "team"),
    (4, "no severity label: the default (team), never the pager", {"alertname": "Whatever"}, "team"),
]


@pytest.mark.parametrize("num, why, labels, receiver", ROUTES)
def test_routing(rendered, num, why, labels, receiver):
    result = run(AMTOOL_BIN, "config", "routes", "test", f"--config.file={rendered}",
                 *(f"{k}={v}" for k, v in labels.items()))
    assert result.stdout.strip() == receiver, f"case {num}: {why}: {result.stdout}{result.stderr}"


def test_cluster_silent_waits_until_a_stopped_collector_has_been_told(rendered):
    """Why: an inhibition only holds back notifications not yet sent. When a cluster goes silent
    because its collector stopped, EpochwatchCollectorDown must reach Alertmanager before the
    cluster's ClusterSilent is notified, or lost telemetry pages as an outage. The worst case on
    Prometheus' side is the collector's scrape interval + its rule group's interval + `for`; the
    job raises ClusterSilent some seconds after the collector stopped (the heartbeat timeout less
    the age of the last heartbeat), which this leaves aside as the margin."""
    import yaml

    raised_within_s = collector_down_within_s()
    routes = yaml.safe_load(rendered.read_text())["route"]["routes"]
    silent = next(r for r in routes if r.get("matchers") == ['alertname="ClusterSilent"'])
    assert silent["receiver"] == "pager"
    assert seconds(silent["group_wait"]) >= raised_within_s + 5, (silent["group_wait"], raised_within_s)
    # the promtool test of the collector's rule runs at the group's own interval
    test = yaml.safe_load((PROMETHEUS_DIR / "tests" / "epochwatch-collector.test.yml").read_text())
    group = next(g for g in yaml.safe_load((PROMETHEUS_DIR / "rules" / "epochwatch-meta.yml").read_text())["groups"]
                 if g["name"] == "epochwatch-collector")
    assert test["evaluation_interval"] == group["interval"]


def test_template_needs_the_webhook_urls(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHWATCH_")}
    result = run("python3", AM_RENDER, "--out", tmp_path / "am.yml", env=env)
    assert result.returncode == 2
    assert "EPOCHWATCH_PAGER_WEBHOOK_URL is not set" in result.stderr and "_FILE" in result.stderr
    bad = {**env, "EPOCHWATCH_PAGER_WEBHOOK_URL": "pager.example/hook", "EPOCHWATCH_TEAM_WEBHOOK_URL": "https://t/x"}
    result = run("python3", AM_RENDER, env=bad)
    assert result.returncode == 2 and "not an http(s) URL" in result.stderr
    # the unrendered template is not a usable config: nothing can start with placeholder URLs
    assert run(AMTOOL_BIN, "check-config", AM_TEMPLATE).returncode != 0


def test_prometheus_config_and_rules_are_valid():
    config = run(PROMTOOL_BIN, "check", "config", PROMETHEUS_DIR / "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout
    rules = run(PROMTOOL_BIN, "check", "rules", *sorted((PROMETHEUS_DIR / "rules").glob("*.yml")))
    assert rules.returncode == 0, rules.stdout + rules.stderr


def test_rules_rendered_with_another_runbook_base_are_valid(tmp_path):
    base = "https://git.example.com/sre/epochwatch/blob/main/docs/alerts.md"
    result = run("python3", PROMETHEUS_DIR / "render.py", "--runbook-base-url", base, "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    rules = run(PROMTOOL_BIN, "check", "rules", *sorted(tmp_path.glob("*.yml")))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"{base}#epochwatchdown" in (tmp_path / "epochwatch-meta.yml").read_text()


def test_meta_alert_rule_unit_tests():
    result = run(PROMTOOL_BIN, "test", "rules", *sorted((PROMETHEUS_DIR / "tests").glob("*.test.yml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_runbook_section():
    import re

    import yaml

    repo = PROMETHEUS_DIR.parents[1]
    contracts = (repo / "docs" / "CONTRACTS.md").read_text()
    names_text = contracts.split("Alert names:", 1)[1].split("\n\n", 1)[0]
    detection = set(re.findall(r"[A-Z][A-Za-z]+", names_text))
    rules = [rule for path in sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
             for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]
    headings = set(re.findall(r"^### (\w+)$", (repo / "docs" / "alerts.md").read_text(), re.M))
    assert len(detection) == 17
    assert detection | {r["alert"] for r in rules} == headings
    for rule in rules:
        assert rule["annotations"]["runbook_url"] == runbook_url(rule["alert"])   # anchors: tests/deploy
        assert rule["labels"]["severity"] in ("critical", "warning")
