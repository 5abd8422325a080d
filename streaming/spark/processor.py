"""EpochwatchProcessor: the transformWithState adapter over streaming.engine.key_engine.

It declares every state variable once in ``init``, reads a key's state, has streaming.spark.key_steps
step it (in the state partition's engine host, streaming.spark.engine_host, or in this Python worker),
writes back what changed and registers one timer for the next deadline. No rule logic lives
here. Grouping key: (cluster_id, kind, shard) -- see streaming.spark.routing.

Input rows are packs of events (streaming.spark.packs), not one row per event, plus clock rows that
only move the watermark.

Time: in EventTime mode (replay, demo) the horizon is the newest event time of the Arrow batches
the key's packs came in minus the allowed lateness (as the single-process detector steps), or the
watermark Spark hands the operator if that is later (timers, quiet keys). Events within the
lateness wait in the key's buffer; older ones still arrive (packs are never dropped as late): the
engine applies them late and reports how many. In ProcessingTime mode (the live job) the horizon
is wall-clock time minus how far this key's events trail the clock: how far its newest events
trailed it when they arrived, or if less, how far the batch's read trails it (the packs' clock)
plus how long the key's events took to reach the events topic (their Kafka timestamps), as a key
that sends little has an old newest event without being behind, or if less, how long after its
newest event time its records were written (a collector's round: the round's length), as the batch
read the topic to its end and the wait for its trigger is no trail. So a cluster that goes silent is
still noticed by a timer, and a backlog after an input outage (the source's broker was
unreachable, the job was down) is applied at its own pace instead of being overtaken by the
clock. In both modes the packs' clock stops at the first unread event of a partition of the
events topic that is behind (udfs.read_progress), so no horizon passes events that wait unread
there; in processing time a key only its timer steps learns that clock from the batch's hold
rows (streaming.spark.hold_keys).
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from streaming.config import RuleSettings
from streaming.engine.keys import CLOCK, DATA_LOSS, DEAD_LETTER, HOLD, KINDS
from streaming.rules import records
from streaming.spark import engine_host
from streaming.spark.json_tables import from_json_rows, to_json_rows
from streaming.spark.key_steps import StepOutput, StepRequest, StoredState, coordinates, event_fields, json_text
from streaming.spark.packs import read_packs, to_dicts
from streaming.spark.state_schema import ALERT_SCHEMA, BUFFER_SCHEMA, JSON_ROWS_SCHEMA, META_SCHEMA, OUTPUT_SCHEMA

OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]
__all__ = ["EpochwatchProcessor", "EpochwatchRowProcessor", "from_json_rows", "to_json_rows"]


class EpochwatchProcessor(StatefulProcessor):
    """``hosted``: step the keys in the state partition's engine host (streaming.spark.engine_host)
    when running in a Spark task; False, or outside a task, in this Python worker."""

    def __init__(self, settings: RuleSettings, time_mode: str, hosted: bool = True):
        self.settings = settings
        self.event_time_mode = time_mode.lower() == "eventtime"
        self.hosted = hosted
        self.query = engine_host.new_token()
        self.hold = None  # (batch time, clock held at a partition that is behind): streaming.spark.hold_keys

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        # Few variables on purpose: Spark declares each again in every task and builds its encoders
        # on its first read and first write in the task, 2-11 ms each (bench/HISTORY.md, session
        # 28); a key has one kind, so one variable holds its table whatever the kind.
        self.meta = handle.getValueState("meta", META_SCHEMA)
        self.alerts = handle.getListState("alerts", ALERT_SCHEMA)
        self.buffer = handle.getListState("buffer", BUFFER_SCHEMA)
        self.table = handle.getValueState("table", JSON_ROWS_SCHEMA)
        # what changed since the table was written whole (streaming.spark.json_tables)
        self.table_log = handle.getListState("table_log", JSON_ROWS_SCHEMA)
        self.steps = engine_host.steps_for_task() if self.hosted else engine_host.IN_PROCESS

    # --- Spark entry points ---------------------------------------------------------------------

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        packs, clocks = [], []
        for pdf in rows:
            packs.extend(pdf["payload"])
            clocks.extend(pdf["clock_ms"].dropna())
        yield from _frames(self._handle(key, packs, timerValues, max(clocks, default=None)))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield from _frames(self._handle(key, [], timerValues, self._held_clock(timerValues)))

    def _held_clock(self, timerValues) -> int | None:
        """The hold of this batch, for a key only its timer steps: Spark hands a task its input
        rows before its timers, so a hold row of the batch has been seen by then. Event time needs
        none: the watermark itself waits for the held clock."""
        if self.event_time_mode or self.hold is None:
            return None
        batch_ms, held_ms = self.hold
        return held_ms if batch_ms == timerValues.getCurrentProcessingTimeInMs() else None

    def _handle(self, key, packs: list[bytes], timerValues, clock_ms: int | None = None) -> list[dict]:
        cluster_id, kind, shard = _grouping_key(key)
        if kind in (CLOCK, DATA_LOSS):
            return []  # only there to move the watermark, or to be counted (streaming.spark.packs)
        if kind == HOLD:
            if clock_ms is not None:
                self.hold = (timerValues.getCurrentProcessingTimeInMs(), int(clock_ms))
            return []
        if kind == DEAD_LETTER:
            return [_dead_letter_row(r) for r in to_dicts(read_packs(*packs))]
        meta = self.meta.get()
        request = StepRequest(self.settings, cluster_id, kind, int(shard), tuple(packs),
                              tuple(meta) if meta is not None else None, self.event_time_mode,
                              timerValues.getCurrentWatermarkInMs(), timerValues.getCurrentProcessingTimeInMs(),
                              None if clock_ms is None else int(clock_ms), self.query)
        out = self.steps.step(request) or self.steps.step(request, self._stored(kind))
        self._write(kind, out, request.meta)
        return out.rows

    def close(self) -> None:
        self.steps.task_done()

    # --- the state API --------------------------------------------------------------------------

    def _stored(self, kind: str) -> StoredState:
        table = self.table.get()
        log = [tuple(row) for row in self.table_log.get()] if KINDS[kind].incremental_json else []
        return StoredState(tuple(table) if table is not None else None, [tuple(row) for row in self.alerts.get()],
                           [chunk for _, chunk in self.buffer.get()], log)

    def _write(self, kind: str, out: StepOutput, meta: tuple | None) -> None:
        if out.table is not None:
            _write_table(self.table, self.table_log, out.table)
        elif out.entities:
            self.table.update(out.entities)
        else:
            self.table.clear()
        if out.alerts is not None:
            _put(self.alerts, out.alerts)
        if out.buffer is not None:
            _put(self.buffer, out.buffer)
        current = meta[2] if meta else records.NO_TIME
        if out.timer_ms != current:
            if current != records.NO_TIME:
                self.handle.deleteTimer(current)
            if out.timer_ms != records.NO_TIME:
                self.handle.registerTimer(out.timer_ms)
        self.meta.update(out.meta)


class EpochwatchRowProcessor(EpochwatchProcessor):
    """The same processor for ``transformWithState`` (Row API): only rows in and out differ."""

    def handleInputRows(self, key, rows, timerValues):
        rows = list(rows)
        clock_ms = max((row.clock_ms for row in rows if row.clock_ms is not None), default=None)
        yield from _rows(self._handle(key, [row.payload for row in rows], timerValues, clock_ms))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield from _rows(self._handle(key, [], timerValues, self._held_clock(timerValues)))


def _rows(dicts: list[dict]):
    from pyspark.sql import Row

    for d in dicts:
        yield Row(**{c: d.get(c) for c in OUTPUT_COLUMNS})


def _grouping_key(key) -> tuple:
    # Spark passes the three grouping columns; TwsTester wraps whatever key it is given in a
    # 1-tuple, so tests hand over the 3-tuple as that single value.
    return key[0] if len(key) == 1 and isinstance(key[0], tuple) else key


def _write_table(base, log, write) -> None:
    if write.append is not None:
        log.appendValue(write.append)
    elif write.rewrite:
        if write.base is not None:
            base.update(write.base)
        else:
            base.clear()
        if write.clear_log:
            log.clear()


def _put(state, rows: list[tuple]) -> None:
    if rows:
        state.put(rows)
    else:
        state.clear()


# --- rows in and out ------------------------------------------------------------------------

def _frames(rows: list[dict]) -> Iterator[pd.DataFrame]:
    # No frame at all for no rows: most small keys' steps output nothing, and Spark converts
    # every frame to Arrow on its own.
    if rows:
        yield pd.DataFrame(rows, columns=OUTPUT_COLUMNS)


def _dead_letter_row(row: dict) -> dict:
    payload = {"reason": row.get("dlq_reason") or "undecodable", "detail": row.get("dlq_detail") or "",
               **coordinates(row)}
    if row.get("dlq_published"):  # the source produced it, bytes and all (udfs.record_batches.as_notices)
        payload["published"] = True
    raw_value = row.get("raw_value")
    if raw_value is None and row.get("event_type"):  # decoded fine, rejected later (e.g. future time)
        raw_value = json_text(event_fields(row)).encode()
    return {"kind": DEAD_LETTER, "cluster_id": row.get("cluster_id") or "", "event_time": row.get("event_time") or 0,
            "payload": json_text(payload), "raw_key": row.get("raw_key"), "raw_value": raw_value}
