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
        c.timeseries_panel("Restarts per broker",
                           "New incarnations (process starts) per broker in each interval.",
                           c.query(f"{expr} > 0", legend=BROKER_LEGEND))
        .draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
        .links([c.dashboard_link(c.UID_BROKER_STATES, "Broker state timeline")])
    )


def incarnation_timeseries() -> timeseries.Panel:
    expr = max_by(("kafka_cluster", "broker_id"), selector("epochwatch_broker_incarnation"))
    return (
        c.timeseries_panel("Incarnation id per broker",
                           "Grows with every restart; a step down means an old process is still heartbeating.",
                           c.query(expr, legend=BROKER_LEGEND),
                           unit="none", from_zero=False)
        .line_interpolation(cm.LineInterpolation.STEP_AFTER)
    )


def regression_alerts_timeseries() -> timeseries.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=REGRESSION_ALERTS + ("BrokerRestarted",))
    return (
        c.timeseries_panel("Incarnation alerts firing",
                           "Open incarnation regression, duplicate id and restart alerts per cluster and alert name.",
                           c.query(sum_by(("kafka_cluster", "alertname"), firing),
                                   legend="{{kafka_cluster}} {{alertname}}"))
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
    dashboard = (
        c.new_dashboard(UID, TITLE, "Broker restarts, incarnation ids, incarnation regressions and duplicate broker ids.")
        .annotation(c.alerts_firing_annotation("Incarnation alerts firing", REGRESSION_ALERTS))
    )
    return c.with_rows(dashboard, {
        "Now": [restarts_in_range_stat(), regressions_firing_stat()],
        "Restarts": [restarts_timeseries(), incarnation_timeseries(), regression_alerts_timeseries(), restarts_table()],
    })
