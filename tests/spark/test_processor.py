"""EpochwatchProcessor without Spark (pyspark.sql.streaming.TwsTester): the adapter stores state,
emits rows, and its timers make silence visible."""

import json
from datetime import datetime, timezone

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from streaming.config import RuleSettings
from streaming.engine.keys import HOLD
from streaming.spark.packs import hold_rows, pack
from streaming.spark.processor import EpochwatchProcessor, to_json_rows
from tests.support.builders import heartbeats
from tests.support.key_feed import pack_time, stored_brokers, stored_value

KEY = ("c1", "brokers", 0)
HOLD_KEY = ("", HOLD, 0)
T0 = 1_700_000_000_000


def frame(events, key=KEY):
    """The events as Spark hands them to the processor: routed to ``key`` and packed."""
    rows = []
    for ev in events:
        ms = T0 + ev["event_time"]
        rows.append({**ev, "event_time": datetime.fromtimestamp(ms / 1000, timezone.utc), "event_ms": ms,
                     "kind": key[1], "shard": key[2]})
    names = list(dict.fromkeys(k for r in rows for k in r))
    packs = pack(pa.table({k: pa.array([r.get(k) for r in rows]) for k in names})).to_pandas()
    return packs[packs["kind"] == key[1]].reset_index(drop=True)  # the clock row has a key of its own


def alerts(pdf):
    return [(r["kind"], json.loads(r["payload"])["alertname"], json.loads(r["payload"])["status"])
            for _, r in pdf.iterrows() if r["kind"] == "alert"]


def event_time_tester():
    return TwsTester(EpochwatchProcessor(RuleSettings(), "EventTime"), timeMode="EventTime",
                     eventTimeExtractor=pack_time)


def test_state_is_one_record_per_broker_and_inspectable():
    """Why: on-call inspects state with format('statestore'); the brokers value is a table with a
    record per broker (count, and JSON rows that streaming.spark.state_schema.json_rows explodes)."""
    tester = event_time_tester()
    tester.testInPandas(KEY, frame(heartbeats((1, 2, 3), 0, 20000)))
    count, _ = tester.peekValueState("table", KEY)
    brokers = stored_brokers(tester)
    assert count == 3 and sorted(b.broker_id for b in brokers) == [1, 2, 3]
    assert {b.state for b in brokers} == {"ACTIVE"}


def test_a_batch_is_applied_up_to_its_newest_event_minus_the_lateness_the_rest_waits():
    """Why: holding a whole micro-batch until the next watermark wrote every event to the state
    store and read it back (most of the stateful stage's time); only the events within the allowed
    lateness of the newest one can still be overtaken, so only they wait."""
    tester = event_time_tester()
    events = heartbeats((1, 2, 3), 0, 20000)
    newest = max(ev["event_time"] for ev in events)
    within_lateness = [ev for ev in events if ev["event_time"] > newest - RuleSettings().allowed_lateness_ms]
    tester.testInPandas(KEY, frame(events))
    waiting = sum(count for count, _ in tester.peekListState("buffer", KEY))
    assert 0 < waiting == len(within_lateness) < len(events)
    tester.setWatermark(T0 + newest)
    assert tester.peekListState("buffer", KEY) == []


def test_event_time_timer_fires_on_silence():
    """Why: no input arrives for a silent broker, so only a timer can raise the timeout."""
    tester = event_time_tester()
    out = tester.testInPandas(KEY, frame(heartbeats((1, 2, 3), 0, 20000)))
    assert alerts(out) == []
    out = tester.testInPandas(KEY, frame(heartbeats((1, 3), 20000, 40000)))
    fired = tester.setWatermark(T0 + 40000)
    names = alerts(out) + alerts(fired)
    assert ("alert", "BrokerHeartbeatTimeout", "firing") in names


def test_whole_cluster_silent_fires_from_the_timer_alone():
    tester = event_time_tester()
    tester.testInPandas(KEY, frame(heartbeats((1, 2, 3), 0, 20000)))
    fired = tester.setWatermark(T0 + 60000)
    assert alerts(fired) == [("alert", "ClusterSilent", "firing")]


def test_processing_time_mode_detects_silence_with_wall_clock_timers():
    """Why: the live job must page for a silent cluster although no data (and no watermark) moves."""
    processor = EpochwatchProcessor(RuleSettings(), "ProcessingTime")
    tester = TwsTester(processor, timeMode="ProcessingTime")
    tester.setProcessingTime(T0 + 18000)
    tester.testInPandas(KEY, frame(heartbeats((1, 2, 3), 0, 18000)))
    fired = tester.setProcessingTime(T0 + 40000)
    assert ("alert", "ClusterSilent", "firing") in alerts(fired)


