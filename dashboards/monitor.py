"""The monitor's own health: is the job up, are batches flowing, is anything piling up or dropped.

Its series carry no ``cluster`` label but the ``job`` / ``instance`` labels of the Prometheus
target that scraped them: one Prometheus may scrape several epochwatch jobs (a fleet split over
jobs, staging and production), so every query is filtered by the ``job`` and ``instance``
variables.
"""

from __future__ import annotations

import functools

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from dashboards import common as c
from dashboards import selectors
from dashboards.selectors import INSTANCE_VARIABLE, JOB_VARIABLE, sum_by

UID = c.UID_MONITOR
TITLE = "epochwatch / Monitor health"
# Seconds since the last finished micro-batch: the trigger is ~1 s, a batch 0 takes up to ~10 s.
BATCH_AGE_WARNING, BATCH_AGE_CRITICAL = 60, 300
# The meta-alerts of deploy/prometheus/rules/epochwatch-meta.yml, as Prometheus's ALERTS series.
META_ALERTS = f'ALERTS{{alertname=~"Epochwatch.+",alertstate="firing",{JOB_VARIABLE}=~"${JOB_VARIABLE}"}}'

selector = functools.partial(selectors.selector, scrape_target=True)
rate = functools.partial(selectors.rate, scrape_target=True)
histogram_quantile = functools.partial(selectors.histogram_quantile, scrape_target=True)


def target_variable(name: str, label: str, series: str) -> dash.QueryVariable:
    """A variable over a scrape-target label of ``series`` (All by default, several may be picked)."""
    values = f"label_values({series}, {name})"
    return (
        dash.QueryVariable(name).label(label).datasource(c.datasource())
        .query(values).definition(values)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.NATURAL_ASC)
        .multi(True).include_all(True).all_value(".*")
    )


def job_variable() -> dash.QueryVariable:
    return target_variable(JOB_VARIABLE, "Prometheus job", "epochwatch_up")


def instance_variable() -> dash.QueryVariable:
    return target_variable(INSTANCE_VARIABLE, "Instance", f'epochwatch_up{{{JOB_VARIABLE}=~"${JOB_VARIABLE}"}}')


def meta_alerts_annotation() -> dash.AnnotationQuery:
    """A region while one of the monitor's own Prometheus alerts fires (EpochwatchDown, ...)."""
    return (
        dash.AnnotationQuery().name("Monitor alerts firing").datasource(c.datasource()).enable(True)
        .icon_color(c.ORANGE).target(c.query(META_ALERTS, ref_id="Anno").interval(c.ANNOTATION_STEP))
        .title_format("{{alertname}}").text_format("{{job}} {{instance}}").tag_keys("alertname,severity")
    )


def up_stat() -> stat.Panel:
    return (
        c.stat_panel("Job up", f"min({selector('epochwatch_up')})",
                     description="1 while every picked epochwatch job reports itself running; 0 or no data: "
                                 "a job is down (EpochwatchDown pages). Red at 0.",
                     span=4, height=4, unit=None,
                     thresholds=c.thresholds(c.RED, (1, c.GREEN)), graph=cm.BigValueGraphMode.NONE)
        .mappings(c.up_down_mappings()).no_value("DOWN (no data)")
    )


def last_batch_age_stat() -> stat.Panel:
    return c.stat_panel(
        "Last batch age", f"time() - max({selector('epochwatch_last_batch_timestamp_seconds')})",
        description=f"Time since the last micro-batch finished. Green below {BATCH_AGE_WARNING} s, amber from "
                    f"{BATCH_AGE_WARNING} s, red from {BATCH_AGE_CRITICAL} s.",
        span=4, height=4, unit="s",
        thresholds=c.thresholds(c.GREEN, (BATCH_AGE_WARNING, c.ORANGE), (BATCH_AGE_CRITICAL, c.RED)))


def source_lag_stat() -> stat.Panel:
    return c.stat_panel(
        "Source lag", f"sum({selector('epochwatch_source_lag_records')})",
        description="Records in Kafka not yet read by the job. Green below 10,000, amber from 10,000, red from "
                    "1,000,000.",
        span=4, height=4, thresholds=c.thresholds(c.GREEN, (10_000, c.ORANGE), (1_000_000, c.RED)),
        color=cm.BigValueColorMode.VALUE)


def state_rows_stat() -> stat.Panel:
    return c.stat_panel("State rows", f"sum({selector('epochwatch_state_rows')})",
                        description="Rows in the job's state store: grows with the fleet, neither good nor bad "
                                    "(not coloured).",
                        span=4, height=4, thresholds=c.thresholds(c.BLUE), color=cm.BigValueColorMode.NONE)


