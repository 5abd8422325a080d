"""Events travel to the stateful operator in packs: one row per state key (cluster, kind, shard)
per Arrow batch, carrying that key's events as Arrow IPC bytes.

Why: Spark hands a Python stateful operator its input row by row through the JVM, and that path
alone is slower than the rules themselves (figures: bench/RESULTS.md, Stateful stage throughput). A
pack pays that cost once for up to a whole Arrow batch of events; the events themselves move as
Arrow columns (C++), and the processor builds dicts only for the events it applies.

Packs carry no event time, so Spark never drops one as late: the watermark moves on one *clock*
row per Arrow batch (kind ``clock``, the batch's newest event time, no events; its ``events``
counts the batch's records), the same watermark
as with one row per event. Every pack also carries that newest time (``clock_ms``): in event-time
mode a key applies its events up to it minus the allowed lateness in the same micro-batch, as the
single-process detector does, instead of holding the whole batch until the next watermark. Every
event reaches the engine; one older than its key's horizon is applied late and counted (``late``
summaries -> epochwatch_late_events_total), never dropped. A dead letter's time (maybe the year
3000) does not count for the clock, and the clock stops at the first unread event of a partition
of the events topic that is behind (udfs.read_progress).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from streaming.engine.keys import CLOCK, DATA_LOSS, HOLD
from streaming.spark.cluster_gate import ClusterGate
from streaming.spark.routing import SERVED_EPOCH_FIELDS, route_batch
from streaming.spark.validity import Limits

KEY_COLUMNS = ("cluster_id", "kind", "shard")
# The records read per micro-batch, summed from the clock rows (streaming.spark.pipeline.detect_packs)
# into the progress's observedMetrics: Spark's numInputRows counts packs (streaming.sinks.metrics.input_records).
INPUT_METRIC = "epochwatch_input"
PACK_SCHEMA = StructType([
    StructField("cluster_id", StringType()),
    StructField("kind", StringType()),
    StructField("shard", IntegerType()),
    StructField("event_time", TimestampType()),   # clock rows only: the batch's newest event
    StructField("events", LongType()),
    StructField("payload", BinaryType()),         # Arrow IPC stream of the events
    StructField("clock_ms", LongType()),          # the Arrow batch's newest event time (ms)
])
_TIME = pa.timestamp("us", tz="UTC")
_MS = pa.timestamp("ms", tz="UTC")
_ARROW_SCHEMA = pa.schema([("cluster_id", pa.string()), ("kind", pa.string()), ("shard", pa.int32()),
                          ("event_time", _TIME), ("events", pa.int64()), ("payload", pa.binary()),
                          ("clock_ms", pa.int64())])
# routing columns: the grouping key says them once for the whole pack
_NOT_PACKED = frozenset({"kind", "shard", "event_time", "event_ms"})


# input rows gathered before packing: fewer, fuller packs per key. A backlog's read task holds a
# micro-batch's share of one partition (125,000 records of 1,000,000 over 8 partitions): packed
# at once, its per-pack costs here and in the stateful stage are paid once, not twice (figures:
# bench/HISTORY.md, Live latency and silence, session 24)
PACK_ROWS = 250_000


def route_and_pack(client_shards: int, limits: Limits, pack_rows: int = PACK_ROWS,
                   clock_cap_ms: int | None = None,
                   gate: ClusterGate | None = None) -> Callable[[Iterable], Iterator[pa.RecordBatch]]:
    """The ``DataFrame.mapInArrow`` function: decoded event rows in, one pack per state key out.

    Spark hands the function Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
    (10,000) rows; packing each on its own would give every key a pack per 10,000 rows, most of them
    a handful of events that each cost a pack's fixed price downstream. Up to ``pack_rows`` rows are
    gathered first (the stateful stage waits for the whole stage anyway). ``clock_cap_ms``: the
    clock may not pass it (a partition of the events topic is behind: udfs.read_progress).
    ``gate``: the task's cluster admissions (streaming.spark.cluster_gate)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        gathered: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            if batch.num_rows:
                gathered.append(batch)
                rows += batch.num_rows
            if rows >= pack_rows:
                yield _route_and_pack(gathered, client_shards, limits, clock_cap_ms, gate)
                gathered, rows = [], 0
        if gathered:
            yield _route_and_pack(gathered, client_shards, limits, clock_cap_ms, gate)

    return run


def _route_and_pack(batches: list[pa.RecordBatch], client_shards: int, limits: Limits,
                    clock_cap_ms: int | None, gate: ClusterGate | None) -> pa.RecordBatch:
    records = pa.Table.from_batches(batches)
    routed = route_batch(records, client_shards, limits, int(time.time() * 1000), gate)
    return pack(routed, records.num_rows, clock_cap_ms)


