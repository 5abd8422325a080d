"""Every dashboard: valid for Grafana's schema, filtered by cluster, navigable, sensible units."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import build_all
from dashboards.common import PROVISIONED_DATASOURCE_UID
from dashboards.metrics import METRICS
from dashboards.validation import schema_errors
from streaming.rules.catalog import RULES

EXPECTED_UIDS = [
    "epochwatch-fleet", "epochwatch-broker-states", "epochwatch-incarnations",
    "epochwatch-metadata-epochs", "epochwatch-clients", "epochwatch-monitor",
]
DASHBOARDS = build_all()
CONTRACTS = Path(__file__).resolve().parents[2] / "docs" / "CONTRACTS.md"
META_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / "epochwatch-meta.yml"
SDK_PANEL_MODELS = {"timeseries": "timeseries", "stat": "stat", "state-timeline": "statetimeline",
                    "table": "table", "bargauge": "bargauge"}
METRIC_REF = re.compile(r"\b(epochwatch_[a-z_]+)(\{[^}]*\})?")


def panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def visual_panels(dashboard):
    return [p for p in panels(dashboard) if p["type"] != "row"]


def all_exprs():
    return [(uid, p["title"], t["expr"]) for uid, d in DASHBOARDS.items() for p in visual_panels(d) for t in p["targets"]]


def test_the_six_dashboards_have_stable_uids_in_navigation_order():
    assert list(DASHBOARDS) == EXPECTED_UIDS


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_dashboard_matches_grafana_dashboard_schema(uid):
    assert schema_errors(DASHBOARDS[uid]) == []


@pytest.mark.parametrize("mutate, where", [
    # (what breaks the dashboard, the path the schema must point at) -- proves validation is not vacuous
    (lambda d: d["panels"][1]["gridPos"].update(w=30), "gridPos/w"),
    (lambda d: d.pop("templating"), "(root)"),
    (lambda d: d["templating"]["list"][1].update(type="dropdown"), "templating/list/1/type"),
    (lambda d: d["panels"][1].update(unknownField=True), "panels/1"),
    (lambda d: d["links"][0].pop("keepTime"), "links/0"),
])
def test_schema_rejects_broken_dashboards(mutate, where):
    broken = json.loads(json.dumps(DASHBOARDS["epochwatch-fleet"]))
    mutate(broken)
    errors = schema_errors(broken)
    assert errors and any(where in e for e in errors), errors


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_dashboard_metadata(uid):
    d = DASHBOARDS[uid]
    assert d["uid"] == uid and d["title"].startswith("epochwatch / ")
    assert d["tags"] == ["epochwatch"]
    assert "id" not in d
    ids = [p["id"] for p in panels(d)]
    assert ids == list(range(1, len(ids) + 1)), "panel ids are 1..n in order (stable files, viewPanel links)"


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_template_variables_datasource_and_cluster(uid):
    variables = {v["name"]: v for v in DASHBOARDS[uid]["templating"]["list"]}
    own = ["job", "instance"] if uid == "epochwatch-monitor" else []
    assert list(variables) == ["datasource", "kafka_cluster", *own]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    # starts on the provisioned datasource (by uid), not on whatever Prometheus is Grafana's default
    assert variables["datasource"]["current"]["value"] == PROVISIONED_DATASOURCE_UID
    cluster = variables["kafka_cluster"]
    assert cluster["type"] == "query"
    assert cluster["query"] == "label_values(epochwatch_broker_state, kafka_cluster)"
    assert cluster["multi"] is True and cluster["includeAll"] is True
    assert cluster["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_every_panel_and_query_uses_the_datasource_variable(uid):
    for panel in visual_panels(DASHBOARDS[uid]):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_metric_reference_comes_from_the_selector_helper():
    """Each metric is known, has a selector, and the selector filters by cluster iff the metric has that label."""
    seen = set()
    for uid, title, expr in all_exprs():
        refs = METRIC_REF.findall(expr)
        assert refs, f"{uid} / {title}: no epochwatch metric in {expr}"
        for name, matchers in refs:
            base = re.sub(r"_(bucket|sum|count)$", "", name) if name not in METRICS else name
            assert base in METRICS, f"{uid} / {title}: unknown metric {name}"
            assert matchers, f"{uid} / {title}: {name} without a selector"
            assert ('kafka_cluster=~"$kafka_cluster"' in matchers) == METRICS[base].has_cluster, (uid, title, expr)
            seen.add(base)
    assert seen == set(METRICS), f"metrics on no dashboard: {sorted(set(METRICS) - seen)}"


def test_metric_catalogue_equals_the_contract_table():
    table = {}
    for line in CONTRACTS.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("epochwatch_"):
            kind = cells[1].split()[0]
            labels = tuple(l.strip() for l in cells[2].split(",") if l.strip())
            table[cells[0]] = (kind, labels)
    assert table == {m.name: (m.kind, m.labels) for m in METRICS.values()}


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_panel_options_are_known_to_the_sdk_models(uid):
    """Round trip through the SDK's typed plugin models: an unknown or misspelt option would be dropped."""
    for panel in visual_panels(DASHBOARDS[uid]):
        models = importlib.import_module(f"grafana_foundation_sdk.models.{SDK_PANEL_MODELS[panel['type']]}")
        again = json.loads(json.dumps(models.Options.from_json(panel["options"]), cls=JSONEncoder))
        assert again == panel["options"], panel["title"]
        custom = panel["fieldConfig"]["defaults"].get("custom")
        if custom is not None and hasattr(models, "FieldConfig"):
            again = json.loads(json.dumps(models.FieldConfig.from_json(custom), cls=JSONEncoder))
            assert again == custom, panel["title"]
        prometheus = importlib.import_module("grafana_foundation_sdk.models.prometheus")
        for target in panel["targets"]:
            assert json.loads(json.dumps(prometheus.Dataquery.from_json(target), cls=JSONEncoder)) == target


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_panels_do_not_overlap_and_fit_the_grid(uid):
    taken = set()
    for panel in panels(DASHBOARDS[uid]):
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_units_and_thresholds(uid):
    for panel in visual_panels(DASHBOARDS[uid]):
        defaults = panel["fieldConfig"]["defaults"]
        if panel["type"] in ("timeseries", "bargauge") or (panel["type"] == "stat" and not defaults.get("mappings")):
            assert defaults.get("unit"), f"{panel['title']} has no unit"
        steps = defaults.get("thresholds", {}).get("steps", [])
        if steps:
            assert steps[0]["value"] is None, "the first threshold step is the base (-Infinity)"
            values = [s["value"] for s in steps[1:]]
            assert values == sorted(values), f"{panel['title']} thresholds not ascending"