def alertmanager_backlog_stat() -> stat.Panel:
    return c.stat_panel(
        "Alertmanager backlog", f"sum({selector('epochwatch_alertmanager_backlog')})",
        description="Alert notifications waiting to be delivered to Alertmanager. Green at 0, amber from 1, red "
                    "from 100.",
        span=4, height=4, thresholds=c.thresholds(c.GREEN, (1, c.ORANGE), (100, c.RED)))


def alerts_firing_stat() -> stat.Panel:
    return (
        c.stat_panel("Alerts firing", f"sum({selector('epochwatch_alerts_firing')}) or vector(0)",
                     description="Open incidents of every severity that the picked jobs hold. Green at 0, amber "
                                 "from 1 (the fleet overview says which).",
                     span=4, height=4, thresholds=c.thresholds(c.GREEN, (1, c.ORANGE)),
                     color=cm.BigValueColorMode.VALUE)
        .links([c.dashboard_link(c.UID_FLEET, "Fleet overview")])
    )


def throughput_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Input and processed rows per second",
                           "Processed below input for long means the job falls behind.",
                           c.query(f"sum({selector('epochwatch_input_rows_per_second')})", legend="input", ref_id="A"),
                           c.query(f"sum({selector('epochwatch_processed_rows_per_second')})",
                                   legend="processed", ref_id="B"),
                           c.query(f"sum({rate('epochwatch_input_events_total')})",
                                   legend="input events (rate)", ref_id="C"),
                           unit="rowsps", whole=False)
    )


def batch_duration_timeseries() -> timeseries.Panel:
    panel = (timeseries.Panel().title("Micro-batch duration")
             .description("Median, p95 and p99 time of a micro-batch; above the trigger interval for long, "
                          "the job cannot keep up."))
    for ref_id, quantile in (("A", 0.5), ("B", 0.95), ("C", 0.99)):
        panel = panel.with_target(c.query(
            histogram_quantile(quantile, "epochwatch_batch_duration_seconds"), legend=f"p{round(quantile * 100)}", ref_id=ref_id))
    return (
        panel.datasource(c.datasource()).unit("s").min(0).span(12).height(8)
        .thresholds(c.thresholds(c.GREEN, (10, c.ORANGE), (60, c.RED))).thresholds_style(c.threshold_lines())
        .legend(c.legend()).tooltip(c.tooltip())
    )


def dead_letters_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Dead letters by reason, and data loss",
                           "Input records sent to the DLQ topic, per second, by reason; and the times the source "
                           "skipped records it could no longer read (failOnDataLoss=false).",
                           c.query(sum_by(("reason",), rate("epochwatch_dead_letters_total")), legend="{{reason}}"),
                           c.query(f"sum({rate('epochwatch_source_data_loss_total')})", legend="data loss", ref_id="B"),
                           unit="cps", whole=False)
        .stacking(c.stacked()).fill_opacity(40)
    )


def late_events_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Late events",
                           "Events behind their key's horizon, per second: applied late and counted, not dropped.",
                           c.query(f"sum({rate('epochwatch_late_events_total')})", legend="late events"),
                           unit="cps", whole=False)
    )


def state_and_lag_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("State rows and source lag",
                           "State store rows (grow with the fleet) and records not yet read (should stay near 0).",
                           c.query(f"sum({selector('epochwatch_state_rows')})", legend="state rows", ref_id="A"),
                           c.query(f"sum({selector('epochwatch_source_lag_records')})",
                                   legend="source lag (records)", ref_id="B"),
                           whole=False)
    )


def alertmanager_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Alertmanager delivery",
                           "Notifications waiting for Alertmanager, failed deliveries per second, and alert "
                           "transitions per second by status.",
                           c.query(f"sum({selector('epochwatch_alertmanager_backlog')})", legend="backlog", ref_id="A"),
                           c.query(f"sum({rate('epochwatch_alertmanager_delivery_failures_total')})",
                                   legend="delivery failures / s", ref_id="B"),
                           c.query(sum_by(("status",), rate("epochwatch_alert_transitions_total")),
                                   legend="alert transitions / s ({{status}})", ref_id="C"),
                           whole=False)
    )


def build():
    dashboard = (
        c.new_dashboard(UID, TITLE, "Is the epochwatch job up, keeping up, and delivering alerts?")
        .with_variable(job_variable())
        .with_variable(instance_variable())
        .annotation(meta_alerts_annotation())
    )
    return c.with_rows(dashboard, {
        "Now": [
            up_stat(),
            last_batch_age_stat(),
            source_lag_stat(),
            state_rows_stat(),
            alertmanager_backlog_stat(),
            alerts_firing_stat(),
        ],
        "Throughput": [throughput_timeseries(), batch_duration_timeseries()],
        "Losses and backlog": [
            dead_letters_timeseries(),
            late_events_timeseries(),
            state_and_lag_timeseries(),
            alertmanager_timeseries(),
        ],
    })
