"""Pieces every dashboard shares: uids, variables, queries, legends, thresholds, links,
annotations, JSON.

A dashboard module chains the SDK builders and uses these helpers so that the datasource,
the ``kafka_cluster`` variable and the navigation look the same everywhere.
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import common as viz
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from dashboards.metrics import BROKER_STATE_CODES, CLUSTER_LABEL
from dashboards.selectors import CLUSTER_VARIABLE, max_by, selector

TAG = "epochwatch"
DATASOURCE_VARIABLE = "datasource"
# The datasource deploy/grafana/provisioning/datasources/prometheus.yml provisions: the
# `datasource` variable starts on it (Grafana falls back to the default Prometheus without it).
PROVISIONED_DATASOURCE_UID = "epochwatch-prometheus"
PROVISIONED_DATASOURCE_NAME = "Prometheus (epochwatch)"
# Annotation queries run as range queries at this step; firing samples closer than a step merge
# into one region.
ANNOTATION_STEP = "1m"

UID_FLEET = "epochwatch-fleet"
UID_BROKER_STATES = "epochwatch-broker-states"
UID_INCARNATIONS = "epochwatch-incarnations"
UID_METADATA_EPOCHS = "epochwatch-metadata-epochs"
UID_CLIENTS = "epochwatch-clients"
UID_MONITOR = "epochwatch-monitor"

GREEN, YELLOW, ORANGE, RED, BLUE, GREY = "green", "yellow", "orange", "red", "blue", "text"
STATE_COLORS = {"INITIAL": BLUE, "INACTIVE": RED, "ACTIVE": GREEN, "STOPPING": ORANGE}
SEVERITY_COLORS = {"info": BLUE, "warning": ORANGE, "critical": RED}


def datasource() -> cm.DataSourceRef:
    return cm.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")


def query(expr: str, legend: str = "", ref_id: str = "A", instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref_id).datasource(datasource())
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(pm.PromQueryFormat.TABLE)
    return q


def stat_panel(title: str, expr: str, *, description: str, thresholds: dash.ThresholdsConfig, span: int,
               height: int, unit: str | None = "short", legend: str = "", instant: bool = False,
               color: cm.BigValueColorMode = cm.BigValueColorMode.BACKGROUND,
               graph: cm.BigValueGraphMode = cm.BigValueGraphMode.AREA) -> stat.Panel:
    """A single-number panel of whole numbers, coloured by ``thresholds``; chain the rest (links,
    mappings) onto it.

    Thresholds are required: without them Grafana colours a stat with its default steps (green,
    red from 80), which say nothing about this number. Where 0 is the healthy value the base is
    green; where 0 is the outage (brokers ACTIVE, clusters reporting, job up) the base is red.
    """
    panel = (stat.Panel().title(title).description(description)
             .with_target(query(expr, legend=legend, instant=instant))
             .datasource(datasource()).decimals(0).span(span).height(height).color_mode(color).graph_mode(graph)
             .thresholds(thresholds).color_scheme(threshold_colors()))
    if unit is not None:
        panel = panel.unit(unit)
    return panel


def timeseries_panel(title: str, description: str, *targets: prometheus.Dataquery, unit: str = "short", span: int = 12,
                     height: int = 8, whole: bool = True, from_zero: bool = True) -> timeseries.Panel:
    """A graph over time with the datasource, legend and tooltip every dashboard shares, whole
    numbers from 0 unless told otherwise; chain the rest (thresholds, stacking, links) onto it."""
    panel = timeseries.Panel().title(title).description(description)
    for target in targets:
        panel = panel.with_target(target)
    panel = panel.datasource(datasource()).unit(unit).span(span).height(height).legend(legend()).tooltip(tooltip())
    if whole:
        panel = panel.decimals(0)
    if from_zero:
        panel = panel.min(0)
    return panel


def datasource_variable() -> dash.DatasourceVariable:
    provisioned = dm.VariableOption(selected=True, text=PROVISIONED_DATASOURCE_NAME, value=PROVISIONED_DATASOURCE_UID)
    return dash.DatasourceVariable(DATASOURCE_VARIABLE).label("Data source").type("prometheus").current(provisioned)


def cluster_variable() -> dash.QueryVariable:
    return (
        dash.QueryVariable(CLUSTER_VARIABLE)
        .label("Kafka cluster")
        .datasource(datasource())
        .query(f"label_values(epochwatch_broker_state, {CLUSTER_LABEL})")
        .definition(f"label_values(epochwatch_broker_state, {CLUSTER_LABEL})")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.NATURAL_ASC)
        .multi(True)
        .include_all(True)
        # ".*" instead of a long a|b|c alternation when "All" is picked
        .all_value(".*")
    )


def new_dashboard(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("utc")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
        .with_variable(cluster_variable())
        .link(
            dash.DashboardLink("epochwatch dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )


def with_rows(dashboard: dash.Dashboard, rows: dict[str, list]) -> dash.Dashboard:
    """The dashboard with a collapsible row per title, each followed by its panels, in order."""
    for title, panels in rows.items():
        dashboard = dashboard.with_row(row(title))
        for panel in panels:
            dashboard = dashboard.with_panel(panel)
    return dashboard


def alerts_firing_annotation(name: str, alertnames: tuple[str, ...] = ()) -> dash.AnnotationQuery:
    """A region on every time-series panel while an alert fires (``alertnames``, or all of them):
    its start and end are the alert's transitions, titled with the alert and tagged with its labels."""
    firing = selector("epochwatch_alerts_firing", **({"alertname": alertnames} if alertnames else {}))
    expr = f"{max_by(('kafka_cluster', 'alertname', 'severity'), firing)} > 0"
    return (
        dash.AnnotationQuery().name(name).datasource(datasource()).enable(True).icon_color(RED)
        .target(query(expr, ref_id="Anno").interval(ANNOTATION_STEP))
        .title_format("{{alertname}} ({{severity}})").text_format("Kafka cluster {{kafka_cluster}}")
        .tag_keys("kafka_cluster,alertname,severity")
    )


