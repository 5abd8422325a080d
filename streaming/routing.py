"""Which state key(s) each event goes to: (cluster_id, kind, shard). ``route_batch`` does it for
a whole Arrow batch (columns, on the executors, inside the pack stage: streaming.packs); its pure
twin ``routes`` does it per event for the single-process engine; tests check that they agree.

- brokers (shard 0): heartbeats, metadata updates, and the epoch a broker served to a client
- clients (sharded by client_id): metadata responses / failures / rebootstraps
- nodes (shard 0): REBOOTSTRAP_REQUIRED answers and connection attempts
- commits (sharded by group_id): offset commits
- dead_letter: records the source could not decode, and events from the far future
"""

from __future__ import annotations

import zlib
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming import events

DEAD_LETTER_SHARDS = 4
# What the brokers key reads of a metadata response it gets as a served epoch
# (BrokerFleet.on_served_epoch, engine.invalid_reason, rules.served_runs): its packs carry no more
SERVED_EPOCH_FIELDS = frozenset({"event_type", "cluster_id", "event_time", "client_id", "broker_id",
                                 "metadata_epoch", "error_code"})
# The key each event type belongs to (routes() puts it first). An invalid event is reported
# (dead-lettered) by that key only: the others it feeds skip it, so the dead-letter topic gets it once.
OWNER_KIND = {"broker_heartbeat": "brokers", "metadata_update": "brokers", "metadata_response": "clients",
              "metadata_request_failed": "clients", "client_rebootstrap": "clients",
              "connection_attempt": "nodes", "offset_commit": "commits"}


def shard_of(entity: str, shards: int) -> int:
    """Stable across processes and languages (crc32), unlike Python's hash()."""
    return zlib.crc32(entity.encode()) % shards


# the id a sharded kind spreads its entities by
_SHARDED_BY = {"clients": "client_id", "commits": "group_id"}


def routes(ev: dict, client_shards: int) -> list[tuple[str, int]]:
    """The event's owner key first (OWNER_KIND), then the other keys it feeds."""
    kind = ev["event_type"]
    owner = OWNER_KIND.get(kind)
    if owner is None:
        return []
    entity = _SHARDED_BY.get(owner)
    out = [(owner, shard_of(ev[entity], client_shards) if entity else 0)]
    if kind == "metadata_response":
        if ev.get("error_code", 0) == 0 and ev["metadata_epoch"] >= 0:
            out.append(("brokers", 0))  # the epoch this broker served
        if ev.get("error_code") == events.REBOOTSTRAP_REQUIRED:
            out.append(("nodes", 0))
    return out


_MS = pa.timestamp("ms", tz="UTC")


def route_batch(table: pa.Table, client_shards: int, max_future_ms: int, now_ms: int) -> pa.Table:
    """One row per state key each row of ``table`` feeds, in the input's order within each kind;
    adds kind, shard and event_ms. Dead letters (undecodable records, events more than
    ``max_future_ms`` ahead of ``now_ms`` or before 1970) get a reason and no event_time: a
    year-3000 timestamp must not move the watermark (it stays in event_ms and dlq_detail)."""
    t = table.column("event_type")
    event_ms = pc.cast(table.column("event_time"), _MS, safe=False).cast(pa.int64())
    future = pc.fill_null(pc.greater(event_ms, now_ms + max_future_ms), False)
    # Before 1970: -1 is the rules' NO_TIME, and before 1677 pandas cannot even hold the time.
    too_old = pc.fill_null(pc.less(event_ms, 0), False)
    dead = pc.or_(pc.is_null(t), pc.or_(future, too_old))
    live = pc.invert(dead)
    error = table.column("error_code")
    response = pc.fill_null(pc.equal(t, "metadata_response"), False)
    served = pc.and_(response, pc.fill_null(pc.and_(pc.equal(error, 0),
                                                    pc.greater_equal(table.column("metadata_epoch"), 0)), False))
    masks = {
        "brokers": pc.or_(_is(t, "broker_heartbeat", "metadata_update"), served),
        "clients": _is(t, "metadata_response", "metadata_request_failed", "client_rebootstrap"),
        "nodes": pc.or_(_is(t, "connection_attempt"),
                        pc.and_(response, pc.fill_null(pc.equal(error, events.REBOOTSTRAP_REQUIRED), False))),
        "commits": _is(t, "offset_commit"),
    }
    shard_of_row = {"clients": lambda: _crc_shards(table.column("client_id"), client_shards),
                    "commits": lambda: _crc_shards(table.column("group_id"), client_shards),
                    "dead_letter": lambda: pc.remainder(pc.fill_null(table.column("kafka_partition"), 0),
                                                        DEAD_LETTER_SHARDS).to_numpy(zero_copy_only=False)}
    rows, kinds, shards = [], [], []
    for kind, mask in [*((k, pc.and_(live, m)) for k, m in masks.items()), ("dead_letter", dead)]:
        index = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if not len(index):
            continue
        rows.append(index)
        kinds.append(np.full(len(index), kind, dtype=object))
        shards.append(shard_of_row[kind]()[index] if kind in shard_of_row else np.zeros(len(index), np.int32))
    index = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    routed = table.take(index).append_column("event_ms", event_ms.take(index))
    routed = routed.append_column("kind", pa.array(np.concatenate(kinds) if kinds else [], pa.string()))
    routed = routed.append_column("shard", pa.array(np.concatenate(shards) if shards else [], pa.int32()))
    routed = routed.set_column(routed.schema.get_field_index("cluster_id"), "cluster_id",
                               pc.fill_null(routed.column("cluster_id"), ""))
    return _mark_dead_letters(routed, pc.take(future, index), pc.take(too_old, index), max_future_ms)


def _is(column, *names: str):
    return pc.fill_null(pc.is_in(column, pa.array(names)), False)


def _crc_shards(column, shards: int) -> np.ndarray:
    """Stable shard per row: crc32 of the UTF-8 id (as shard_of), computed once per distinct id."""
    distinct = pc.unique(column)
    codes = np.array([0 if v is None else shard_of(v, shards) for v in distinct.to_pylist()], np.int32)
    return codes[pc.index_in(column, distinct).to_numpy(zero_copy_only=False)]


def _mark_dead_letters(routed: pa.Table, future, too_old, max_future_ms: int) -> pa.Table:
    is_dead = pc.equal(routed.column("kind"), "dead_letter")
    if not pc.any(is_dead).as_py():
        return routed
    reasons, details = routed.column("dlq_reason").to_pylist(), routed.column("dlq_detail").to_pylist()
    decoded = pc.is_valid(routed.column("event_type")).to_pylist()
    for i, (ahead, old) in enumerate(zip(future.to_pylist(), too_old.to_pylist())):
        if decoded[i] and (ahead or old):
            when = _text(routed.column("event_ms")[i].as_py())
            reasons[i] = "future_event_time" if ahead else "event_time_out_of_range"
            details[i] = (f"event_time {when} is more than {max_future_ms} ms ahead of the clock" if ahead
                          else f"event_time {when} is before 1970")
    routed = routed.set_column(routed.schema.get_field_index("dlq_reason"), "dlq_reason", pa.array(reasons, pa.string()))
    routed = routed.set_column(routed.schema.get_field_index("dlq_detail"), "dlq_detail", pa.array(details, pa.string()))
    index = routed.schema.get_field_index("event_time")
    no_time = pa.nulls(routed.num_rows, routed.schema.field(index).type)
    return routed.set_column(index, routed.schema.field(index), pc.if_else(is_dead, no_time, routed.column(index)))


def _text(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
