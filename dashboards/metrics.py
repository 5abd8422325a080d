"""The driver's Prometheus metrics as the dashboards see them (docs/CONTRACTS.md).

The selector helper looks metrics up here, so a misspelt metric name fails when the dashboards
are built instead of drawing an empty panel in Grafana; a unit test keeps this table equal to
the table in docs/CONTRACTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# the label of the Kafka cluster id on the per-cluster series: not `cluster`, which Kubernetes /
# Thanos stacks give their own clusters
from streaming.sinks.labels import METRIC_CLUSTER_LABEL as CLUSTER_LABEL


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str                      # gauge | counter | histogram
    labels: tuple[str, ...] = ()

    @property
    def has_cluster(self) -> bool:
        return CLUSTER_LABEL in self.labels


_CATALOGUE = (
    Metric("epochwatch_broker_state", "gauge", (CLUSTER_LABEL, "broker_id", "state")),
    Metric("epochwatch_broker_incarnation", "gauge", (CLUSTER_LABEL, "broker_id")),
    Metric("epochwatch_broker_restarts_total", "counter", (CLUSTER_LABEL, "broker_id")),
    Metric("epochwatch_broker_metadata_epoch", "gauge", (CLUSTER_LABEL, "broker_id")),
    Metric("epochwatch_broker_metadata_epoch_lag", "gauge", (CLUSTER_LABEL, "broker_id")),
    Metric("epochwatch_cluster_metadata_epoch", "gauge", (CLUSTER_LABEL,)),
    Metric("epochwatch_clients_stale_metadata", "gauge", (CLUSTER_LABEL,)),
    Metric("epochwatch_clients_rebootstrap_overdue", "gauge", (CLUSTER_LABEL,)),
    Metric("epochwatch_alerts_firing", "gauge", (CLUSTER_LABEL, "alertname", "severity")),
    Metric("epochwatch_alert_transitions_total", "counter", ("alertname", "severity", "status")),
    Metric("epochwatch_dead_letters_total", "counter", ("reason",)),
    Metric("epochwatch_late_events_total", "counter"),
    Metric("epochwatch_input_events_total", "counter"),
    Metric("epochwatch_source_data_loss_total", "counter"),
    Metric("epochwatch_input_rows_per_second", "gauge"),
    Metric("epochwatch_processed_rows_per_second", "gauge"),
    Metric("epochwatch_batch_duration_seconds", "histogram"),
    Metric("epochwatch_state_rows", "gauge"),
    Metric("epochwatch_source_lag_records", "gauge"),
    Metric("epochwatch_last_batch_timestamp_seconds", "gauge"),
    Metric("epochwatch_alertmanager_backlog", "gauge", ("alertmanager",)),
    Metric("epochwatch_alertmanager_delivery_failures_total", "counter", ("alertmanager",)),
    Metric("epochwatch_up", "gauge"),
)

METRICS: dict[str, Metric] = {m.name: m for m in _CATALOGUE}

# Broker states with Kafka's numeric codes (KIP-343): the state-timeline panels draw these codes.
BROKER_STATE_CODES = {"INITIAL": 0, "INACTIVE": 1, "ACTIVE": 2, "STOPPING": 3}


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a metric of docs/CONTRACTS.md; known: {', '.join(sorted(METRICS))}") from None