def pack(table: pa.Table, records: int = 0, clock_cap_ms: int | None = None) -> pa.RecordBatch:
    """Group the routed rows of one batch by state key, in order of first appearance. The clock
    row's ``events`` is ``records``, the number of records the batch was routed from (an event
    feeding two keys is in two packs): Spark's input rows count packs, this counts records
    (INPUT_METRIC)."""
    events = _event_columns(table)
    keyed = table.select(list(KEY_COLUMNS)).append_column("_row", pa.array(np.arange(table.num_rows)))
    groups = keyed.group_by(list(KEY_COLUMNS), use_threads=False).aggregate([("_row", "list")])
    # null for dead letters (streaming.spark.routing): a batch of only dead letters has no clock
    clock_ms = pc.max(pc.cast(table.column("event_time"), _MS, safe=False).cast(pa.int64())).as_py()
    if clock_ms is not None and clock_cap_ms is not None:
        clock_ms = min(clock_ms, clock_cap_ms)
    out = {name: [] for name in _ARROW_SCHEMA.names}
    # one take puts every key's rows together (keys in order of first appearance, rows in input
    # order); each pack is then a zero-copy slice of it
    rows = groups.column("_row_list").combine_chunks()
    grouped = events.take(rows.flatten())
    bounds = pc.subtract(rows.offsets, rows.offsets[0]).to_pylist()  # flatten() starts at offsets[0]
    for i, (cluster_id, kind, shard) in enumerate(zip(*(groups.column(c).to_pylist() for c in KEY_COLUMNS))):
        start, end = bounds[i], bounds[i + 1]
        out["cluster_id"].append(cluster_id)
        out["kind"].append(kind)
        out["shard"].append(shard)
        out["event_time"].append(None)
        out["events"].append(end - start)
        events_of_key = grouped.slice(start, end - start)
        if kind == "brokers":
            events_of_key = _served_epochs_narrowed(events_of_key)
        out["payload"].append(_ipc_bytes(_without_empty_columns(events_of_key)))
        out["clock_ms"].append(clock_ms)
    if clock_ms is not None or records:
        clock = ("", CLOCK, 0, None if clock_ms is None else clock_ms * 1000, records, b"", clock_ms)
        for name, value in zip(_ARROW_SCHEMA.names, clock):
            out[name].append(value)
    return pa.RecordBatch.from_pydict(out, schema=_ARROW_SCHEMA)


def loss_row(losses: int) -> pa.RecordBatch:
    """The row that tells the job's metrics of ``losses`` data losses (DATA_LOSS)."""
    values = ("", DATA_LOSS, 0, None, losses, b"", None)
    return pa.RecordBatch.from_pydict({name: [v] for name, v in zip(_ARROW_SCHEMA.names, values)}, schema=_ARROW_SCHEMA)


def hold_rows(clock_cap_ms: int, shards: Iterable[int]) -> pa.RecordBatch:
    """The hold rows (HOLD) for the state partitions ``shards`` reach: ``clock_ms`` is the cap."""
    shards = list(shards)
    n = len(shards)
    return pa.RecordBatch.from_pydict(
        {"cluster_id": [""] * n, "kind": [HOLD] * n, "shard": shards, "event_time": [None] * n,
         "events": [0] * n, "payload": [b""] * n, "clock_ms": [clock_cap_ms] * n}, schema=_ARROW_SCHEMA)


def unpack(*payloads: bytes) -> list[dict]:
    """The events of packs, in order, as dicts: only non-null fields, ``event_time`` in integer
    milliseconds. A key's packs are converted together: the per-column cost is paid once."""
    return to_dicts(read_packs(*payloads))


def read_packs(*payloads: bytes) -> pa.Table | None:
    """A key's packs as one Arrow table, in order (None for no packs)."""
    return _one_table([pa.ipc.open_stream(payload).read_all() for payload in payloads])


def to_dicts(table: pa.Table | None) -> list[dict]:
    """The rows of a pack table as event dicts, without their null fields."""
    if table is None:
        return []
    full, sparse = [], []
    for name, column in zip(table.column_names, table.columns):
        (full if column.null_count == 0 else sparse).append((name, column.to_pylist()))
    names = [name for name, _ in full]
    events = ([dict(zip(names, values)) for values in zip(*(values for _, values in full))] if full
              else [{} for _ in range(table.num_rows)])
    for name, values in sparse:
        for event, value in zip(events, values):
            if value is not None:
                event[name] = value
    return events