def test_processing_time_backlog_after_an_input_outage_pages_nobody():
    """Why: when epochwatch's own input stalls (its Kafka unreachable for 22 s, no batch runs) the
    first batch after it carries telemetry that trails the clock by the outage; a horizon at the
    batch's wall-clock time would time out every broker still queued behind it."""
    tester = TwsTester(EpochwatchProcessor(RuleSettings(), "ProcessingTime"), timeMode="ProcessingTime")
    out = [spark_batch(tester, T0 + 18500, frame(heartbeats((1, 2, 3), 0, 18000)))]
    out.append(spark_batch(tester, T0 + 40500, frame(heartbeats((1, 2, 3), 18000, 30000))))  # part of the backlog
    out.append(spark_batch(tester, T0 + 41500, frame(heartbeats((1, 2, 3), 30000, 41000))))
    assert [a for pdf in out for a in alerts(pdf) if a[2] == "firing"] == []
    # and once the backlog is applied, real silence still pages from the timer
    fired = tester.setProcessingTime(T0 + 60000)
    assert ("alert", "ClusterSilent", "firing") in alerts(fired)


def test_processing_time_timers_wait_for_a_partition_that_is_behind():
    """Why (issue 27): the cluster's heartbeats from 18 s on wait unread in a partition of the
    events topic that is behind; the batch that reads the other partitions sends each state
    partition a hold row with the clock held there, and the key its timer alone steps may not
    pass it. The hold lasts one batch: real silence still pages when no hold comes."""
    tester = TwsTester(EpochwatchProcessor(RuleSettings(), "ProcessingTime"), timeMode="ProcessingTime")
    first = spark_batch(tester, T0 + 18500, frame(heartbeats((1, 2, 3), 0, 18000)))
    held = spark_batch(tester, T0 + 40500, hold_rows(T0 + 18000, [0]).to_pandas(), HOLD_KEY)
    assert [r for _, r in pd.concat([first, held]).iterrows() if r["kind"] in ("transition", "alert")
            and json.loads(r["payload"]).get("to_state", "firing") in ("INACTIVE", "firing")] == []
    assert [b.state for b in stored_brokers(tester)] == ["ACTIVE"] * 3
    fired = tester.setProcessingTime(T0 + 41500)
    assert ("alert", "ClusterSilent", "firing") in alerts(fired)


def spark_batch(tester, now_ms, pdf, key=KEY):
    """One micro-batch as Spark runs it: the batch's time, its input first, then expired timers.
    (TwsTester.setProcessingTime fires timers at once, so the time is set without it first.)"""
    tester._currentProcessingTimeMs = now_ms
    out = tester.testInPandas(key, pdf)
    fired = tester._handleExpiredTimers()
    return pd.concat([out, fired], ignore_index=True)


def test_late_events_are_applied_and_counted_not_dropped():
    """Why: 'nothing is silently dropped': an event behind the watermark still updates state, and
    the late summary feeds epochwatch_late_events_total."""
    tester = event_time_tester()
    tester.testInPandas(KEY, frame(heartbeats((1, 2), 0, 20000)))
    tester.setWatermark(T0 + 20000)
    out = tester.testInPandas(KEY, frame(heartbeats((3,), 10000, 12000)))
    late = [json.loads(p) for k, p in zip(out["kind"], out["payload"]) if k == "summary"
            and json.loads(p)["kind"] == "late"]
    assert late == [{"cluster_id": "c1", "kind": "late", "key_kind": "brokers", "shard": 0, "events": 1}]
    assert sorted(b.broker_id for b in stored_brokers(tester)) == [1, 2, 3]


def test_dead_letter_rows_pass_through_untouched():
    key = ("", "dead_letter", 1)
    pdf = pack(pa.Table.from_pylist([{
        "cluster_id": "", "kind": "dead_letter", "shard": 1, "event_type": None, "event_ms": None,
        "event_time": None, "dlq_reason": "bad_magic_byte", "dlq_detail": "x", "raw_key": b"k",
        "raw_value": b"\x07junk", "kafka_topic": "t", "kafka_partition": 1, "kafka_offset": 42}],
        schema=pa.schema([("cluster_id", pa.string()), ("kind", pa.string()), ("shard", pa.int32()),
                          ("event_type", pa.string()), ("event_ms", pa.int64()),
                          ("event_time", pa.timestamp("us", tz="UTC")), ("dlq_reason", pa.string()),
                          ("dlq_detail", pa.string()), ("raw_key", pa.binary()), ("raw_value", pa.binary()),
                          ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                          ("kafka_offset", pa.int64())]))).to_pandas()
    out = TwsTester(EpochwatchProcessor(RuleSettings(), "None")).testInPandas(key, pdf)
    (row,) = out.to_dict("records")
    assert row["kind"] == "dead_letter" and row["raw_value"] == b"\x07junk"
    assert json.loads(row["payload"])["reason"] == "bad_magic_byte"
    assert json.loads(row["payload"])["kafka_offset"] == 42


