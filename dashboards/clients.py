"""Client staleness and rebootstrap: clients on stale metadata, clients past the rebootstrap trigger."""

from __future__ import annotations

from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as cm

from dashboards import common as c
from dashboards.selectors import selector, sum_by

UID = c.UID_CLIENTS
TITLE = "epochwatch / Client staleness and rebootstrap"
CLIENT_ALERTS = (
    "StaleMetadataResponse", "OffsetCommitEpochRegression", "ClientRebootstrapOverdue",
    "RebootstrapRequired", "ClusterIdMismatch", "ConnectionSetupTimeoutStorm",
)


def stale_clients_stat() -> stat.Panel:
    return (
        c.stat_panel("Clients on stale metadata",
                     f"sum({selector('epochwatch_clients_stale_metadata')}) or vector(0)",
                     description="Clients whose last metadata response carried an epoch below one they had "
                                 "already accepted. Green at 0, amber from 1, red from 10.",
                     span=8, height=5, thresholds=c.thresholds(c.GREEN, (1, c.ORANGE), (10, c.RED)))
    )


def overdue_rebootstrap_stat() -> stat.Panel:
    return (
        c.stat_panel("Clients overdue for rebootstrap",
                     f"sum({selector('epochwatch_clients_rebootstrap_overdue')}) or vector(0)",
                     description="Clients without usable metadata for longer than "
                                 "metadata.recovery.rebootstrap.trigger.ms (KIP-1102). Green at 0, red from 1.",
                     span=8, height=5, thresholds=c.thresholds(c.GREEN, (1, c.RED)))
    )


def client_alerts_stat() -> stat.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=CLIENT_ALERTS)
    return c.stat_panel("Client alerts firing", f"sum({firing}) or vector(0)",
                        description="Open client-side incidents (stale metadata, rebootstrap, cluster id mismatch, "
                                    "commit epoch regression, connection timeout storms). Green at 0, amber from 1.",
                        span=8, height=5, thresholds=c.thresholds(c.GREEN, (1, c.ORANGE)),
                        graph=cm.BigValueGraphMode.NONE)


def stale_clients_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Clients on stale metadata per cluster",
                           "Clients whose last metadata response was older than one they had accepted, per cluster.",
                           c.query(sum_by(("kafka_cluster",), selector("epochwatch_clients_stale_metadata")),
                                   legend="{{kafka_cluster}}"))
        .thresholds(c.thresholds(c.GREEN, (1, c.ORANGE), (10, c.RED))).thresholds_style(c.threshold_lines())
        .links([c.dashboard_link(c.UID_METADATA_EPOCHS, "Metadata epoch lag")])
    )


def overdue_rebootstrap_timeseries() -> timeseries.Panel:
    return (
        c.timeseries_panel("Clients overdue for rebootstrap per cluster",
                           "Clients past metadata.recovery.rebootstrap.trigger.ms without usable metadata, "
                           "per cluster.",
                           c.query(sum_by(("kafka_cluster",), selector("epochwatch_clients_rebootstrap_overdue")),
                                   legend="{{kafka_cluster}}"))
        .thresholds(c.thresholds(c.GREEN, (1, c.RED))).thresholds_style(c.threshold_lines())
    )


def client_alerts_timeseries() -> timeseries.Panel:
    firing = selector("epochwatch_alerts_firing", alertname=CLIENT_ALERTS)
    return (
        c.timeseries_panel("Client alerts firing by alertname",
                           "Open client-side incidents per cluster and alert name.",
                           c.query(sum_by(("kafka_cluster", "alertname"), firing),
                                   legend="{{kafka_cluster}} {{alertname}}"),
                           span=24)
        .stacking(c.stacked()).fill_opacity(40)
        .legend(c.legend(table=True, calcs=("max", "lastNotNull")))
    )


def build():
    dashboard = (
        c.new_dashboard(UID, TITLE, "Clients on stale metadata, clients overdue for rebootstrap, client-side alerts.")
        .annotation(c.alerts_firing_annotation("Client alerts firing", CLIENT_ALERTS))
    )
    return c.with_rows(dashboard, {
        "Now": [stale_clients_stat(), overdue_rebootstrap_stat(), client_alerts_stat()],
        "Over time": [stale_clients_timeseries(), overdue_rebootstrap_timeseries(), client_alerts_timeseries()],
    })
