"""Incarnations and restarts: new processes per broker, incarnation ids, zombie / duplicate-id alerts."""

from __future__ import annotations

from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.models import common as cm

from dashboards import common as c
from dashboards.selectors import RANGE_WINDOW, increase, max_by, selector, sum_by

UID = c.UID_INCARNATIONS
TITLE = "epochwatch / Incarnations and restarts"
BROKER_LEGEND = "{{kafka_cluster}} broker {{broker_id}}"
REGRESSION_ALERTS = ("BrokerIncarnationRegression", "DuplicateBrokerId")


def restarts_in_range_stat() -> stat.Panel:
    return c.stat_panel("Restarts in the time range",
                        f"sum({increase('epochwatch_broker_restarts_total', RANGE_WINDOW)}) or vector(0)",
                        description="New broker processes (incarnations) in the dashboard's time range. Green at "
                                    "0, yellow from 1, amber from 5.",
                        instant=True, span=6, height=5,
                        thresholds=c.thresholds(c.GREEN, (1, c.YELLOW), (5, c.ORANGE)),
                        color=cm.BigValueColorMode.VALUE, graph=cm.BigValueGraphMode.NONE)


def regressions_firing_stat() -> stat.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=REGRESSION_ALERTS)
    return (
        c.stat_panel("Incarnation regressions / duplicate ids firing", f"sum({firing}) or vector(0)",
                     description="An older incarnation (broker epoch) than one already seen: a zombie process or "
                                 "two processes with the same broker id (KIP-343 INVALID_INCARNATION_ID, KRaft "
                                 "STALE_BROKER_EPOCH). Green at 0, red from 1.",
                     span=6, height=5, thresholds=c.thresholds(c.GREEN, (1, c.RED)))
    )


def restarts_timeseries() -> timeseries.Panel:
    expr = sum_by(("kafka_cluster", "broker_id"), increase("epochwatch_broker_restarts_total"))
    return (
        timeseries.Panel().title("Restarts per broker")
        .description("New incarnations (process starts) per broker in each interval.")
        .with_target(c.query(f"{expr} > 0", legend=BROKER_LEGEND))
        .datasource(c.datasource()).unit("short").decimals(0).min(0).span(12).height(8)
        .draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
        .legend(c.legend()).tooltip(c.tooltip())
        .links([c.dashboard_link(c.UID_BROKER_STATES, "Broker state timeline")])
    )


def incarnation_timeseries() -> timeseries.Panel:
    expr = max_by(("kafka_cluster", "broker_id"), selector("epochwatch_broker_incarnation"))
    return (
        timeseries.Panel().title("Incarnation id per broker")
        .description("Grows with every restart; a step down means an old process is still heartbeating.")
        .with_target(c.query(expr, legend=BROKER_LEGEND))
        .datasource(c.datasource()).unit("none").decimals(0).span(12).height(8)
        .line_interpolation(cm.LineInterpolation.STEP_AFTER)
        .legend(c.legend()).tooltip(c.tooltip())
    )


def regression_alerts_timeseries() -> timeseries.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=REGRESSION_ALERTS + ("BrokerRestarted",))
    return (
        timeseries.Panel().title("Incarnation alerts firing")
        .description("Open incarnation regression, duplicate id and restart alerts per cluster and alert name.")
        .with_target(c.query(sum_by(("kafka_cluster", "alertname"), firing), legend="{{kafka_cluster}} {{alertname}}"))
        .datasource(c.datasource()).unit("short").decimals(0).min(0).span(12).height(8)
        .legend(c.legend()).tooltip(c.tooltip())
    )


def restarts_table() -> table.Panel:
    expr = sum_by(("kafka_cluster", "broker_id"), increase("epochwatch_broker_restarts_total", RANGE_WINDOW))
    return (
        table.Panel().title("Restarts per broker in the time range")
        .description("Brokers that restarted at least once in the time range, most restarts first.")
        .with_target(c.query(f"sort_desc({expr} > 0)", instant=True))
        .datasource(c.datasource()).span(12).height(8).unit("short").decimals(0)
        .with_transformation(c.organize(rename={"Value": "restarts"}))
    )


def build():
    return (
        c.new_dashboard(UID, TITLE, "Broker restarts, incarnation ids, incarnation regressions and duplicate broker ids.")
        .annotation(c.alerts_firing_annotation("Incarnation alerts firing", REGRESSION_ALERTS))
        .with_row(c.row("Now"))
        .with_panel(restarts_in_range_stat())
        .with_panel(regressions_firing_stat())
        .with_row(c.row("Restarts"))
        .with_panel(restarts_timeseries())
        .with_panel(incarnation_timeseries())
        .with_panel(regression_alerts_timeseries())
        .with_panel(restarts_table())
    )
