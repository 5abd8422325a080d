"""One state key's step between the state store's values and the engine, without Spark.

The processor (streaming.spark.processor) reads a key's state through Spark's state API and writes
back what a step returns; everything in between is here: the engines this process keeps, which
events are ready, the engine's step, and the values to store. So the same step runs in the Spark
worker itself or in the partition's engine host (streaming.spark.engine_host), which keeps the engines
when Spark hands the next micro-batch's task to another Python worker.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import random
import time
from collections import Counter
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.engine.keys import DEAD_LETTER, KINDS
from streaming.events import CLUSTER_RESET
from streaming.fastpath import column_passes
from streaming.rules import records, validity
from streaming.rules.lifecycle import AlertTracker
from streaming.spark import json_tables
from streaming.spark.json_tables import to_json_rows
from streaming.spark.packs import from_ipc_chunks, read_packs, ready_and_waiting, to_dicts, to_ipc_chunks

BUFFER_CHUNK = 20_000  # events per buffer row
IDLE_DROP_MS = 300_000  # engines not stepped for this long are forgotten at a task's end
NO_META = (records.NO_TIME, 0, records.NO_TIME, 0)  # horizon, clock offset, timer, generation
# A record is readable a little after its Kafka timestamp (the producer's linger, the broker's
# append): a record stamped just before a batch began can miss it. A processing-time horizon
# trails a key's newest event by at least this (streaming.spark.key_steps._step).
WRITE_TO_READ_MS = 100


@dataclass(frozen=True)
class StepRequest:
    """What a key's step needs besides its stored state. ``meta``: the state's meta row (None for
    a new key); times in ms; ``clock_ms``: the packs' newest event time (streaming.spark.packs), or for
    a key stepped by its timer alone in processing time the hold (streaming.spark.hold_keys)."""

    settings: RuleSettings
    cluster_id: str
    kind: str
    shard: int
    packs: tuple[bytes, ...]
    meta: tuple | None
    event_time_mode: bool
    watermark_ms: int
    processing_ms: int
    clock_ms: int | None = None
    query: str = ""  # the query's engines are apart from another's in the same engine host

    @property
    def cache_key(self) -> tuple:
        return self.query, self.settings, self.cluster_id, self.kind, self.shard


@dataclass(frozen=True)
class StoredState:
    """A key's state values as the state API returns them, read only when no engine is kept."""

    entities: tuple[int, str] | None  # the key's JSON table: its (count, rows) value
    alerts: list[tuple]
    buffer: list[bytes]
    log: list[tuple[int, str]] = ()  # KeyKind.incremental_json: the table's log (streaming.spark.json_tables)


@dataclass(frozen=True)
class StepOutput:
    """What the processor writes back and emits. None: that state value is unchanged."""

    rows: list[dict]
    entities: tuple[int, str] | None  # the key's JSON table: its (count, rows) value, None to clear
    alerts: list[tuple] | None
    buffer: list[tuple[int, bytes]] | None
    timer_ms: int
    meta: tuple
    # KeyKind.incremental_json: how the table is written (json_tables.plan); None: ``entities`` is
    # the whole table, as for the other kinds
    table: json_tables.TableWrite | None = None


@dataclass
class Stored:
    """What the state store holds for a key's alerts and waiting events: an unchanged value is not
    written again (two round trips to the JVM per key and step, mostly clearing empty lists), and
    a kept engine keeps its waiting events as they are."""

    alerts: list[tuple]
    waiting: pa.Table | None  # events past the horizon, in the order they will be applied
    row_values: dict | None = None  # KeyKind.incremental_json: each entity's row in the stored JSON, by id
    logged: int = 0  # KeyKind.incremental_json: rows in the table's log


