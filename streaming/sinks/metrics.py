"""Prometheus metrics of the driver (names and labels: docs/CONTRACTS.md), on their own registry.

The job calls the ``observe_*`` methods from foreachBatch and :meth:`Metrics.batch_finished` at the
end of each micro-batch; :meth:`Metrics.serve` exposes ``/metrics`` on a loopback port (with the
status view beside it: streaming.sinks.endpoint). Nothing here touches prometheus_client's global
registry, so several instances (tests) never collide.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from streaming.events import BROKER_STATES
from streaming.rules.table import EXPIRED_SUMMARY, RESET_SUMMARY
from streaming.sinks.endpoint import MetricsEndpoint
from streaming.sinks.labels import METRIC_CLUSTER_LABEL as CLUSTER_LABEL
from streaming.spark.packs import INPUT_METRIC
from streaming.spark.refusals import Refusals
from udfs.redact import redact

DEFAULT_PORT = 9464
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
RESOLVED_MEMORY = 100_000   # resolved fingerprints remembered, so replayed records count once


class _Registry(CollectorRegistry):
    """A registry without the ``*_created`` series prometheus-client adds to counters and
    histograms: the exposed names stay exactly the contract's, and the switch that turns them
    off in the library is process-global."""

    def collect(self):
        for family in super().collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class _BrokerStatusCollector:
    """Per-broker series from the latest status row of each broker.

    ``restarts`` arrives as a running total computed by the state processor, so it is exposed
    as a counter with that value instead of being re-counted here.
    """

    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = {}
        self.cluster_epochs: dict[str, int] = {}  # cluster -> its newest metadata epoch
        self.lock = threading.Lock()

    def collect(self):
        state = GaugeMetricFamily("epochwatch_broker_state", "1 for the broker's current controller-side state, 0 for the others",
                                  labels=[CLUSTER_LABEL, "broker_id", "state"])
        incarnation = GaugeMetricFamily("epochwatch_broker_incarnation", "Latest incarnation id (broker epoch) of the broker",
                                        labels=[CLUSTER_LABEL, "broker_id"])
        restarts = CounterMetricFamily("epochwatch_broker_restarts", "Broker restarts (new incarnations) seen",
                                       labels=[CLUSTER_LABEL, "broker_id"])
        epoch = GaugeMetricFamily("epochwatch_broker_metadata_epoch", "Metadata epoch the broker last reported",
                                  labels=[CLUSTER_LABEL, "broker_id"])
        lag = GaugeMetricFamily("epochwatch_broker_metadata_epoch_lag", "Controller metadata epoch minus the broker's",
                                labels=[CLUSTER_LABEL, "broker_id"])
        with self.lock:
            rows, cluster_epochs = list(self.rows.items()), dict(self.cluster_epochs)
        for (cluster, broker), row in rows:
            current = row.get("state")
            if isinstance(current, int) and 0 <= current < len(BROKER_STATES):
                current = BROKER_STATES[current]      # KIP-343 numbering: 0 INITIAL ... 3 STOPPING
            for name in BROKER_STATES:
                state.add_metric([cluster, broker, name], 1.0 if current == name else 0.0)
            for family, key in ((incarnation, "incarnation_id"), (restarts, "restarts"), (epoch, "metadata_epoch")):
                if row.get(key) is not None:
                    family.add_metric([cluster, broker], float(row[key]))
            if row.get("metadata_epoch") is not None or row.get("metadata_epoch_lag") is not None:
                lag.add_metric([cluster, broker], float(epoch_lag(row, cluster_epochs.get(cluster))))
        return [state, incarnation, restarts, epoch, lag]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or _Registry(auto_describe=True)
        r = self.registry
        self._brokers = _BrokerStatusCollector()
        r.register(self._brokers)
        self.cluster_metadata_epoch = Gauge("epochwatch_cluster_metadata_epoch", "Controller metadata epoch of the cluster",
                                            [CLUSTER_LABEL], registry=r)
        self.clients_stale = Gauge("epochwatch_clients_stale_metadata", "Clients with stale metadata right now",
                                   [CLUSTER_LABEL], registry=r)
        self.clients_overdue = Gauge("epochwatch_clients_rebootstrap_overdue", "Clients past the rebootstrap trigger",
                                     [CLUSTER_LABEL], registry=r)
        self.alerts_firing = Gauge("epochwatch_alerts_firing", "Alerts firing now",
                                   [CLUSTER_LABEL, "alertname", "severity"], registry=r)
        self.alert_transitions = Counter("epochwatch_alert_transitions_total", "Alert records emitted, by status",
                                         ["alertname", "severity", "status"], registry=r)
        self.dead_letters = Counter("epochwatch_dead_letters_total", "Input records sent to the dead-letter topic",
                                    ["reason"], registry=r)
        self.late_events = Counter("epochwatch_late_events_total",
                                   "Events that arrived after the allowed lateness (applied late, not dropped)", registry=r)
        self.input_events = Counter("epochwatch_input_events_total", "Input rows read by the query", registry=r)
        self.data_loss = Counter("epochwatch_source_data_loss_total",
                                 "Times the source skipped records it could no longer read (failOnDataLoss=false): "
                                 "deleted by retention, a topic re-created or deleted", registry=r)
        self.input_rate = Gauge("epochwatch_input_rows_per_second", "Input rate of the last micro-batch", registry=r)
        self.processed_rate = Gauge("epochwatch_processed_rows_per_second", "Processing rate of the last micro-batch",
                                    registry=r)
        self.batch_duration = Histogram("epochwatch_batch_duration_seconds", "Micro-batch trigger execution time",
                                        buckets=BATCH_DURATION_BUCKETS, registry=r)
        self.state_rows = Gauge("epochwatch_state_rows", "Rows held in the state stores", registry=r)
        self.source_lag = Gauge("epochwatch_source_lag_records", "Records the source has not read yet (latest - end offset)",
                                registry=r)
        self.last_batch = Gauge("epochwatch_last_batch_timestamp_seconds", "When the last micro-batch finished (Unix s)",
                                registry=r)
        # label alertmanager: the URL (credentials hidden); each instance of an HA pair has its own
        self.alertmanager_backlog = Gauge("epochwatch_alertmanager_backlog", "Alert states Alertmanager has not accepted yet",
                                          ["alertmanager"], registry=r)
        self.alertmanager_failures = Counter("epochwatch_alertmanager_delivery_failures_total",
                                             "Failed or refused Alertmanager deliveries", ["alertmanager"], registry=r)
        self.up = Gauge("epochwatch_up", "1 while the streaming job runs", registry=r)
        self._client_shards: dict[tuple[str, int], tuple[int, int]] = {}
        self._firing: dict[str, tuple[str, str, str]] = {}     # fingerprint -> firing gauge labels
        self._resolved: OrderedDict[str, None] = OrderedDict()
        self._alerts_lock = threading.Lock()
        self._late_by_batch: dict[int, int] = {}
        self.refusals = Refusals()   # dead letters by reason, per batch and in total
        self.records_read = 0
        self._server = None

    # --- serving -------------------------------------------------------------------------

    def serve(self, port: int = DEFAULT_PORT, addr: str = "127.0.0.1", status=None) -> int:
        """Expose /metrics over HTTP on a daemon thread, and /status when given the job's status
        board (streaming.sinks.status); returns the bound port (0 picks a free one)."""
        if self._server is not None:
            raise RuntimeError("metrics are already served; call stop() first")
        self._server = MetricsEndpoint(self.registry, status)
        return self._server.serve(port, addr)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    # --- streaming progress --------------------------------------------------------------

    def observe_progress(self, progress: Mapping) -> None:
        """One StreamingQueryProgress as a dict (``json.loads(query.lastProgress.json)``)."""
        if not progress:
            return
        records, in_rate, done_rate = input_records(progress)
        self.input_events.inc(max(0, records))
        self.records_read += max(0, records)
        lost = (progress.get("observedMetrics") or {}).get(INPUT_METRIC, {}).get("lost")
        if lost:
            self.data_loss.inc(_number(lost))
        self.input_rate.set(in_rate)
        self.processed_rate.set(done_rate)
        trigger_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        if trigger_ms is not None:
            self.batch_duration.observe(_number(trigger_ms) / 1000)
        operators = progress.get("stateOperators") or []
        self.state_rows.set(sum(_number(op.get("numRowsTotal")) for op in operators))
        lags = [source_lag(s) for s in progress.get("sources") or []]
        known = [lag for lag in lags if lag is not None]
        if known:
            self.source_lag.set(sum(known))

    # --- detection output ----------------------------------------------------------------

    def observe_alerts(self, records: Iterable[Mapping]) -> None:
        """Count transitions and keep the firing gauge, tracked by fingerprint (replays count once).

        Info alerts are one-shot events: they count as transitions but never stay firing.
        """
        with self._alerts_lock:
            for record in records:
                fp, status = record.get("fingerprint"), record.get("status")
                if not fp or status not in ("firing", "resolved") or fp in self._resolved:
                    continue
                name, severity = str(record.get("alertname")), str(record.get("severity"))
                if status == "firing":
                    if fp in self._firing:
                        continue
                    self.alert_transitions.labels(name, severity, status).inc()
                    if severity != "info":
                        key = (_cluster_of(record), name, severity)
                        self._firing[fp] = key
                        self.alerts_firing.labels(*key).inc()
                else:
                    self.alert_transitions.labels(name, severity, status).inc()
                    self._remember_resolved(fp)
                    key = self._firing.pop(fp, None)
                    if key is not None:
                        self.alerts_firing.labels(*key).dec()

    def seed_alerts(self, latest_records: Iterable[Mapping]) -> None:
        """After a restart: restore the firing gauge from the alerts topic without counting transitions."""
        with self._alerts_lock:
            for record in latest_records:
                fp = record.get("fingerprint")
                if not fp:
                    continue
                if record.get("status") == "resolved":
                    self._remember_resolved(fp)
                elif record.get("severity") != "info" and fp not in self._firing:
                    key = (_cluster_of(record), str(record.get("alertname")), str(record.get("severity")))
                    self._firing[fp] = key
                    self.alerts_firing.labels(*key).inc()

    def observe_broker_status(self, rows: Iterable[Mapping]) -> None:
        """Rows ``{cluster_id, broker_id, state, incarnation_id, metadata_epoch, metadata_epoch_lag, restarts}``."""
        with self._brokers.lock:
            for row in rows:
                key = (str(row["cluster_id"]), str(row["broker_id"]))
                self._brokers.rows[key] = {**self._brokers.rows.get(key, {}), **{k: v for k, v in row.items() if v is not None}}

    def observe_cluster(self, cluster_id: str, metadata_epoch: int) -> None:
        self.cluster_metadata_epoch.labels(cluster_id).set(metadata_epoch)
        with self._brokers.lock:
            self._brokers.cluster_epochs[cluster_id] = int(metadata_epoch)

    def observe_client_summary(self, cluster_id: str, shard: int, stale_clients: int, overdue_clients: int) -> None:
        """Client state is sharded; each shard reports its counts and the cluster sum is exposed."""
        self._client_shards[(cluster_id, int(shard))] = (int(stale_clients), int(overdue_clients))
        shards = [v for (c, _), v in self._client_shards.items() if c == cluster_id]
        self.clients_stale.labels(cluster_id).set(sum(s for s, _ in shards))
        self.clients_overdue.labels(cluster_id).set(sum(o for _, o in shards))

    def forget_cluster(self, cluster_id: str) -> None:
        """Drop every series of a cluster (epochwatch reset-cluster): the job forgot it, so its
        brokers' gauges, client counts and resolved alerts' gauges would otherwise stay exposed
        for good (a forged cluster id would keep its series forever). Alerts still firing keep
        theirs: one that fired after the reset is live."""
        with self._brokers.lock:
            for key in [k for k in self._brokers.rows if k[0] == cluster_id]:
                del self._brokers.rows[key]
            self._brokers.cluster_epochs.pop(cluster_id, None)
        for key in [k for k in self._client_shards if k[0] == cluster_id]:
            del self._client_shards[key]
        for gauge in (self.cluster_metadata_epoch, self.clients_stale, self.clients_overdue):
            gauge.remove(cluster_id)
        with self._alerts_lock:
            live = set(self._firing.values())
            for sample in self.alerts_firing.collect()[0].samples:
                key = (sample.labels[CLUSTER_LABEL], sample.labels["alertname"], sample.labels["severity"])
                if key[0] == cluster_id and key not in live:
                    self.alerts_firing.remove(*key)

    def forget_brokers(self, cluster_id: str, broker_ids: Iterable[int], fleet_empty: bool) -> None:
        """Brokers the job forgot after state.entity.expiry.ms of silence: their series go; with
        the last of a cluster's brokers, the cluster's metadata epoch goes too."""
        with self._brokers.lock:
            for broker_id in broker_ids:
                self._brokers.rows.pop((cluster_id, str(broker_id)), None)
            if fleet_empty:
                self._brokers.cluster_epochs.pop(cluster_id, None)
        if fleet_empty:
            try:
                self.cluster_metadata_epoch.remove(cluster_id)
            except KeyError:
                pass

    def observe_late(self, batch_id: int, events: int) -> None:
        if events > 0:
            self.late_events.inc(events)
        self._late_by_batch[batch_id] = events
        for old in [b for b in self._late_by_batch if b < batch_id - 100]:
            del self._late_by_batch[old]

    def late_in_batch(self, batch_id: int) -> int:
        """Late events of a batch whose output this registry has seen (the progress line's figure)."""
        return self._late_by_batch.get(batch_id, 0)

    def observe_dead_letters(self, counts_by_reason: Mapping[str, int]) -> None:
        for reason, count in counts_by_reason.items():
            if count:
                self.dead_letters.labels(str(reason)).inc(count)

    def write(self, batch) -> None:
        """Dispatcher sink (``streaming.sinks.base``): everything an OutputBatch carries for metrics."""
        self.observe_alerts(batch.alerts)   # first: a reset's resolutions bring its gauges to 0
        for cluster_id in {s["cluster_id"] for s in batch.summaries if s.get("kind") == RESET_SUMMARY}:
            self.forget_cluster(cluster_id)   # before the rows of what the cluster sent after it
        self.observe_broker_status(batch.broker_status)
        for summary in batch.summaries:
            if summary.get("kind") == EXPIRED_SUMMARY:
                self.forget_brokers(summary["cluster_id"], summary["broker_ids"], summary["fleet_empty"])
            elif summary.get("kind") == "cluster" and summary.get("metadata_epoch") is not None:
                self.observe_cluster(summary["cluster_id"], summary["metadata_epoch"])
            elif summary.get("kind") == "clients":
                self.observe_client_summary(summary["cluster_id"], summary["shard"], summary["stale_clients"],
                                            summary["overdue_clients"])
        self.observe_late(batch.batch_id, batch.late_events)
        self.observe_dead_letters(self.refusals.write(batch))

    def close(self) -> None:
        """Dispatcher sink end: the job is stopping."""
        self.mark_stopped()

    # --- liveness and delivery -----------------------------------------------------------

    def batch_finished(self, now: float) -> None:
        """End of a micro-batch at ``now`` (Unix seconds): the monitor is alive and progressing."""
        self.last_batch.set(now)
        self.up.set(1)

    def mark_stopped(self) -> None:
        self.up.set(0)

    def set_alertmanager_backlog(self, alertmanager: str, backlog: int) -> None:
        self.alertmanager_backlog.labels(redact(alertmanager)).set(backlog)

    def count_alertmanager_failures(self, alertmanager: str, count: int = 1) -> None:
        self.alertmanager_failures.labels(redact(alertmanager)).inc(count)

    def _remember_resolved(self, fp: str) -> None:
        self._resolved[fp] = None
        while len(self._resolved) > RESOLVED_MEMORY:
            self._resolved.popitem(last=False)


def observed_clusters(progress: Mapping) -> list[str]:
    """The clusters a micro-batch packed events of (streaming.spark.cluster_gate)."""
    observed = (progress.get("observedMetrics") or {}).get(INPUT_METRIC) or {}
    return [c for c in observed.get("clusters") or [] if c]


def input_records(progress: Mapping) -> tuple[int, float, float]:
    """(records read, records/s in, records/s processed) of one micro-batch's progress.

    The job's input rows are packs (streaming.spark.packs), many records each: the records come from
    the pipeline's observed metric, and Spark's row rates are scaled by records per row. A query
    without that metric is counted by its rows."""
    rows = int(_number(progress.get("numInputRows")))
    observed = (progress.get("observedMetrics") or {}).get(INPUT_METRIC)
    if observed is None:
        records, scale = rows, 1.0
    else:
        records = int(_number(observed["records"]))
        scale = records / rows if rows else 0.0
    return (records, _number(progress.get("inputRowsPerSecond")) * scale,
            _number(progress.get("processedRowsPerSecond")) * scale)


def epoch_lag(row: Mapping, cluster_epoch: int | None) -> int:
    """A broker status row's metadata epoch lag against the cluster's newest epoch: a broker cut
    off from the controller sends nothing, so its own row, written when it was last heard from,
    keeps the lag it had then while the cluster's epoch moves on."""
    known = row.get("metadata_epoch")
    if cluster_epoch is not None and isinstance(known, int) and known >= 0:
        return max(0, cluster_epoch - known)
    return int(row.get("metadata_epoch_lag") or 0)


def source_lag(source: Mapping) -> float | None:
    """Records behind for one progress source: sum over partitions of latestOffset - endOffset.

    Offsets may be JSON text or parsed JSON (Kafka: ``{"topic": {"0": 42}}``, other sources:
    any nesting); numbers at the same path are compared. Falls back to the Kafka source's
    ``metrics.offsetsBehindLatest`` style numbers when offsets are not comparable.
    """
    latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
    common = set(latest) & set(end)
    if common:
        return float(sum(max(0.0, latest[p] - end[p]) for p in common))
    metrics = source.get("metrics") or {}
    for key in ("offsetsBehindLatest", "maxOffsetsBehindLatest"):
        if key in metrics:
            return _number(metrics[key])
    return None


def _offsets(value) -> dict[tuple, float]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    out: dict[tuple, float] = {}

    def walk(node, path):
        if isinstance(node, bool):
            return
        if isinstance(node, (int, float)):
            out[path] = float(node)
        elif isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, path + (str(k),))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(value, ())
    return out


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number == number else 0.0   # NaN (Spark's rate of an empty batch) -> 0


def _cluster_of(record: Mapping) -> str:
    return str(record.get("cluster_id") or (record.get("labels") or {}).get("cluster") or "")
