"""The long-running job: Kafka events -> detection -> alerts topic, dead-letter topic,
Alertmanager, Prometheus metrics, console. ``start`` returns the running StreamingQuery."""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from pyspark.sql.streaming import StreamingQueryListener

from streaming.config import Settings
from streaming.sinks.base import Dispatcher, Sink
from streaming.sinks.metrics import observed_clusters
from streaming.spark import hold_keys
from streaming.spark.cluster_gate import ClusterRegistry
from streaming.spark.pipeline import PROCESSING_TIME, detect, detect_packs

log = logging.getLogger("epochwatch")


def kafka_events(spark, settings: Settings, starting_offsets: str | None = None):
    """The events topic as one row per decoded record."""
    return _kafka_reader(spark, settings, starting_offsets).load()


RECORDS_PER_SOURCE_TASK = 50_000


def kafka_packs(spark, settings: Settings, starting_offsets: str | None = None, time_mode: str = PROCESSING_TIME,
                cluster_registry: Path | None = None):
    """The events topic as packs (streaming.spark.packs), routed and packed in the source: what the
    job reads. Progress then counts packs as input rows; streaming.sinks.metrics.input_records counts
    the records. Implausible event times are judged by the wall clock in processing time, by the
    batches' own times in event time (streaming.spark.validity)."""
    rules = settings.rules
    reader = _kafka_reader(spark, settings, starting_offsets)
    if time_mode == PROCESSING_TIME:  # event time needs no hold: the watermark waits for the clock
        partitions = hold_keys.state_partition_count(spark, settings.checkpoint_location)
        reader = reader.option("packs.holdShards", ",".join(map(str, hold_keys.hold_shards(spark, partitions))))
    if cluster_registry is not None:  # streaming.spark.cluster_gate
        reader = reader.option("packs.maxClusters", str(rules.max_clusters)).option("packs.clusterRegistry",
                                                                                    str(cluster_registry))
    return (reader.option("output", "packs")
            # Undecodable records go to the dead-letter topic from the task that read them: their
            # bytes (any size, any number) never travel through packs, state or the driver.
            .option("deadLetterTopic", settings.kafka.dlq_topic)
            .option("packs.clientShards", str(rules.client_shards))
            .option("packs.maxFutureMs", str(rules.max_future_ms))
            .option("packs.maxPastMs", str(rules.max_past_ms))
            .option("packs.maxEpoch", str(rules.max_epoch))
            .option("packs.clock", "wall" if time_mode == PROCESSING_TIME else "events")
            # a live batch is read in one task per core, not one per Kafka partition: each task
            # has a fixed cost whatever it reads (figures: bench/RESULTS.md, Live detection latency)
            .option("recordsPerTask", str(RECORDS_PER_SOURCE_TASK))
            .option("minPartitions", str(spark.sparkContext.defaultParallelism)).load())


def cluster_registry_path(checkpoint_location: str) -> Path:
    """Where the admitted clusters are kept (streaming.spark.cluster_gate): in a local checkpoint, so a
    restart keeps them; a remote one gets a local folder of the query's own, and a restart admits
    anew (the old clusters' state expires meanwhile)."""
    parsed = urlparse(checkpoint_location)
    if parsed.scheme in ("", "file"):
        # absolute: the planner that reads it is a process of its own
        return Path(parsed.path if parsed.scheme else checkpoint_location).absolute() / "epochwatch-clusters.json"
    return Path(tempfile.mkdtemp(prefix="epochwatch-clusters-")) / "clusters.json"


class ClusterRegistryListener(StreamingQueryListener):
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

    def onQueryProgress(self, event) -> None:
        p = json.loads(event.progress.json)
        registry = self.registries.get(p.get("name"))
        if registry is not None:
            registry.observe(observed_clusters(p))

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def _kafka_reader(spark, settings: Settings, starting_offsets: str | None):
    k = settings.kafka
    reader = (spark.readStream.format("epochwatch-kafka")
              .option("kafka.bootstrap.servers", k.bootstrap_servers)
              .option("subscribe", k.events_topic)
              .option("startingOffsets", starting_offsets or k.starting_offsets)
              .option("decode", "avro" if k.encoding == "confluent" else "avro-schemaless")
              .option("failOnDataLoss", k.fail_on_data_loss))
    if k.schema_registry_url:
        reader = reader.option("schema.registry.url", k.schema_registry_url)
    if k.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(k.max_offsets_per_trigger))
    for name, value in k.source_options().items():
        reader = reader.option(name, value)
    for name, value in k.client.items():
        reader = reader.option(f"kafka.{name}", value)
    return reader


class ProgressListener(StreamingQueryListener):
    """One concise line per micro-batch, and the metrics that come from Spark's progress."""

    def __init__(self, metrics=None, emit=None):
        self.metrics = metrics
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

    def onQueryProgress(self, event) -> None:
        p = json.loads(event.progress.json)
        if self.metrics is not None:
            self.metrics.observe_progress(p)
            self.metrics.batch_finished(time.time())
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

    def onQueryTerminated(self, event) -> None:
        if self.metrics is not None:
            self.metrics.mark_stopped()
        self.emit(f"query {event.id} stopped" + (f": {event.exception}" if event.exception else ""))


def _lost(progress: dict) -> int:
    """Data losses the source skipped in a batch (failOnDataLoss=false; streaming.engine.keys.DATA_LOSS)."""
    from streaming.spark.packs import INPUT_METRIC

    return int((progress.get("observedMetrics") or {}).get(INPUT_METRIC, {}).get("lost") or 0)


# Spark 4.3's error conditions for state that does not match what the query declares
STATE_LAYOUT_ERRORS = ("STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
                       "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE", "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE")


def failure_text(exception) -> str:
    """A failed query's message, with the fix when the checkpoint holds another state layout."""
    text = str(exception)
    if any(code in text for code in STATE_LAYOUT_ERRORS):
        text += ("\nFix: checkpoint_location holds state written by an epochwatch build with another state "
                 "layout; start on a new checkpoint (docs/operations.md, Upgrading, says what that loses "
                 "and how to skip nothing)")
    return text


def start(spark, settings: Settings, sinks: Iterable[Sink] | Dispatcher, *, time_mode: str = PROCESSING_TIME,
          available_now: bool = False, events_df=None, query_name: str = "epochwatch"):
    """Start the detection query over the events topic, or over ``events_df`` (decoded event rows)
    if given; the caller owns the sinks' lifecycle (Dispatcher.close). Pass a Dispatcher to know
    when a micro-batch is running (Dispatcher.idle). ``available_now`` needs event time: in
    processing time Spark's stateful operator asks for another batch after every batch (its timers
    run on the wall clock), so the query would never end."""
    if available_now and time_mode == PROCESSING_TIME:
        raise ValueError("available_now needs time_mode=EventTime: a processing-time query never runs out of batches")
    if events_df is not None:
        output = detect(events_df, settings.rules, time_mode)
    else:
        registry = ClusterRegistry(cluster_registry_path(settings.checkpoint_location), settings.rules.max_clusters,
                                   settings.rules.entity_expiry_ms)
        ClusterRegistryListener.of(spark).registries[query_name] = registry
        packs = kafka_packs(spark, settings, time_mode=time_mode, cluster_registry=registry.path)
        output = detect_packs(packs, settings.rules, time_mode)
    writer = (output.writeStream
              .foreachBatch(sinks if isinstance(sinks, Dispatcher) else Dispatcher(list(sinks)))
              .option("checkpointLocation", settings.checkpoint_location)
              .queryName(query_name))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=settings.trigger_interval)
    return writer.start()
