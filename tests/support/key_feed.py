"""Feeding one state key's events to the processor as Spark would: routed, packed, batch by batch
(TwsTester, EventTime); a key step's request and empty state; what a brokers key stored."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.tws_tester import TwsTester

from streaming.config import RuleSettings
from streaming.engine.keys import KINDS
from streaming.rules.records import BrokerRecord
from streaming.spark.json_tables import from_json_rows, read_table, replay
from streaming.spark.key_steps import StepRequest, StoredState
from streaming.spark.packs import pack
from streaming.spark.processor import EpochwatchProcessor
from streaming.spark.routing import routes
from tests.support.engine_hosts import KEY


def packed(events: list[dict], key: tuple, client_shards: int = 16) -> list[bytes]:
    """The payloads Spark would hand the processor for ``key``: events routed there among
    ``client_shards`` (as the test picked its key), packed."""
    rows = []
    for ev in events:
        if ev["cluster_id"] != key[0] or key[1:] not in routes(ev, client_shards):
            continue
        rows.append({**ev, "event_time": datetime.fromtimestamp(ev["event_time"] / 1000, timezone.utc),
                     "event_ms": ev["event_time"], "kind": key[1], "shard": key[2]})
    if not rows:
        return []
    names = list(dict.fromkeys(k for r in rows for k in r))
    packs = pack(pa.table({k: pa.array([r.get(k) for r in rows]) for k in names}))
    return [p for p, kind in zip(packs.column("payload").to_pylist(), packs.column("kind").to_pylist())
            if kind == key[1]]


def feed_in_batches(events: list[dict], key: tuple, batch: int, rules: RuleSettings) -> tuple[TwsTester, list[dict]]:
    """Feed ``key`` its events ``batch`` at a time (so events wait in the buffer and some come
    late), then move the watermark an hour past the end; the tester and every output row."""
    tester = TwsTester(EpochwatchProcessor(rules, "EventTime"), timeMode="EventTime", eventTimeExtractor=pack_time)
    rows = []
    for i in range(0, len(events), batch):
        payloads = packed(events[i:i + batch], key)
        if payloads:
            frame = pa.table({"payload": payloads, "clock_ms": [max(e["event_time"] for e in events[:i + batch])]
                              * len(payloads)}).to_pandas()
            frame["event_time"] = None
            out = tester.testInPandas(key, frame)
            rows += out.drop(columns=["raw_key", "raw_value"], errors="ignore").to_dict("records")
    fired = tester.setWatermark(events[-1]["event_time"] + 3_600_000)
    rows += fired.drop(columns=["raw_key", "raw_value"], errors="ignore").to_dict("records")
    return tester, rows


def run_key(events: list[dict], key: tuple, batch: int, rules: RuleSettings, fast_paths: bool,
            value_states: tuple[str, ...]) -> list:
    """Feed a key batch by batch (EventTime, so events wait in the buffer and some come late),
    with rules.fast.paths on or off: every output row, the ``value_states`` (a JSON table with a
    log: the records its base and log hold) and the alerts kept."""
    tester, rows = feed_in_batches(events, key, batch, rules if fast_paths else replace(rules, fast_paths="off"))
    return [rows, (*(stored_value(tester, name, key) for name in value_states), tester.peekListState("alerts", key))]


def stored_value(tester, name: str, key: tuple):
    """The key's stored ``name``: its table's records (``clients``, ``brokers``, ...: the table
    variable with its log), the brokers table's ``cluster``, or another state variable's value."""
    if name == "cluster":
        value = tester.peekValueState("table", key)
        return read_table(BrokerRecord, value[1])[1] if value else None
    if name not in KINDS:
        return tester.peekValueState(name, key)
    value = tester.peekValueState("table", key)
    kind = KINDS[name]
    if not kind.incremental_json:
        return from_json_rows(kind.record, value[1]) if value else []
    return replay(kind, value, [tuple(e) for e in tester.peekListState("table_log", key)])[0]


def empty_state() -> StoredState:
    return StoredState(None, [], [])


def request(rules: RuleSettings, key: tuple, packs: list[bytes], meta, clock_ms: int) -> StepRequest:
    cluster_id, kind, shard = key
    return StepRequest(rules, cluster_id, kind, shard, tuple(packs), meta, True,
                       clock_ms - rules.allowed_lateness_ms, 0, clock_ms, query="q")


def stored_brokers(tester, key=KEY) -> list[BrokerRecord]:
    value = tester.peekValueState("table", key)
    return from_json_rows(BrokerRecord, value[1]) if value else []


def pack_time(row):
    """Packs carry no event time, and Spark never drops a row without one as late."""
    return 2**62 if pd.isna(row["event_time"]) else int(row["event_time"].timestamp() * 1000)
