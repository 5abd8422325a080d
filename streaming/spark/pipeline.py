"""Query wiring: decoded events -> routed packs -> transformWithState -> output rows. A few
lines on purpose: the logic is in streaming.engine.key_engine, the state layout in streaming.spark.processor, why
events travel in packs in streaming.spark.packs."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.config import ConfigError, RuleSettings
from streaming.engine.keys import CLOCK, DATA_LOSS, KINDS
from streaming.spark.packs import INPUT_METRIC, KEY_COLUMNS, PACK_SCHEMA, route_and_pack
from streaming.spark.processor import EpochwatchProcessor, EpochwatchRowProcessor
from streaming.spark.state_schema import OUTPUT_SCHEMA
from streaming.spark.validity import Limits
from udfs.event_columns import DEAD_LETTER_COLUMNS, KAFKA_COLUMNS, decoded_column_names

EVENT_TIME = "EventTime"          # replay and demo: deterministic on event time
PROCESSING_TIME = "ProcessingTime"  # the live job: timers fire on a quiet stream too
# "false": step every key in the Python worker that runs its task (streaming.spark.engine_host)
ENGINE_HOSTS_CONF = "spark.epochwatch.engineHosts"


def detect(events: DataFrame, rules: RuleSettings, time_mode: str, api: str = "pandas") -> DataFrame:
    """Decoded event rows in, output rows out. ``api``: "pandas" (transformWithStateInPandas, the
    default: faster; figures: bench/RESULTS.md, Stateful stage throughput) or "row"
    (transformWithState)."""
    return detect_packs(pack_events(events, rules, time_mode), rules, time_mode, api)


def pack_events(events: DataFrame, rules: RuleSettings, time_mode: str = EVENT_TIME) -> DataFrame:
    """Decoded event rows -> packs (streaming.spark.packs). The Kafka source can pack itself
    (``output=packs``, streaming.spark.kafka_input.kafka_packs), which saves a round trip of every event
    through a Spark row. In event time (replay) the batches' own times are the clock that
    implausible times are judged by, never the wall clock: a recording may be of any date."""
    columns = [*decoded_column_names(), *KAFKA_COLUMNS, *DEAD_LETTER_COLUMNS]
    present = [c for c in dict.fromkeys(columns) if c in events.columns]
    limits = Limits.of(rules, wall_clock=time_mode == PROCESSING_TIME)
    return events.select(*present).mapInArrow(route_and_pack(rules.client_shards, limits), PACK_SCHEMA)


def detect_packs(packs: DataFrame, rules: RuleSettings, time_mode: str, api: str = "pandas") -> DataFrame:
    if time_mode not in (EVENT_TIME, PROCESSING_TIME):
        raise ValueError(f"time_mode must be {EVENT_TIME} or {PROCESSING_TIME}, not {time_mode!r}")
    packs = packs.observe(INPUT_METRIC, F.sum(F.when(F.col("kind") == CLOCK, F.col("events"))).alias("records"),
                          F.sum(F.when(F.col("kind") == DATA_LOSS, F.col("events"))).alias("lost"),
                          # the clusters the batch holds state for (streaming.spark.cluster_gate)
                          F.collect_set(F.when(F.col("kind").isin(*KINDS), F.col("cluster_id")))
                          .alias("clusters"))
    if time_mode == EVENT_TIME:
        packs = packs.withWatermark("event_time", f"{rules.allowed_lateness_ms} milliseconds")
    grouped = packs.groupBy(*(F.col(c) for c in KEY_COLUMNS))
    hosted = engine_hosts(packs.sparkSession.conf.get(ENGINE_HOSTS_CONF, "true"))
    if api == "row":
        return grouped.transformWithState(
            statefulProcessor=EpochwatchRowProcessor(rules, time_mode, hosted),
            outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode=time_mode)
    return grouped.transformWithStateInPandas(
        statefulProcessor=EpochwatchProcessor(rules, time_mode, hosted),
        outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode=time_mode)


def engine_hosts(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ConfigError(f"spark.{ENGINE_HOSTS_CONF}", f"{value!r} is neither true nor false",
                          "set it to false to step state keys in Spark's Python workers, or remove it")
    return value.strip().lower() == "true"
