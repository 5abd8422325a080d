"""Which state key(s) each event goes to: (cluster_id, kind, shard). ``route_batch`` does it for
a whole Arrow batch (columns, on the executors, inside the pack stage: streaming.spark.packs); its pure
twin ``routes`` does it per event for the single-process engine; tests check that they agree.

- brokers (shard 0): heartbeats, metadata updates, and the epoch a broker served to a client
- clients (sharded by client_id): metadata responses / failures / rebootstraps
- nodes (shard 0): REBOOTSTRAP_REQUIRED answers and connection attempts
- commits (sharded by group_id): offset commits
- dead_letter: records the source could not decode, and implausible events (streaming.spark.validity)
- a cluster_reset (epochwatch reset-cluster) goes to every key of its cluster: each forgets it
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming import events
from streaming.engine.keys import DEAD_LETTER, KINDS, OWNER_KIND
from streaming.rules.validity import OUT_OF_RANGE
from streaming.spark.cluster_gate import ClusterGate
from streaming.spark.validity import Limits, refusals
from streaming.times import utc_text

DEAD_LETTER_SHARDS = 4
# What the brokers key reads of a metadata response it gets as a served epoch
# (BrokerFleet.on_served_epoch, rules.validity.invalid_reason, fastpath.served_runs): its packs carry no more
SERVED_EPOCH_FIELDS = frozenset({"event_type", "cluster_id", "event_time", "client_id", "broker_id",
                                 "metadata_epoch", "error_code"})


def shard_of(entity: str, shards: int) -> int:
    """Stable across processes and languages (crc32), unlike Python's hash()."""
    return zlib.crc32(entity.encode()) % shards


# the id a sharded kind spreads its entities by
_SHARDED_BY = {k.name: k.sharded_by for k in KINDS.values() if k.sharded_by}


def routes(ev: dict, client_shards: int) -> list[tuple[str, int]]:
    """The event's owner key first (OWNER_KIND), then the other keys it feeds."""
    kind = ev["event_type"]
    owner = OWNER_KIND.get(kind)
    if owner is None:
        return []
    if kind == events.CLUSTER_RESET:
        return [("brokers", 0), ("nodes", 0), *(("clients", s) for s in range(client_shards)),
                *(("commits", s) for s in range(client_shards))]
    entity = _SHARDED_BY.get(owner)
    out = [(owner, shard_of(ev[entity], client_shards) if entity else 0)]
    if kind == "metadata_response":
        if ev.get("error_code", 0) == 0 and ev["metadata_epoch"] >= 0:
            out.append(("brokers", 0))  # the epoch this broker served
        if ev.get("error_code") == events.REBOOTSTRAP_REQUIRED:
            out.append(("nodes", 0))
    return out


_MS = pa.timestamp("ms", tz="UTC")


