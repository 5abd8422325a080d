"""Fleet overview: how many brokers are in which state, which alerts fire, which clusters report."""

from __future__ import annotations

from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.models import common as cm

from dashboards import common as c
from dashboards.selectors import selector, sum_by

UID = c.UID_FLEET
TITLE = "epochwatch / Fleet overview"


def clusters_stat() -> stat.Panel:
    return (
        c.stat_panel("Clusters reporting", f"count({sum_by(('kafka_cluster',), selector('epochwatch_broker_state'))})",
                     description="Kafka clusters with at least one broker known to epochwatch. Red at 0: "
                                 "no telemetry reaches the job.",
                     instant=True, span=4, height=4, thresholds=c.thresholds(c.RED, (1, c.GREEN)),
                     color=cm.BigValueColorMode.VALUE, graph=cm.BigValueGraphMode.NONE)
    )


# Per state: what its broker count means, and its colours. ACTIVE brokers serve: none is the
# outage. INACTIVE (fenced) brokers serve old metadata: one is an incident. STOPPING is a
# controlled shutdown: one is a rolling restart in progress, BrokerStuckStopping pages if it stays.
BROKER_STATE_STATS = {
    "ACTIVE": ("Brokers serving clients with current metadata. Red at 0.", c.thresholds(c.RED, (1, c.GREEN))),
    "INACTIVE": ("Fenced brokers: cut off from the controller, they may serve old metadata. Green at 0, red from 1.",
                 c.thresholds(c.GREEN, (1, c.RED))),
    "STOPPING": ("Brokers in controlled shutdown. Green at 0, amber from 1 (a rolling restart).",
                 c.thresholds(c.GREEN, (1, c.ORANGE))),
}


def brokers_in_state_stat(state: str) -> stat.Panel:
    """Brokers in ``state`` right now, coloured by what that count means (BROKER_STATE_STATS)."""
    description, colors = BROKER_STATE_STATS[state]
    return (
        c.stat_panel(f"Brokers {state}", f"sum({selector('epochwatch_broker_state', state=state)})",
                     description=description, span=4, height=4, thresholds=colors)
        .links([c.dashboard_link(c.UID_BROKER_STATES, "Broker state timeline")])
    )


def alerts_firing_stat(severity: str) -> stat.Panel:
    return c.stat_panel(f"Alerts firing ({severity})",
                        f"sum({selector('epochwatch_alerts_firing', severity=severity)}) or vector(0)",
                        description=f"Open {severity} incidents in the picked clusters. Green at 0.", span=4,
                        height=4, thresholds=c.thresholds(c.GREEN, (1, c.SEVERITY_COLORS[severity])))


def brokers_per_state_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Brokers per state",
                           "Count of brokers in each controller-side state (KIP-343: INITIAL, INACTIVE = "
                           "fenced, ACTIVE, STOPPING).",
                           c.query(sum_by(("state",), selector("epochwatch_broker_state")), legend="{{state}}"))
        .stacking(c.stacked()).fill_opacity(40)
        .links([c.dashboard_link(c.UID_BROKER_STATES, "Broker state timeline")])
    )


def active_brokers_per_cluster_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("ACTIVE brokers per cluster",
                           "Brokers in state ACTIVE per cluster; a dip is a broker fenced, shut down or restarting.",
                           c.query(sum_by(("kafka_cluster",), selector("epochwatch_broker_state", state="ACTIVE")),
                                   legend="{{kafka_cluster}}"))
    )


def alerts_by_severity_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Alerts firing by severity",
                           "Open incidents per severity over time (all alert names, picked clusters).",
                           c.query(sum_by(("severity",), selector("epochwatch_alerts_firing")), legend="{{severity}}"))
        .stacking(c.stacked()).fill_opacity(40)
    )


def alerts_by_name_table() -> table.Panel:
    expr = sum_by(("kafka_cluster", "alertname", "severity"), selector("epochwatch_alerts_firing")) + " > 0"
    return (
        table.Panel().title("Alerts firing now by alertname")
        .description("One row per cluster, alert name and severity with the number of firing incidents.")
        .with_target(c.query(expr, instant=True))
        .datasource(c.datasource()).span(12).height(8)
        .with_transformation(c.organize(rename={"Value": "firing"}))
        .unit("short").decimals(0)
    )


def build():
    dashboard = (
        c.new_dashboard(UID, TITLE, "Brokers per state, alerts firing by severity and name, clusters reporting.")
        .annotation(c.alerts_firing_annotation("Alerts firing"))
    )
    return c.with_rows(dashboard, {
        "Now": [
            clusters_stat(),
            brokers_in_state_stat("ACTIVE"),
            brokers_in_state_stat("INACTIVE"),
            brokers_in_state_stat("STOPPING"),
            alerts_firing_stat("critical"),
            alerts_firing_stat("warning"),
        ],
        "Brokers": [brokers_per_state_timeseries(), active_brokers_per_cluster_timeseries()],
        "Alerts": [alerts_by_severity_timeseries(), alerts_by_name_table()],
    })