def _event_columns(table: pa.Table) -> pa.Table:
    """The fields an event dict carries: times as integer milliseconds."""
    names, arrays = [], []
    for name, column in zip(table.column_names, table.columns):
        if name in _NOT_PACKED:
            continue
        if pa.types.is_timestamp(column.type):
            column = pc.cast(column, _MS, safe=False).cast(pa.int64())
        names.append(name)
        arrays.append(column)
    if "event_ms" in table.column_names:
        names.append("event_time")
        arrays.append(table.column("event_ms"))
    return pa.table(arrays, names=names)


def _served_epochs_narrowed(table: pa.Table) -> pa.Table:
    """A brokers pack's metadata responses with only the fields the brokers key reads of them
    (SERVED_EPOCH_FIELDS): most of a busy key's events are such serves, and the rest (event id,
    Kafka coordinates, what the client got) would be shuffled, stored while waiting and read back
    for nothing. The clients key that owns the response gets all of it."""
    served = pc.fill_null(pc.equal(table.column("event_type"), "metadata_response"), False)
    if not pc.any(served).as_py():
        return table
    columns = [column if name in SERVED_EPOCH_FIELDS else pc.if_else(served, pa.scalar(None, column.type), column)
               for name, column in zip(table.column_names, table.columns)]
    return pa.table(columns, names=table.column_names)


def _without_empty_columns(table: pa.Table) -> pa.Table:
    # a pack usually holds one or two event types: most of the wide row's columns are all null
    keep = [i for i, column in enumerate(table.columns) if column.null_count < len(column)]
    return table.select(keep) if len(keep) < table.num_columns else table


# LZ4 frames: a pack shrinks several times (repeated ids and event types) for a fraction of a
# microsecond per event each way, and every copy of it between Python, the JVM, the shuffle and
# the state store costs less (figures: bench/RESULTS.md, Stateful stage throughput).
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ready_and_waiting(waiting: pa.Table | None, new: pa.Table | None, horizon: int,
                      skip: Callable[[pa.Table, np.ndarray], np.ndarray] | None = None
                      ) -> tuple[pa.Table | None, pa.Table | None]:
    """Split what waited and what arrived into the events at or before ``horizon`` and the rest,
    each in the order the engine applies events: by event time, ties in arrival order (what
    waited first). Both stay Arrow: a key's waiting events are stored as Arrow IPC, and dicts
    are built only for the events applied.

    ``skip(table, rows)``: which of ``rows`` (the ready rows of ``table``, in that order) to leave
    out of ready. Asked before any row is copied, so the rows left out are never copied at all
    (most of a busy brokers key's events: streaming.fastpath.column_passes.repeated_serves)."""
    table = _one_table([t for t in (waiting, new) if t is not None and t.num_rows])
    if table is None:
        return None, None
    times = table.column("event_time").to_numpy()
    order = np.argsort(times, kind="stable")
    cut = int(np.searchsorted(times[order], horizon, side="right"))
    ready, later = order[:cut], order[cut:]
    if skip is not None and len(ready):
        ready = ready[~skip(table, ready)]
    if len(ready) == table.num_rows and (ready[:-1] < ready[1:]).all():
        return table, None  # already in order and all ready: no copy
    return (table.take(ready) if len(ready) else None), (table.take(later) if len(later) else None)


def to_ipc_chunks(table: pa.Table, rows: int) -> list[tuple[int, bytes]]:
    """(row count, Arrow IPC stream) per slice of at most ``rows`` rows."""
    return [(min(rows, table.num_rows - start), _ipc_bytes(table.slice(start, rows)))
            for start in range(0, table.num_rows, rows)]


class PickledStateError(ValueError):
    """State written by a build that pickled the waiting events: no longer read."""


def from_ipc_chunks(chunks: list[bytes]) -> pa.Table | None:
    """The table to_ipc_chunks wrote. Builds before Arrow IPC pickled the event dicts (a pickle
    starts with 0x80, an IPC stream with 0xff); those are refused, never unpickled: unpickling
    runs whatever code the bytes name, so whoever could write the checkpoint could run code in
    the job."""
    tables = []
    for chunk in chunks:
        if chunk[:1] == b"\x80":
            raise PickledStateError(
                "a key's waiting events in the state store were written by an older epochwatch build, as a "
                "pickle; epochwatch no longer unpickles state. Fix: start on a new checkpoint "
                "(docs/operations.md, Upgrades, says what that loses and how to skip nothing)")
        tables.append(pa.ipc.open_stream(chunk).read_all())
    return _one_table(tables)


def _one_table(tables: list[pa.Table]) -> pa.Table | None:
    """Tables of one key as one, columns matched by name (a pack leaves out its all-null ones)."""
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
