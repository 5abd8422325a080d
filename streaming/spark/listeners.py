"""What the job learns from each micro-batch's progress: the clusters it packed (for the cluster
cap's registry) and the concise line and metrics of `epochwatch run`."""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from streaming.sinks.metrics import observed_clusters
from streaming.spark.cluster_gate import ClusterRegistry

log = logging.getLogger("epochwatch")


def cluster_registry_path(checkpoint_location: str) -> Path:
    """Where the admitted clusters are kept (streaming.spark.cluster_gate): in a local checkpoint, so a
    restart keeps them; a remote one gets a local folder of the query's own, and a restart admits
    anew (the old clusters' state expires meanwhile)."""
    parsed = urlparse(checkpoint_location)
    if parsed.scheme in ("", "file"):
        # absolute: the planner that reads it is a process of its own
        return Path(parsed.path if parsed.scheme else checkpoint_location).absolute() / "epochwatch-clusters.json"
    return Path(tempfile.mkdtemp(prefix="epochwatch-clusters-")) / "clusters.json"


class JsonProgressListener(StreamingQueryListener):
    """A listener that is handed each micro-batch's progress as Spark's JSON of it, parsed.

    Why not PySpark's own hand-over: it builds the progress object field by field, a call into
    the JVM each, and for every observed metric looks a JVM class up by name, which searches
    every jar: with one such listener the driver JVM spent a third of its samples there, ~12% of
    a core, every batch (a flight recording of bench/detection_latency.py; bench/HISTORY.md, Live
    latency and silence, session 21). Here the JVM writes the JSON and one call brings it over."""

    def on_progress(self, progress: dict) -> None:
        raise NotImplementedError

    def onQueryProgress(self, event) -> None:  # Spark Connect, and PySpark's hand-over
        self.on_progress(json.loads(event.progress.json))

    @property
    def _jlistener(self):
        # what StreamingQueryManager.addListener registers with the JVM
        if not hasattr(self, "_json_jlistener"):
            from pyspark import SparkContext

            self._json_jlistener = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))
        return self._json_jlistener


class _ProgressAsJson(JStreamingQueryListener):
    """The JVM's callback: the progress crosses as JSON; the rarer events as PySpark hands them."""

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.on_progress(json.loads(jevent.progress().json()))


class ClusterRegistryListener(JsonProgressListener):
    """Feeds each batch's clusters (streaming.spark.pipeline's observed metric) to its query's registry:
    one listener per session (each listener is called for every query's progress)."""

    def __init__(self):
        self.registries: dict[str, ClusterRegistry] = {}

    @classmethod
    def of(cls, spark) -> "ClusterRegistryListener":
        listener = getattr(spark, "_epochwatch_cluster_listener", None)
        if listener is None:
            listener = cls()
            spark.streams.addListener(listener)
            spark._epochwatch_cluster_listener = listener
        return listener

    def onQueryStarted(self, event) -> None:
        pass

    def on_progress(self, p: dict) -> None:
        registry = self.registries.get(p.get("name"))
        if registry is not None:
            registry.observe(observed_clusters(p))

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


class ProgressListener(JsonProgressListener):
    """One concise line per micro-batch, and the metrics and the status view's job section
    (streaming.sinks.status) that come from Spark's progress."""

    def __init__(self, metrics=None, emit=None, status=None):
        self.metrics = metrics
        self.status = status
        self.emit = emit or log.info
        self._last_batch = -1
        self._progressed = threading.Condition()

    def wait_for_batch(self, batch_id: int, timeout_s: float) -> bool:
        """Wait until the progress of ``batch_id`` has been handled: Spark posts it to listeners
        after the batch, so a query that just ended may not have told this one yet."""
        with self._progressed:
            return self._progressed.wait_for(lambda: self._last_batch >= batch_id, timeout_s)

    def onQueryStarted(self, event) -> None:
        self.emit(f"query {event.name or event.id} started")

    def on_progress(self, p: dict) -> None:
        if self.metrics is not None:
            self.metrics.observe_progress(p)
            self.metrics.batch_finished(time.time())
        if self.status is not None:
            self.status.observe_progress(p)
        ops = p.get("stateOperators") or [{}]
        from streaming.sinks.metrics import input_records, source_lag
        from streaming.spark.refusals import describe, everything_refused, refused_everything_message

        lag = sum(source_lag(s) or 0 for s in p.get("sources", []))
        late = self.metrics.late_in_batch(p["batchId"]) if self.metrics is not None else "?"
        refused = self.metrics.refusals.in_batch(p["batchId"]) if self.metrics is not None else None
        records, in_rate, done_rate = input_records(p)
        self.emit(f"batch {p['batchId']}: {records} events, {in_rate:.0f} in/s, {done_rate:.0f} done/s, "
                  f"{p['durationMs'].get('triggerExecution', 0)} ms, lag {lag:.0f}, "
                  f"state rows {ops[0].get('numRowsTotal', 0)}, late {late}, "
                  f"refused {'?' if refused is None else describe(refused)}"
                  + (f", data loss {lost}" if (lost := _lost(p)) else ""))
        if refused is not None and everything_refused(records, sum(refused.values())):
            # loud, but the job goes on: a producer sending only garbage must not stop the monitor
            log.error("batch %s: %s", p["batchId"], refused_everything_message(records, refused))
        with self._progressed:
            self._last_batch = max(self._last_batch, p["batchId"])
            self._progressed.notify_all()

    def onQueryIdle(self, event) -> None:
        if self.metrics is not None:
            self.metrics.batch_finished(time.time())
        if self.status is not None:
            self.status.observe_idle()

    def onQueryTerminated(self, event) -> None:
        if self.metrics is not None:
            self.metrics.mark_stopped()
        if self.status is not None:
            self.status.job_stopped(event.exception)
        self.emit(f"query {event.id} stopped" + (f": {event.exception}" if event.exception else ""))


def _lost(progress: dict) -> int:
    """Data losses the source skipped in a batch (failOnDataLoss=false; streaming.engine.keys.DATA_LOSS)."""
    from streaming.spark.packs import INPUT_METRIC

    return int((progress.get("observedMetrics") or {}).get(INPUT_METRIC, {}).get("lost") or 0)