class EngineCache:
    """The engines this process stored last, by state key.

    Spark reuses its Python workers across micro-batches, so a key that comes back to the same
    process skips rebuilding its state (100,000 clients' JSON every batch). The generation stored
    with the key's state proves the kept engine is exactly what the store holds: a failed batch,
    another process, or a restart from the checkpoint all change it, and the state is read instead.
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._engines: dict[tuple, tuple[int, KeyEngine, Stored, float]] = {}

    def take(self, key: tuple, generation: int) -> tuple[KeyEngine, Stored] | None:
        # removed while in use: a step that fails half-way must not leave a half-updated engine
        cached = self._engines.pop(key, None)
        return cached[1:3] if cached and generation and cached[0] == generation else None

    def keep(self, key: tuple, generation: int, engine: KeyEngine, stored: Stored) -> None:
        self._engines[key] = (generation, engine, stored, self._clock())

    def drop_unused(self, idle_ms: float) -> int:
        """Forget the engines not stepped for ``idle_ms`` (a finished query's, a key gone quiet):
        they are rebuilt from the store if they come back. How many were dropped."""
        oldest = self._clock() - idle_ms / 1000
        unused = [key for key, (*_, used) in self._engines.items() if used < oldest]
        for key in unused:
            del self._engines[key]
        return len(unused)

    def __len__(self) -> int:
        return len(self._engines)


class KeySteps:
    """Steps keys whose engines it keeps in an EngineCache. ``counts``: steps with a kept engine
    (``kept``), with one built from the stored state (``loaded``)."""

    def __init__(self):
        self.engines = EngineCache()
        self.counts = Counter()

    def step(self, request: StepRequest, stored: StoredState | None = None) -> StepOutput | None:
        """None: no engine is kept for the key's stored generation, call again with its ``stored``
        state."""
        meta = request.meta or NO_META
        kept = self.engines.take(request.cache_key, meta[3])
        if kept is None and stored is None:
            return None
        self.counts["kept" if kept else "loaded"] += 1
        engine, last = kept or load(request, stored)
        return _step(request, engine, last, self.engines)

    def task_done(self) -> None:
        self.engines.drop_unused(IDLE_DROP_MS)


def load(request: StepRequest, stored: StoredState) -> tuple[KeyEngine, Stored]:
    engine = KeyEngine.new(request.kind, request.cluster_id, request.shard, request.settings)
    key_kind = KINDS[request.kind]
    name, cls, table, ident = key_kind.name, key_kind.record, engine.table, key_kind.entity_id
    store = getattr(table, name)
    logged, row_values = 0, None
    if key_kind.incremental_json:
        loaded, logged = json_tables.replay(key_kind, stored.entities, list(stored.log))
        values = operator.attrgetter(*records.field_names(cls))
        row_values = {ident(rec): values(rec) for rec in loaded}
    else:
        loaded, cluster = json_tables.read_table(cls, stored.entities[1]) if stored.entities else ([], None)
        if cluster is not None:  # a brokers table's
            table.cluster = cluster
    for rec in loaded:
        store[ident(rec)] = rec
    engine.tracker = AlertTracker.from_rows(request.cluster_id, request.settings, stored.alerts)
    engine.horizon = request.meta[0] if request.meta else records.NO_TIME
    return engine, Stored(stored.alerts, from_ipc_chunks(stored.buffer), row_values, logged)


def _step(request: StepRequest, engine: KeyEngine, stored: Stored, engines: EngineCache) -> StepOutput:
    kind = request.kind
    _, offset, _, _ = request.meta or NO_META
    table = read_packs(*request.packs)
    newest = None
    if table is not None:
        # Only events past the key's horizon say how far its events trail the clock: one from
        # years ago (forged, or a stray late record) would push the key's timers years out, and
        # a cluster going silent after it would never be noticed.
        times = table.column("event_time")
        fresh = pc.greater(times, engine.horizon)
        newest = pc.max(pc.filter(times, fresh)).as_py()
        if newest is not None and request.clock_ms is not None:
            # the clock stops at a partition of the events topic that is behind (udfs.read_progress):
            # this key's events read from the others must not carry its horizon past that partition
            newest = min(newest, request.clock_ms)
    if request.event_time_mode:
        horizon = request.watermark_ms
        if request.clock_ms is not None:
            # without this the whole micro-batch would wait in the buffer for the next one
            horizon = max(horizon, request.clock_ms - request.settings.allowed_lateness_ms)
    else:
        now = request.processing_ms
        if newest is not None:
            # Not capped: after an input outage the backlog trails the clock by the outage,
            # and a horizon at "now" would time out every broker heard from in it.
            offset = max(now - newest, 0)
            sent = _sent_records(table, fresh)
            if sent is not None and request.clock_ms is not None:
                # A key that sends little (a small cluster among big ones) has its newest event
                # older than the packs' clock because it sent nothing newer, not because its
                # events trail: what trails is the read (now - clock) and its own sending.
                sent_lag = max(pc.max(pc.subtract(*sent)).as_py(), 0)
                offset = min(offset, max(now - request.clock_ms, 0) + sent_lag)
            if sent is not None:
                # Nor does the wait for this batch's trigger say it: the batch read every partition
                # to the end it found when it began (one behind holds the clock: udfs.read_progress),
                # so what may still come is what was not written yet (a collector's round is
                # written a round's length after its start) or not yet readable (WRITE_TO_READ_MS).
                written = max(pc.max(sent[0]).as_py() - newest, 0)
                offset = min(offset, max(written, WRITE_TO_READ_MS))
        horizon = now - offset
        if request.clock_ms is not None:
            # the packs' clock, or for a key only its timer steps the clock held at a partition
            # that is behind (streaming.spark.hold_keys): its heartbeats may wait unread there
            horizon = min(horizon, request.clock_ms)
    # The engine gets only what it applies now: the rest waits as Arrow, never as dicts.
    # the passes read the state before the step: a reset (epochwatch reset-cluster) changes it
    plain = request.settings.fast_paths_on and not (_has_reset(table) or _has_reset(stored.waiting))
    skip = functools.partial(column_passes.repeated_serves, engine) if kind == "brokers" and plain else None
    ready, waiting = ready_and_waiting(stored.waiting, table, max(horizon, engine.horizon), skip)
    # None: the engine runs its own pass on the dicts too
    applied = None
    if not plain:
        pass
    elif kind == "brokers" and ready is not None and pc.min(ready.column("event_time")).as_py() >= engine.horizon:
        # No late event: the pass above saw them all (it leaves late serves to the engine's
        # pass, which counts them first). A serve the engine's pass might still find changes
        # nothing whether it is skipped or applied.
        applied = 0
    elif kind == "clients" and ready is not None:
        # the same rule as the engine's pass (late events are no quiet runs): nothing left for it
        ready, applied = column_passes.without_quiet_runs(engine, ready)
    result = engine.step(to_dicts(ready), horizon, applied)
    deadline = result.deadline
    if waiting is not None:  # wake up when the watermark reaches the first waiting event
        first = waiting.column("event_time")[0].as_py()
        deadline = first if deadline is None else min(deadline, first)
    wanted = records.NO_TIME if deadline is None else (
        deadline if request.event_time_mode else deadline + offset)
    if not request.event_time_mode and wanted != records.NO_TIME and wanted <= request.processing_ms:
        # a deadline the hold kept this step from reaching: Spark deletes the timer that fired
        # once its handler returns, so the same time again would leave the key without one
        wanted = request.processing_ms + 1
    key_kind = KINDS[kind]
    name, cls = key_kind.name, key_kind.record
    table_rows = getattr(engine.table, name)
    row_values, write, logged = None, None, 0
    if key_kind.incremental_json:
        row_values, write = _table_write(cls, table_rows, stored, result,
                                         json_tables.rewrite_spread(request.cluster_id, request.shard))
        entities, logged = write.base, write.logged
    else:
        entities = _json_value(cls, list(table_rows.values()), engine.table.cluster if kind == "brokers" else None)
    alerts = engine.tracker.to_rows()
    generation = random.getrandbits(62) + 1
    out = StepOutput(
        rows=_output_rows(request.cluster_id, engine.horizon, result),
        entities=entities,
        alerts=alerts if alerts != stored.alerts else None,
        # bounded chunks: one huge state value would have to fit the JVM heap in one piece
        buffer=(to_ipc_chunks(waiting, BUFFER_CHUNK) if waiting is not None else [])
        if waiting is not None or stored.waiting is not None else None,
        timer_ms=wanted,
        meta=(engine.horizon, offset, wanted, generation),
        table=write)
    engines.keep(request.cache_key, generation, engine, Stored(alerts, waiting, row_values, logged))
    return out


def _sent_records(table: pa.Table, fresh: pa.ChunkedArray) -> tuple[pa.Array, pa.Array] | None:
    """The Kafka timestamps and event times of the key's records past its horizon that carry a
    timestamp (a record without one says nothing of its sending). None without Kafka timestamps
    (events not read from Kafka) or without such records."""
    if "kafka_timestamp" not in table.column_names:
        return None
    stamps = table.column("kafka_timestamp")
    sent = pc.and_(fresh, pc.greater(stamps, 0))
    stamps = pc.filter(stamps, sent)
    return (stamps, pc.filter(table.column("event_time"), sent)) if len(stamps) else None


def _has_reset(table: pa.Table | None) -> bool:
    return table is not None and pc.any(pc.equal(table.column("event_type"), CLUSTER_RESET)).as_py() is True


def _table_write(cls, table: dict, stored: Stored, result, spread: float) -> tuple[dict, json_tables.TableWrite]:
    """Each record's row values as the JSON table will hold them, and the write that takes the
    stored table there (streaming.spark.json_tables)."""
    before, touched = stored.row_values, result.touched
    if before is not None and not result.forgot and len(touched) < len(table) // 2:
        # Nothing forgotten: every stored entity is still in its place and the new ones follow,
        # so only the touched and the new are looked at, not the shard's tens of thousands. The
        # stored values are brought up to date in place: the engine cache took them for this step.
        values = operator.attrgetter(*records.field_names(cls))
        changed = [key for key in touched if key in before]
        changed += itertools.islice(table, len(before), None)
        for key in changed:
            before[key] = values(table[key])
        return before, json_tables.plan_changes(cls, before, changed, [], stored.logged, spread)
    row_values = _row_values(cls, table, before, touched)
    return row_values, json_tables.plan(cls, before, row_values, touched, stored.logged, spread)


def _row_values(cls, table: dict, before: dict | None, touched: set) -> dict:
    """Each record's field values as the JSON table holds them, in the table's order: the previous
    step's for a record not touched since (``before`` None: a new key, all read).
    Serialized in one orjson call: a call per row costs more than reading the rows (figures:
    bench/RESULTS.md, Live detection latency)."""
    values = operator.attrgetter(*records.field_names(cls))
    if before is not None and len(touched) < len(table) // 2:
        # A step touches a few of a shard's tens of thousands of clients: copy the stored values
        # at once and redo the touched ones and the new ones (last in the table, as added).
        # Entities dropped or moved within the step fail the check below: the full pass then.
        rows = dict(before)
        for key in touched:
            if key in rows and key in table:
                rows[key] = values(table[key])
        for key in itertools.islice(table, len(rows), None):
            rows[key] = values(table[key])
        if list(rows) == list(table):
            return rows
    before = before or {}
    return {key: before[key] if key in before and key not in touched else values(r) for key, r in table.items()}


def _json_value(cls, rows: list, cluster=None) -> tuple[int, str] | None:
    """A table's state value: None (cleared) once it holds nothing."""
    return (len(rows), to_json_rows(rows, cls, cluster)) if rows or cluster is not None else None


# --- output rows ----------------------------------------------------------------------------

def json_text(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str)


def _output_rows(cluster_id: str, now: int, result) -> list[dict]:
    rows = [{"kind": "alert", "cluster_id": cluster_id, "event_time": a["event_time"], "payload": json_text(a)}
            for a in result.alerts]
    rows += [{"kind": "transition", "cluster_id": cluster_id, "event_time": t["at_ms"], "payload": json_text(t)}
             for t in result.transitions]
    if result.status:
        rows.append({"kind": "broker_status", "cluster_id": cluster_id, "event_time": now,
                     "payload": orjson.dumps(result.status).decode()})
    rows += [{"kind": "summary", "cluster_id": cluster_id, "event_time": now, "payload": json_text(s)}
             for s in result.summaries]
    refusals = [(validity.INVALID, ev, why) for ev, why in result.invalid]
    refusals += [(validity.JUMP, ev, why) for ev, why in result.refused]
    refusals += [(validity.CAP, ev, why) for ev, why in result.capped]
    for reason, ev, why in refusals:
        rows.append({"kind": DEAD_LETTER, "cluster_id": cluster_id, "event_time": ev["event_time"],
                     "payload": json_text({"reason": reason, "detail": why, **coordinates(ev)}),
                     "raw_value": json_text(event_fields(ev)).encode()})
    return rows


def coordinates(row: dict) -> dict:
    return {k: row.get(k) for k in ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")}


def event_fields(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None and k not in _NOT_EVENT_FIELDS
            and not k.startswith(("kafka_", "dlq_", "raw_"))}


_NOT_EVENT_FIELDS = frozenset({"kind", "shard"})
