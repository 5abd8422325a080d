"""The collector's own /metrics: that it runs, whether it reaches the cluster, what it sent.

A collector that stopped and a cluster that is down look the same to the job (no events): both
end in ClusterSilent. These series tell them apart in Prometheus: `EpochwatchCollectorDown`
(deploy/prometheus/rules/epochwatch-meta.yml) fires for a cluster whose collector series vanished,
and Alertmanager inhibits that cluster's ClusterSilent while it does (deploy/alertmanager/, whose
ClusterSilent route waits until the alert had time to fire), so lost telemetry pages as lost
telemetry; a collector that runs but reaches no node of the cluster keeps
`epochwatch_collector_cluster_reachable` at 0, and ClusterSilent pages as a cluster outage. The
cluster id is in `kafka_cluster`, as on the job's series and alerts (streaming.sinks.labels).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from streaming.sinks.endpoint import MetricsEndpoint
from streaming.sinks.labels import METRIC_CLUSTER_LABEL as CLUSTER_LABEL


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self._endpoint = MetricsEndpoint(self.registry)
        r = self.registry
        self.up = Gauge("epochwatch_collector_up", "1 while the collector runs rounds for this cluster",
                        [CLUSTER_LABEL], registry=r)
        self.reachable = Gauge("epochwatch_collector_cluster_reachable",
                               "1 when the last round reached the cluster's Admin API", [CLUSTER_LABEL], registry=r)
        self.rounds = Counter("epochwatch_collector_rounds", "rounds run", [CLUSTER_LABEL], registry=r)
        self.last_round = Gauge("epochwatch_collector_last_round_timestamp_seconds", "when the last round ended",
                                [CLUSTER_LABEL], registry=r)
        self.events = Counter("epochwatch_collector_events", "events derived, by type", [CLUSTER_LABEL, "event_type"],
                              registry=r)
        self.unreachable_exporters = Gauge("epochwatch_collector_exporters_unreachable",
                                           "exporters that did not answer in the last round", [CLUSTER_LABEL],
                                           registry=r)
        self.publish_failed = Gauge("epochwatch_collector_publish_failed",
                                    "events the events topic refused for good (delivery errors)", registry=r)
        self.publish_dropped = Gauge("epochwatch_collector_publish_dropped",
                                     "events dropped because the local queue was full", registry=r)
        self.commit_log_records = Gauge("epochwatch_collector_commit_log_records",
                                        "records of __consumer_offsets read since the start, by what they were "
                                        "(commit, tombstone, ignored_type, unknown_version, malformed, id_too_long)",
                                        [CLUSTER_LABEL, "kind"], registry=r)
        self.commit_log_restarts = Gauge("epochwatch_collector_commit_log_restarts",
                                         "times the commit log reader had to be started again", [CLUSTER_LABEL],
                                         registry=r)
        self.commit_log_partitions = Gauge("epochwatch_collector_commit_log_partitions",
                                           "partitions of __consumer_offsets the commit log reader reads "
                                           "(0: joining its group, or down)", [CLUSTER_LABEL], registry=r)
        self.publish_queued = Gauge("epochwatch_collector_publish_queued", "events not yet acknowledged", registry=r)

    def serve(self, port: int, address: str) -> int:
        """Expose /metrics on a daemon thread; returns the bound port (0 picks a free one)."""
        return self._endpoint.serve(port, address)

    def stop(self) -> None:
        """No more /metrics: to Prometheus, the collector is gone."""
        self._endpoint.stop()

    def round_done(self, report, events: list[dict], publisher, now_s: float, commit_log=None) -> None:
        cluster = report.cluster_id
        if publisher is not None:
            self.publish_failed.set(publisher.failed)
            self.publish_dropped.set(publisher.dropped)
            self.publish_queued.set(publisher.queued)
        if cluster is None:
            return  # never reached: no cluster to label the series with yet
        self.up.labels(cluster).set(1)
        self.reachable.labels(cluster).set(1 if report.reachable else 0)
        self.rounds.labels(cluster).inc()
        self.last_round.labels(cluster).set(now_s)
        self.unreachable_exporters.labels(cluster).set(report.scrapes - report.scrapes_ok)
        for e in events:
            self.events.labels(cluster, e["event_type"]).inc()
        if commit_log is not None:
            for kind, n in commit_log.counts.by_kind.items():
                self.commit_log_records.labels(cluster, kind).set(n)
            self.commit_log_restarts.labels(cluster).set(commit_log.restarts)
            self.commit_log_partitions.labels(cluster).set(commit_log.reading_partitions)
