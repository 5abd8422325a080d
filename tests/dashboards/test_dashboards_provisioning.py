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
    # the dashboards choose a datasource of its type through a variable, which starts on this one
    for dashboard in build_all().values():
        variable = dashboard["templating"]["list"][0]
        assert variable["query"] == prometheus["type"]
        assert (variable["current"]["value"], variable["current"]["text"]) == (prometheus["uid"], prometheus["name"])


def test_datasource_does_not_take_the_default_from_the_organisations_own():
    """Grafana allows one default datasource per organisation: provisioning a second one fails
    Grafana's start-up, and replacing the existing default re-points every panel that relies on it."""
    [prometheus] = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert prometheus["isDefault"] is False
    for uid, dashboard in build_all().items():
        refs = list(datasource_refs(dashboard))
        assert len(refs) > 10 and all(ref == {"type": "prometheus", "uid": "${datasource}"} for ref in refs), uid


def datasource_refs(node):
    """Every "datasource" value in a dashboard (panels, queries, variables, annotations): a
    missing or null one would send the query to Grafana's default datasource."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            else:
                yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


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
