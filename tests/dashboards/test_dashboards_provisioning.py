"""deploy/grafana provisioning files: well-formed, and consistent with Prometheus and the dashboards."""

from __future__ import annotations

from pathlib import Path

import yaml

from dashboards import build_all

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROVISIONING = DEPLOY / "grafana" / "provisioning"


def test_datasource_is_a_prometheus_with_the_scrape_interval_of_our_prometheus():
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    assert datasources["apiVersion"] == 1
    [prometheus] = datasources["datasources"]
    assert prometheus["type"] == "prometheus" and prometheus["access"] == "proxy"
    assert prometheus["url"] == "${EPOCHWATCH_PROMETHEUS_URL}"
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"]["scrape_interval"]
    assert prometheus["jsonData"]["timeInterval"] == scrape, "$__rate_interval needs Grafana to know the scrape interval"
    # the dashboards do not name this datasource: they choose one of its type through a variable
    for dashboard in build_all().values():
        assert dashboard["templating"]["list"][0]["query"] == prometheus["type"]


def test_dashboard_provider_reads_the_render_directory():
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "epochwatch.yml").read_text())
    assert providers["apiVersion"] == 1
    [provider] = providers["providers"]
    assert provider["type"] == "file"
    assert provider["allowUiUpdates"] is False, "UI edits would be lost at the next render"
    path = provider["options"]["path"]
    readme = (DEPLOY / "grafana" / "README.md").read_text()
    assert f"epochwatch dashboards render --out {path}" in readme
    assert f"--out {path}" in (PROVISIONING / "dashboards" / "epochwatch.yml").read_text()
