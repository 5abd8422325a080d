"""The events topic as the job reads it: the project's Kafka source (udfs.kafka_source) with the
job's options, as decoded rows or as packs routed and packed in the source."""

from __future__ import annotations

from pathlib import Path

from streaming.config import Settings
from streaming.spark import hold_keys
from streaming.spark.pipeline import PROCESSING_TIME


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
        for name, value in k.registry_conf().items():
            reader = reader.option(f"schema.registry.{name}", value)
    if k.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(k.max_offsets_per_trigger))
        reader = reader.option("rampUpBatches", str(k.ramp_up_batches))
    for name, value in k.source_options().items():
        reader = reader.option(name, value)
    for name, value in k.client.items():
        reader = reader.option(f"kafka.{name}", value)
    return reader