def stat_panels():
    return [(uid, p) for uid, d in DASHBOARDS.items() for p in visual_panels(d) if p["type"] == "stat"]


def colour_at(panel: dict, value: float) -> str:
    """The colour Grafana gives ``value``: the last absolute step whose value is at or below it."""
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [s["color"] for s in steps if s["value"] is None or s["value"] <= value][-1]


# Stats where 0 is the outage (red at 0), and counters that are neither good nor bad (never coloured).
ZERO_IS_BAD = {("epochwatch-fleet", "Clusters reporting"), ("epochwatch-fleet", "Brokers ACTIVE"),
               ("epochwatch-monitor", "Job up")}
NOT_COLOURED = {("epochwatch-metadata-epochs", "Controller metadata epoch"), ("epochwatch-monitor", "State rows")}


def test_every_stat_panel_has_its_own_thresholds_with_a_base_colour():
    """Without thresholds Grafana colours a stat green below 80 and red from 80, whatever it counts."""
    assert len(stat_panels()) >= 20
    for uid, panel in stat_panels():
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults["thresholds"]["steps"]
        assert defaults["thresholds"]["mode"] == "absolute", (uid, panel["title"])
        assert steps[0]["value"] is None and steps[0]["color"], f"{uid} / {panel['title']}: no base colour"
        assert defaults["color"] == {"mode": "thresholds"}, (uid, panel["title"])


@pytest.mark.parametrize("uid, title", sorted(ZERO_IS_BAD | NOT_COLOURED))
def test_the_exceptions_name_existing_stats(uid, title):
    assert title in {p["title"] for u, p in stat_panels() if u == uid}


def test_counts_of_trouble_are_green_at_zero_and_coloured_above():
    """Alerts firing, fenced brokers, lag, backlog, dead letters...: 0 is healthy. Each turns
    another colour at some value above 0, or it would never warn."""
    checked = 0
    for uid, panel in stat_panels():
        if (uid, panel["title"]) in ZERO_IS_BAD | NOT_COLOURED:
            continue
        assert colour_at(panel, 0) == "green", f"{uid} / {panel['title']} is not green at 0"
        above = [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]
        assert above and min(above) > 0 and colour_at(panel, max(above)) != "green", (uid, panel["title"])
        checked += 1
    assert checked >= 15


def test_stats_whose_zero_is_an_outage_are_red_at_zero_and_green_from_one():
    panels = {(uid, p["title"]): p for uid, p in stat_panels()}
    for key in ZERO_IS_BAD:
        assert (colour_at(panels[key], 0), colour_at(panels[key], 1)) == ("red", "green"), key


def test_uncoloured_stats_say_so():
    panels = {(uid, p["title"]): p for uid, p in stat_panels()}
    for key in NOT_COLOURED:
        assert panels[key]["options"]["colorMode"] == "none", key


