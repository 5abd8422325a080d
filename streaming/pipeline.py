"""Query wiring: decoded events -> routed packs -> transformWithState -> output rows. A few
lines on purpose: the logic is in streaming.engine, the state layout in streaming.processor, why
events travel in packs in streaming.packs."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.config import RuleSettings
from streaming.packs import KEY_COLUMNS, PACK_SCHEMA, route_and_pack
from streaming.processor import EpochwatchProcessor, EpochwatchRowProcessor
from streaming.state_schema import OUTPUT_SCHEMA
from udfs.event_columns import DEAD_LETTER_COLUMNS, KAFKA_COLUMNS, decoded_column_names

EVENT_TIME = "EventTime"          # replay and demo: deterministic on event time
PROCESSING_TIME = "ProcessingTime"  # the live job: timers fire on a quiet stream too


def detect(events: DataFrame, rules: RuleSettings, time_mode: str, api: str = "pandas") -> DataFrame:
    """``api``: "pandas" (transformWithStateInPandas, the default: measured faster, see
    bench/RESULTS.md) or "row" (transformWithState)."""
    if time_mode not in (EVENT_TIME, PROCESSING_TIME):
        raise ValueError(f"time_mode must be {EVENT_TIME} or {PROCESSING_TIME}, not {time_mode!r}")
    columns = [*decoded_column_names(), *KAFKA_COLUMNS, *DEAD_LETTER_COLUMNS]
    present = [c for c in dict.fromkeys(columns) if c in events.columns]
    packs = events.select(*present).mapInArrow(route_and_pack(rules.client_shards, rules.max_future_ms),
                                               PACK_SCHEMA)
    if time_mode == EVENT_TIME:
        packs = packs.withWatermark("event_time", f"{rules.allowed_lateness_ms} milliseconds")
    grouped = packs.groupBy(*(F.col(c) for c in KEY_COLUMNS))
    if api == "row":
        return grouped.transformWithState(
            statefulProcessor=EpochwatchRowProcessor(rules, time_mode),
            outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode=time_mode)
    return grouped.transformWithStateInPandas(
        statefulProcessor=EpochwatchProcessor(rules, time_mode),
        outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode=time_mode)
