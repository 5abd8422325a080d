"""Replay: JSON Lines events in, alert records out, through the same Spark pipeline as the live
job (EventTime mode, so the result depends only on the events, not on timing).

The input is validated line by line (streaming.events); a bad line becomes a dead letter with
its line number, never a silent drop. Events are staged as Parquet chunks with the decoded
columns of the Kafka source, one chunk per micro-batch.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from streaming import events
from streaming.config import Settings
from streaming.sinks.base import Dispatcher, Sink
from streaming.spark.checkpoint import use_checkpoint
from streaming.spark.pipeline import EVENT_TIME, detect
from streaming.spark.refusals import Refusals
from streaming.spark.sessionless_conf import give_sessionless_threads_the_session_conf
from udfs.event_columns import arrow_schema, spark_schema

_TIMESTAMP_COLUMNS = ("event_time", "kafka_timestamp")
# A bad line's text is kept as its dead letter's value up to this many bytes: a file of thousands
# of 300 KB lines must not become gigabytes in one micro-batch (the detail gives the full size).
MAX_BAD_LINE_BYTES = 64 * 1024


@dataclass
class ReplayStats:
    events: int = 0
    bad_lines: int = 0
    batches: int = 0
    late_events: int = 0  # arrived after their key's horizon: applied late, counted
    seconds: float = 0.0
    refused: Counter = field(default_factory=Counter)  # dead letters by reason, bad lines included

    @property
    def records(self) -> int:
        return self.events + self.bad_lines


def rows_to_batch(rows: list[dict]) -> pa.RecordBatch:
    """Arrow batch with the source's decoded schema from event dicts (times in ms)."""
    schema = arrow_schema(True)
    columns = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        if f.name in _TIMESTAMP_COLUMNS:
            values = [None if v is None else v * 1000 for v in values]  # Spark's Arrow timestamps are us
        columns.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# files per staged chunk (= per micro-batch): one for each core of a local session
FILES_PER_CHUNK = max(1, min(8, os.cpu_count() or 1))


class ParquetStager:
    """Writes event dicts as numbered Parquet chunks the file source reads one per micro-batch."""

    def __init__(self, out_dir: Path, chunk_events: int, progress=None):
        self.out_dir, self.chunk_events, self.progress = out_dir, chunk_events, progress
        self.stats = ReplayStats()
        self._chunk: list[dict] = []

    def add(self, row: dict, *, bad: bool = False) -> None:
        if bad:
            self.stats.bad_lines += 1
        else:
            self.stats.events += 1
        self._chunk.append(row)
        if len(self._chunk) >= self.chunk_events:
            self.flush()

    def flush(self) -> None:
        if not self._chunk:
            return
        index = self.stats.batches
        rows = self._chunk
        size = -(-len(rows) // FILES_PER_CHUNK)
        # A chunk is one micro-batch; one file per core lets every core read and route a part
        # (a single file is a single task: the other cores would idle through the batch's first stage).
        for part, start in enumerate(range(0, FILES_PER_CHUNK * size, size)):
            path = self.out_dir / f"chunk-{index:06d}-{part}.parquet"
            pq.write_table(pa.Table.from_batches([rows_to_batch(rows[start:start + size])]), path)
            # the file source orders files by modification time: make it follow the chunk order
            stamp = 1_000_000 + index * FILES_PER_CHUNK + part
            os.utime(path, (stamp, stamp))
        self.stats.batches += 1
        self._chunk = []
        if self.progress:
            self.progress(self.stats)


def stage_events(events: Iterable[dict], out_dir: Path, chunk_events: int, progress=None) -> ReplayStats:
    stager = ParquetStager(out_dir, chunk_events, progress)
    for ev in events:
        stager.add(ev)
    stager.flush()
    return stager.stats


def stage_jsonl(source: IO[str], name: str, out_dir: Path, chunk_events: int, progress=None) -> ReplayStats:
    """Validate and write the events as numbered Parquet chunks; a bad line becomes a dead letter."""
    stager = ParquetStager(out_dir, chunk_events, progress)
    for item in events.read_jsonl(source):
        if isinstance(item, events.JsonLinesError):
            raw = item.raw.encode("utf-8", "surrogatepass")
            detail = item.reason[:1000] + (f" (a line of {len(raw)} bytes: the first {MAX_BAD_LINE_BYTES} kept)"
                                           if len(raw) > MAX_BAD_LINE_BYTES else "")
            stager.add({"dlq_reason": item.code, "dlq_detail": detail, "kafka_topic": name,
                        "kafka_offset": item.line_no, "raw_value": raw[:MAX_BAD_LINE_BYTES]}, bad=True)
        else:
            stager.add(item)
    stager.flush()
    return stager.stats


def run_staged(spark, settings: Settings, staged: Path, sinks: list[Sink], checkpoint: str, api: str = "pandas"):
    """The detection query over staged chunks (EventTime, availableNow); returns the finished query."""
    stream = spark.readStream.schema(spark_schema(True)).option("maxFilesPerTrigger", FILES_PER_CHUNK).parquet(str(staged))
    dispatcher = Dispatcher(sinks)
    use_checkpoint(spark, checkpoint, settings.rules.client_shards)
    query = (detect(stream, settings.rules, EVENT_TIME, api=api).writeStream
             .foreachBatch(dispatcher)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    give_sessionless_threads_the_session_conf(spark)
    query.awaitTermination()
    dispatcher.close()
    if query.exception():
        raise RuntimeError(f"the replay query failed: {query.exception()}")
    return query


def replay(spark, settings: Settings, source: IO[str], name: str, sinks: list[Sink],
           chunk_events: int = 20_000, checkpoint: str | None = None, progress=None) -> ReplayStats:
    work = Path(tempfile.mkdtemp(prefix="epochwatch-replay-"))
    try:
        staged = work / "events"
        staged.mkdir()
        stats = stage_jsonl(source, name, staged, chunk_events, progress)
        started = time.monotonic()
        late, refusals = _LateCounter(), Refusals()
        run_staged(spark, settings, staged, [*sinks, late, refusals], checkpoint or str(work / "checkpoint"))
        stats.late_events = late.events
        stats.refused = refusals.by_reason
        stats.seconds = time.monotonic() - started
        return stats
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _LateCounter:
    """A sink that only counts the events applied late."""

    def __init__(self):
        self.events = 0

    def write(self, batch) -> None:
        self.events += batch.late_events

    def close(self) -> None:
        pass


def print_progress(stats: ReplayStats, stream=sys.stderr) -> None:
    stream.write(f"\rstaged {stats.events:,} events ({stats.bad_lines} bad lines)")
    stream.flush()