def dashboard_link(uid: str, title: str) -> dash.DashboardLink:
    """A panel link to another epochwatch dashboard, keeping the time range and variables."""
    return (
        dash.DashboardLink(title)
        .type(dm.DashboardLinkType.LINK)
        .url(f"/d/{uid}?${{__url_time_range}}&${{{DATASOURCE_VARIABLE}:queryparam}}&${{{CLUSTER_VARIABLE}:queryparam}}")
        .tooltip(f"Open the '{title}' dashboard")
        .include_vars(False)
        .keep_time(False)
    )


def legend(table: bool = False, calcs: tuple[str, ...] = ()) -> viz.VizLegendOptions:
    mode = cm.LegendDisplayMode.TABLE if table else cm.LegendDisplayMode.LIST
    placement = cm.LegendPlacement.RIGHT if table else cm.LegendPlacement.BOTTOM
    return viz.VizLegendOptions().show_legend(True).display_mode(mode).placement(placement).calcs(list(calcs))


def tooltip() -> viz.VizTooltipOptions:
    return viz.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)


def thresholds(base: str, *steps: tuple[float, str]) -> dash.ThresholdsConfig:
    """``thresholds(GREEN, (1, ORANGE), (10, RED))``: base colour, then (from value, colour)."""
    return dash.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=None, color=base)] + [dm.Threshold(value=v, color=c) for v, c in steps]
    )


def threshold_colors() -> dash.FieldColor:
    return dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS)


def broker_state_mappings() -> list[dm.ValueMap]:
    return [dm.ValueMap(options={
        str(code): dm.ValueMappingResult(text=state, color=STATE_COLORS[state], index=code)
        for state, code in BROKER_STATE_CODES.items()
    })]


def up_down_mappings() -> list[dm.ValueMap]:
    return [dm.ValueMap(options={
        "0": dm.ValueMappingResult(text="DOWN", color=RED, index=0),
        "1": dm.ValueMappingResult(text="UP", color=GREEN, index=1),
    })]


def organize(exclude: tuple[str, ...] = ("Time",), rename: dict[str, str] | None = None) -> dm.DataTransformerConfig:
    """Hide / rename table columns (the 'organize' transformation)."""
    return dm.DataTransformerConfig(id_val="organize", options={
        "excludeByName": {name: True for name in exclude},
        "renameByName": dict(rename or {}),
    })


def threshold_lines() -> viz.GraphThresholdsStyleConfig:
    return viz.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)


def last_value() -> viz.ReduceDataOptions:
    return viz.ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def row(title: str) -> dash.Row:
    return dash.Row(title)


def stacked() -> viz.StackingConfig:
    return viz.StackingConfig().mode(cm.StackingMode.NORMAL).group("A")


def to_json(dashboard: dash.Dashboard) -> dict:
    """The dashboard as plain JSON data, panels numbered 1..n in order (rows included).

    Stable ids keep the rendered files stable and make ``viewPanel`` links work.
    """
    data = json.loads(json.dumps(dashboard.build(), cls=JSONEncoder))
    next_id = 1
    for panel in data.get("panels", []):
        panel["id"] = next_id
        next_id += 1
        for inner in panel.get("panels", []):
            inner["id"] = next_id
            next_id += 1
    return data
