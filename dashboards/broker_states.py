"""Broker state timeline: one lane per broker, coloured by its controller-side state over time."""

from __future__ import annotations

from grafana_foundation_sdk.builders import statetimeline, table, timeseries
from grafana_foundation_sdk.models import common as cm

from dashboards import common as c
from dashboards.selectors import broker_state_code, max_by, selector, sum_by

UID = c.UID_BROKER_STATES
TITLE = "epochwatch / Broker state timeline"
BROKER_LEGEND = "{{kafka_cluster}} broker {{broker_id}}"
STATE_ALERTS = ("BrokerHeartbeatTimeout", "BrokerStuckStopping", "BrokerNotReturned", "BrokerFlapping", "ClusterSilent")


def state_timeline() -> statetimeline.Panel:
    return (
        statetimeline.Panel().title("Broker state (controller view)")
        .description("Kafka's state codes: 0 INITIAL, 1 INACTIVE (fenced), 2 ACTIVE, 3 STOPPING (controlled shutdown).")
        .with_target(c.query(broker_state_code(), legend=BROKER_LEGEND))
        .datasource(c.datasource()).span(24).height(12)
        .mappings(c.broker_state_mappings())
        .thresholds(c.thresholds(c.GREY)).color_scheme(c.threshold_colors())
        .show_value(cm.VisibilityMode.NEVER).merge_values(True).row_height(0.8)
        .fill_opacity(80).line_width(0)
        .legend(c.legend()).tooltip(c.tooltip())
        .links([c.dashboard_link(c.UID_INCARNATIONS, "Incarnations and restarts")])
    )


def brokers_not_active_timeseries() -> timeseries.Panel:
    not_active = selector("epochwatch_broker_state", state=("INITIAL", "INACTIVE", "STOPPING"))
    return (
        c.timeseries_panel("Brokers not ACTIVE per cluster",
                           "A broker cut off from the controller keeps serving old metadata to clients.",
                           c.query(sum_by(("kafka_cluster",), not_active), legend="{{kafka_cluster}}"))
        .thresholds(c.thresholds(c.GREEN, (1, c.RED))).color_scheme(c.threshold_colors())
    )


def state_changes_timeseries() -> timeseries.Panel:
    changes = f"changes(({broker_state_code()})[$__rate_interval:])"
    return (
        c.timeseries_panel("State changes per broker",
                           "How often each broker changed state; many changes in a short window is flapping.",
                           c.query(changes, legend=BROKER_LEGEND))
        .thresholds(c.thresholds(c.GREEN, (3, c.ORANGE), (6, c.RED)))
    )


def current_states_table() -> table.Panel:
    expr = max_by(("kafka_cluster", "broker_id", "state"), selector("epochwatch_broker_state")) + " == 1"
    return (
        table.Panel().title("Current state per broker")
        .description("One row per broker with the state the controller reports now.")
        .with_target(c.query(expr, instant=True))
        .datasource(c.datasource()).span(24).height(8)
        .with_transformation(c.organize(exclude=("Time", "Value")))
    )


def build():
    dashboard = (
        c.new_dashboard(UID, TITLE, "State timeline of every broker (INITIAL / INACTIVE / ACTIVE / STOPPING).")
        .annotation(c.alerts_firing_annotation("Broker state alerts firing", STATE_ALERTS))
    )
    return c.with_rows(dashboard, {
        "Timeline": [state_timeline()],
        "Details": [brokers_not_active_timeseries(), state_changes_timeseries(), current_states_table()],
    })