def test_invalid_event_becomes_a_dead_letter_not_state():
    tester = event_time_tester()
    bad = heartbeats((1,), 0, 2000)[0] | {"broker_id": -3}
    out = pd.concat([tester.testInPandas(KEY, frame(heartbeats((1, 2), 0, 4000) + [bad])),
                     tester.setWatermark(T0 + 4000)])
    letters = [json.loads(p) for k, p in zip(out["kind"], out["payload"]) if k == "dead_letter"]
    assert letters and "negative" in letters[0]["detail"]
    assert sorted(b.broker_id for b in stored_brokers(tester)) == [1, 2]


@pytest.mark.parametrize("same_generation, brokers_after", [
    (True, [1, 2, 3, 4]),    # the worker's engine is what the store holds: used as it is
    (False, [1, 4]),         # the store moved on (a failed batch, another worker): read from it
])
def test_the_worker_engine_cache_is_used_only_while_the_stored_generation_matches(same_generation, brokers_after):
    """Why: the cache skips reading 100,000 clients' state every batch, but after a failed batch
    or a batch run by another worker the stored state is the truth, never the cached engine."""
    tester = event_time_tester()
    tester.testInPandas(KEY, frame(heartbeats((1, 2, 3), 0, 20000)))
    tester.setWatermark(T0 + 20000)
    horizon, offset, timer, generation = tester.peekValueState("meta", KEY)
    only_broker_1 = [b for b in stored_brokers(tester) if b.broker_id == 1]
    tester.updateValueState("table", KEY, (1, to_json_rows(only_broker_1)))
    tester.updateValueState("meta", KEY, (horizon, offset, timer, generation if same_generation else generation + 1))
    tester.testInPandas(KEY, frame(heartbeats((1, 4), 20000, 22000)))
    tester.setWatermark(T0 + 22000)
    assert sorted(b.broker_id for b in stored_brokers(tester)) == brokers_after


class CountingWrites:
    """A state variable that counts the writes reaching it."""

    def __init__(self, state):
        self.state, self.writes = state, 0

    def get(self):
        return self.state.get()

    def put(self, rows):
        self.writes += 1
        self.state.put(rows)

    def clear(self):
        self.writes += 1
        self.state.clear()


def test_alerts_and_buffer_are_written_only_when_they_change():
    """Why: rewriting an unchanged alert list or clearing an empty buffer costs two round trips to
    the JVM per key and step; with hundreds of state keys that is a large part of a batch."""
    processor = EpochwatchProcessor(RuleSettings(), "EventTime")
    tester = TwsTester(processor, timeMode="EventTime", eventTimeExtractor=pack_time)
    tester.testInPandas(KEY, frame(heartbeats((1, 2), 0, 4000)))
    alerts, buffer = CountingWrites(processor.alerts), CountingWrites(processor.buffer)
    processor.alerts, processor.buffer = alerts, buffer
    tester.setWatermark(T0 + 4000)  # the buffer drains: cleared once; no alert, none written
    assert (alerts.writes, buffer.writes) == (0, 1)
    assert tester.peekListState("buffer", KEY) == []
    tester.setWatermark(T0 + 20000)  # the cluster falls silent: the alert is written, the empty buffer not
    assert buffer.writes == 1 and alerts.writes >= 1
    assert {row[0] for row in tester.peekListState("alerts", KEY)} == {"ClusterSilent"}


def test_a_step_with_nothing_to_report_yields_no_frame():
    """Why: Spark turns every frame a key yields into Arrow on its own, and most of a batch's small
    keys (offset commits going forward, a quiet cluster's shards) have nothing to report."""
    key = ("c1", "commits", 0)
    commit = {"event_type": "offset_commit", "cluster_id": "c1", "event_time": 1000, "group_id": "g",
              "topic": "t", "partition": 0, "offset": 5, "metadata_epoch": 3, "client_id": "app-1"}
    tester = event_time_tester()
    tester.testInPandas(key, frame([commit, dict(commit, offset=6, event_time=2000)], key))
    quiet = tester.setWatermark(T0 + 2000)  # both applied: the group moves forward, nothing to say
    assert quiet.empty and list(quiet.columns) == []  # no frame at all, not an empty one
    assert [(c.group_id, c.offset) for c in stored_value(tester, "commits", key)] == [("g", 6)]
    tester.testInPandas(key, frame([dict(commit, offset=7, event_time=3000, metadata_epoch=2)], key))
    assert alerts(tester.setWatermark(T0 + 3000)) == [("alert", "OffsetCommitEpochRegression", "firing")]


def test_a_task_declares_five_state_variables_whatever_the_kinds_of_its_keys():
    """Why: Spark declares every state variable again in each task and builds its encoders at its
    first read and first write there, 2-11 ms each whatever the value's size (bench/HISTORY.md,
    session 28); a key has one kind, so its table is one variable (``table``) for every kind."""

    class Declarations:
        def __init__(self):
            self.names = []

        def getValueState(self, name, schema):
            self.names.append(name)

        def getListState(self, name, schema):
            self.names.append(name)

    handle = Declarations()
    EpochwatchProcessor(RuleSettings(), "ProcessingTime", hosted=False).init(handle)
    assert sorted(handle.names) == ["alerts", "buffer", "meta", "table", "table_log"]
