"""The long-running job: Kafka events -> detection -> alerts topic, dead-letter topic,
Alertmanager, Prometheus metrics, console. ``start`` returns the running StreamingQuery."""

from __future__ import annotations

from typing import Iterable

from streaming.config import Settings
from streaming.sinks.base import Dispatcher, Sink
from streaming.spark.checkpoint import use_checkpoint
from streaming.spark.cluster_gate import ClusterRegistry
from streaming.spark.kafka_input import kafka_packs
from streaming.spark.listeners import ClusterRegistryListener, cluster_registry_path
from streaming.spark.pipeline import PROCESSING_TIME, detect, detect_packs
from streaming.spark.sessionless_conf import give_sessionless_threads_the_session_conf

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
    use_checkpoint(spark, settings.checkpoint_location, settings.rules.client_shards)
    writer = (output.writeStream
              .foreachBatch(sinks if isinstance(sinks, Dispatcher) else Dispatcher(list(sinks)))
              .option("checkpointLocation", settings.checkpoint_location)
              .queryName(query_name))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=settings.trigger_interval)
    query = writer.start()
    give_sessionless_threads_the_session_conf(spark)  # after the start: its cloned session took it back
    return query
