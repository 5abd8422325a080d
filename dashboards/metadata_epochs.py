"""Metadata epoch lag: how far each broker trails the controller's metadata epoch."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, stat, timeseries
from grafana_foundation_sdk.models import common as cm

from dashboards import common as c
from dashboards.selectors import max_by, selector

UID = c.UID_METADATA_EPOCHS
TITLE = "epochwatch / Metadata epoch lag"
BROKER_LEGEND = "{{kafka_cluster}} broker {{broker_id}}"
# Lag in metadata updates: a few is normal propagation, many means the broker is cut off.
LAG_WARNING, LAG_CRITICAL = 5, 50
LAG_ALERTS = ("BrokerMetadataLag", "MetadataEpochRegression")


def lag_thresholds():
    return c.thresholds(c.GREEN, (LAG_WARNING, c.ORANGE), (LAG_CRITICAL, c.RED))


def max_lag_stat() -> stat.Panel:
    return c.stat_panel("Largest lag now", f"max({selector('epochwatch_broker_metadata_epoch_lag')})",
                        description=f"The metadata epochs the furthest-behind broker trails the controller by. "
                                    f"Green below {LAG_WARNING}, amber from {LAG_WARNING}, red from {LAG_CRITICAL}.",
                        span=6, height=5, unit="none", thresholds=lag_thresholds())


def lagging_brokers_stat() -> stat.Panel:
    lagging = f"{selector('epochwatch_broker_metadata_epoch_lag')} >= {LAG_WARNING}"
    return c.stat_panel(f"Brokers lagging by {LAG_WARNING}+ epochs", f"count({lagging}) or vector(0)",
                        description=f"Brokers at least {LAG_WARNING} metadata epochs behind the controller. Green "
                                    f"at 0, amber from 1.",
                        span=6, height=5, thresholds=c.thresholds(c.GREEN, (1, c.ORANGE)),
                        graph=cm.BigValueGraphMode.NONE)


def lag_alerts_stat() -> stat.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=LAG_ALERTS)
    return c.stat_panel("Lag / epoch regression alerts firing", f"sum({firing}) or vector(0)",
                        description="Open BrokerMetadataLag and MetadataEpochRegression incidents. Green at 0, red "
                                    "from 1.",
                        span=6, height=5, thresholds=c.thresholds(c.GREEN, (1, c.RED)),
                        graph=cm.BigValueGraphMode.NONE)


def cluster_epoch_stat() -> stat.Panel:
    return c.stat_panel("Controller metadata epoch",
                        max_by(("kafka_cluster",), selector("epochwatch_cluster_metadata_epoch")), legend="{{kafka_cluster}}",
                        description="The newest metadata epoch per cluster: a counter, neither good nor bad "
                                    "(not coloured).",
                        span=6, height=5, unit="none", thresholds=c.thresholds(c.BLUE),
                        color=cm.BigValueColorMode.NONE)


def lag_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Metadata epoch lag per broker",
                           "Controller metadata epoch minus the epoch the broker last applied. A broker that "
                           "keeps lagging serves old metadata (KAFKA-6262).",
                           c.query(max_by(("kafka_cluster", "broker_id"),
                                          selector("epochwatch_broker_metadata_epoch_lag")),
                                   legend=BROKER_LEGEND),
                           unit="none", span=24, height=9)
        .thresholds(lag_thresholds()).thresholds_style(c.threshold_lines())
        .legend(c.legend(table=True, calcs=("max", "lastNotNull")))
        .links([c.dashboard_link(c.UID_BROKER_STATES, "Broker state timeline")])
    )


def epochs_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Cluster epoch and broker epochs",
                           "The controller's metadata epoch and the epoch each broker last applied; a broker's line "
                           "that stays flat while the controller's climbs is cut off.",
                           c.query(max_by(("kafka_cluster",), selector("epochwatch_cluster_metadata_epoch")),
                                   legend="{{kafka_cluster}} controller", ref_id="A"),
                           c.query(max_by(("kafka_cluster", "broker_id"), selector("epochwatch_broker_metadata_epoch")),
                                   legend=BROKER_LEGEND, ref_id="B"),
                           unit="none", from_zero=False)
        .line_interpolation(cm.LineInterpolation.STEP_AFTER)
    )


def lag_now_bargauge() -> bargauge.Panel:
    expr = f"sort_desc({max_by(('kafka_cluster', 'broker_id'), selector('epochwatch_broker_metadata_epoch_lag'))})"
    return (
        bargauge.Panel().title("Lag per broker now")
        .description("Each broker's metadata epoch lag now, largest first.")
        .with_target(c.query(expr, legend=BROKER_LEGEND, instant=True))
        .datasource(c.datasource()).unit("none").decimals(0).min(0).span(12).height(8)
        .thresholds(lag_thresholds()).color_scheme(c.threshold_colors())
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT).orientation(cm.VizOrientation.HORIZONTAL)
        .reduce_options(c.last_value())
    )


def build():
    dashboard = (
        c.new_dashboard(UID, TITLE, "Per-broker metadata epoch lag behind the controller, with the cluster epoch.")
        .annotation(c.alerts_firing_annotation("Lag alerts firing", LAG_ALERTS))
    )
    return c.with_rows(dashboard, {
        "Now": [max_lag_stat(), lagging_brokers_stat(), lag_alerts_stat(), cluster_epoch_stat()],
        "Lag": [lag_timeseries(), epochs_timeseries(), lag_now_bargauge()],
    })