def test_alerting_stats_turn_red_or_orange_from_one_firing_alert():
    fleet = {p["title"]: p for p in visual_panels(DASHBOARDS["epochwatch-fleet"])}
    steps = fleet["Alerts firing (critical)"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps == [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    inactive = fleet["Brokers INACTIVE"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert inactive == [{"color": "green", "value": None}, {"color": "red", "value": 1}]


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_every_panel_says_what_it_shows(uid):
    """The (i) tooltip is where on-call reads what a number means at 3 a.m.; rows have none."""
    for panel in visual_panels(DASHBOARDS[uid]):
        assert panel.get("description", "").strip(), f"{uid} / {panel['title']} has no description"
    assert DASHBOARDS[uid]["description"].strip()


def test_monitor_queries_are_filtered_by_job_and_instance():
    """One Prometheus may scrape several epochwatch jobs: every series of the monitor dashboard is
    picked by the job and instance variables, which list the scraped targets."""
    monitor = DASHBOARDS["epochwatch-monitor"]
    variables = {v["name"]: v for v in monitor["templating"]["list"]}
    assert variables["job"]["query"] == "label_values(epochwatch_up, job)"
    assert variables["instance"]["query"] == 'label_values(epochwatch_up{job=~"$job"}, instance)'
    for name in ("job", "instance"):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*"
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    refs = [(p["title"], m) for p in visual_panels(monitor) for t in p["targets"]
            for _, m in METRIC_REF.findall(t["expr"])]
    assert len(refs) >= 15
    for title, matchers in refs:
        assert 'job=~"$job"' in matchers and 'instance=~"$instance"' in matchers, (title, matchers)
    for uid, d in DASHBOARDS.items():
        if uid != "epochwatch-monitor":
            assert "$job" not in json.dumps(d["panels"]), f"{uid}: the Kafka dashboards filter by cluster only"


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_annotations_mark_alert_transitions(uid):
    """Every dashboard overlays the alerts that concern it: a region from the alert's firing
    transition to its resolution, titled with the alert name."""
    annotations = DASHBOARDS[uid]["annotations"]["list"]
    assert annotations, f"{uid} has no annotation"
    for a in annotations:
        assert a["enable"] is True and a["name"] and a["iconColor"]
        assert a["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert a["target"]["datasource"] == a["datasource"] and a["target"]["refId"] == "Anno"
        assert "{{alertname}}" in a["titleFormat"] and "alertname" in a["tagKeys"].split(",")
        expr = a["target"]["expr"]
        if uid == "epochwatch-monitor":
            assert expr.startswith("ALERTS{") and 'alertstate="firing"' in expr and 'job=~"$job"' in expr
        else:
            assert expr.startswith("max by (kafka_cluster, alertname, severity) (epochwatch_alerts_firing{")
            assert 'kafka_cluster=~"$kafka_cluster"' in expr and expr.endswith("> 0")
            named = re.search(r'alertname=~"([^"]*)"', expr)
            assert named is None or set(named[1].split("|")) <= set(RULES), expr


def test_broker_state_timeline_maps_kafka_state_codes_to_names_and_colours():
    timeline = next(p for p in visual_panels(DASHBOARDS["epochwatch-broker-states"]) if p["type"] == "state-timeline")
    mapping = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {k: v["text"] for k, v in mapping.items()} == {"0": "INITIAL", "1": "INACTIVE", "2": "ACTIVE", "3": "STOPPING"}
    assert mapping["1"]["color"] == "red" and mapping["2"]["color"] == "green"
    assert timeline["targets"][0]["legendFormat"] == "{{kafka_cluster}} broker {{broker_id}}"


def test_links_between_dashboards():
    linked = set()
    for uid, d in DASHBOARDS.items():
        assert d["links"][0]["type"] == "dashboards" and d["links"][0]["tags"] == ["epochwatch"]
        assert d["links"][0]["includeVars"] and d["links"][0]["keepTime"]
        for panel in visual_panels(d):
            for link in panel.get("links", []):
                target = re.match(r"/d/([a-z-]+)\?", link["url"]).group(1)
                assert target in DASHBOARDS and target != uid, link
                assert "${kafka_cluster:queryparam}" in link["url"] and "${__url_time_range}" in link["url"]
                linked.add(target)
    assert len(linked) >= 4, f"few cross links: {linked}"


def test_monitor_annotation_covers_every_meta_alert():
    [annotation] = DASHBOARDS["epochwatch-monitor"]["annotations"]["list"]
    pattern = re.search(r'alertname=~"([^"]+)"', annotation["target"]["expr"])[1]
    groups = yaml.safe_load(META_RULES.read_text())["groups"]
    names = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert len(names) >= 5 and all(re.fullmatch(pattern, n) for n in names), names