def route_batch(table: pa.Table, client_shards: int, limits: Limits, now_ms: int,
                gate: ClusterGate | None = None) -> pa.Table:
    """One row per state key each row of ``table`` feeds, in the input's order within each kind;
    adds kind, shard and event_ms. Dead letters (undecodable records, events before 1970, and
    what streaming.spark.validity refuses against ``limits``, ``now_ms`` being the wall clock, and the
    events of clusters past the job's cap, streaming.spark.cluster_gate) get a
    reason and no event_time: a year-3000 timestamp must not move the watermark (it stays in
    event_ms and dlq_detail)."""
    t = table.column("event_type")
    event_ms = pc.cast(table.column("event_time"), _MS, safe=False).cast(pa.int64())
    # Before 1970: -1 is the rules' NO_TIME, and before 1677 pandas cannot even hold the time.
    too_old = pc.fill_null(pc.less(event_ms, 0), False)
    decoded = pc.is_valid(t).to_numpy(zero_copy_only=False)
    refused = refusals(table, event_ms, decoded, limits, now_ms)
    if gate is not None:  # only events nothing else refuses may take a cluster's place
        unrefused = decoded & ~too_old.to_numpy(zero_copy_only=False)
        unrefused[list(refused)] = False
        refused.update(gate.refusals(table.column("cluster_id"), unrefused))
    implausible = np.zeros(table.num_rows, dtype=bool)
    implausible[list(refused)] = True
    dead = pc.or_(pc.or_(pc.is_null(t), too_old), pa.array(implausible))
    live = pc.invert(dead)
    error = table.column("error_code")
    response = pc.fill_null(pc.equal(t, "metadata_response"), False)
    served = pc.and_(response, pc.fill_null(pc.and_(pc.equal(error, 0),
                                                    pc.greater_equal(table.column("metadata_epoch"), 0)), False))
    reset = _is(t, events.CLUSTER_RESET)
    masks = {
        "brokers": pc.or_(_is(t, "broker_heartbeat", "metadata_update", events.CLUSTER_RESET), served),
        "clients": _is(t, "metadata_response", "metadata_request_failed", "client_rebootstrap"),
        "nodes": pc.or_(_is(t, "connection_attempt", events.CLUSTER_RESET),
                        pc.and_(response, pc.fill_null(pc.equal(error, events.REBOOTSTRAP_REQUIRED), False))),
        "commits": _is(t, "offset_commit"),
    }
    resets = np.flatnonzero(pc.and_(live, reset).to_numpy(zero_copy_only=False))
    shard_of_row = {"clients": lambda: _crc_shards(table.column("client_id"), client_shards),
                    "commits": lambda: _crc_shards(table.column("group_id"), client_shards),
                    DEAD_LETTER: lambda: pc.remainder(pc.fill_null(table.column("kafka_partition"), 0),
                                                        DEAD_LETTER_SHARDS).to_numpy(zero_copy_only=False)}
    rows, kinds, shards = [], [], []
    for kind, mask in [*((k, pc.and_(live, m)) for k, m in masks.items()), (DEAD_LETTER, dead)]:
        index = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        shard = shard_of_row[kind]()[index] if kind in shard_of_row and len(index) else np.zeros(len(index), np.int32)
        if kind in _SHARDED_BY and len(resets):  # a reset reaches every shard
            index, shard = _with_every_shard(index, shard, resets, client_shards)
        if not len(index):
            continue
        rows.append(index)
        kinds.append(np.full(len(index), kind, dtype=object))
        shards.append(shard)
    index = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    routed = table.take(index).append_column("event_ms", event_ms.take(index))
    routed = routed.append_column("kind", pa.array(np.concatenate(kinds) if kinds else [], pa.string()))
    routed = routed.append_column("shard", pa.array(np.concatenate(shards) if shards else [], pa.int32()))
    routed = routed.set_column(routed.schema.get_field_index("cluster_id"), "cluster_id",
                               pc.fill_null(routed.column("cluster_id"), ""))
    return _mark_dead_letters(routed, index, pc.take(too_old, index), refused)


def _with_every_shard(index: np.ndarray, shard: np.ndarray, resets: np.ndarray,
                      shards: int) -> tuple[np.ndarray, np.ndarray]:
    """``index`` with each reset row once per shard, in input order (shards in order on a tie)."""
    index = np.concatenate([index, np.repeat(resets, shards)])
    shard = np.concatenate([shard.astype(np.int32), np.tile(np.arange(shards, dtype=np.int32), len(resets))])
    order = np.argsort(index, kind="stable")
    return index[order], shard[order]


def _is(column, *names: str):
    return pc.fill_null(pc.is_in(column, pa.array(names)), False)


def _crc_shards(column, shards: int) -> np.ndarray:
    """Stable shard per row: crc32 of the UTF-8 id (as shard_of), computed once per distinct id."""
    distinct = pc.unique(column)
    codes = np.array([0 if v is None else shard_of(v, shards) for v in distinct.to_pylist()], np.int32)
    return codes[pc.index_in(column, distinct).to_numpy(zero_copy_only=False)]


def _mark_dead_letters(routed: pa.Table, source_rows: np.ndarray, too_old, refused: dict) -> pa.Table:
    is_dead = pc.equal(routed.column("kind"), DEAD_LETTER)
    if not pc.any(is_dead).as_py():
        return routed
    reasons, details = routed.column("dlq_reason").to_pylist(), routed.column("dlq_detail").to_pylist()
    decoded = pc.is_valid(routed.column("event_type")).to_pylist()
    for i, (row, old) in enumerate(zip(source_rows.tolist(), too_old.to_pylist())):
        if not decoded[i]:
            continue
        if old:
            reasons[i] = OUT_OF_RANGE
            details[i] = f"event_time {utc_text(routed.column('event_ms')[i].as_py())} is before 1970"
        elif row in refused:
            reasons[i], details[i] = refused[row]
    routed = routed.set_column(routed.schema.get_field_index("dlq_reason"), "dlq_reason", pa.array(reasons, pa.string()))
    routed = routed.set_column(routed.schema.get_field_index("dlq_detail"), "dlq_detail", pa.array(details, pa.string()))
    index = routed.schema.get_field_index("event_time")
    no_time = pa.nulls(routed.num_rows, routed.schema.field(index).type)
    return routed.set_column(index, routed.schema.field(index), pc.if_else(is_dead, no_time, routed.column(index)))

