"""A key's JSON table (brokers, clients, nodes, consumer-group partitions), without Spark: its
format, and for the kinds that change a little at a time, a base value and a log of what changed
since.

The format, ``{"fields": [...], "rows": [[...], ...]}``: the field names once instead of in every
record, a third of the bytes an array of objects takes, and faster to read back. A brokers table
also holds its cluster's ClusterRecord, by field name, as ``cluster``.

The log, why: a client shard holds thousands of clients (a commit shard, its groups' partitions) and
a live micro-batch touches a few percent of them, yet writing the whole table back took a third of a
stateful task (the state API and RocksDB's changelog carry every byte of it; figures:
bench/HISTORY.md, Live latency and silence, sessions 21 and 43). So a step appends only the rows it
changed (and the ids of the entities it dropped) to the log (the ``table_log`` state variable; the
base is ``table``), and rewrites the base, emptying the log, once the log has grown as large as the
table (times 1 to 2, set per key: ``rewrite_spread``): the bytes written per step are two to three
times the changes, a rebuild reads at most three times the table.

An entry is a JSON table like the base (``{"fields", "rows"}``) plus ``removed`` (entity ids; an
array of them for an entity named by several) and ``seq`` (its place in the log, from 1), so Spark's
state reader can merge them too (streaming.spark.state_schema.table_rows).
"""

from __future__ import annotations

import operator
import zlib
from dataclasses import dataclass

import orjson

from streaming.engine.keys import KeyKind
from streaming.rules import records


@dataclass(frozen=True)
class TableWrite:
    """What a step writes of its table. ``base``: the whole table's (count, rows) value, or None
    to clear it; only when ``rewrite``. ``append``: the log entry to add. ``clear_log``: empty the
    log (after a rewrite, when it held entries). ``logged``: rows in the log after this write."""

    rewrite: bool
    base: tuple[int, str] | None
    append: tuple[int, str] | None
    clear_log: bool
    logged: int


_GOLDEN = (5 ** 0.5 - 1) / 2


def rewrite_spread(cluster_id: str, shard: int) -> float:
    """A key's share in [0, 1) of extra log before its rewrite: shards that change at the same
    pace (a fleet's clients hash evenly) would otherwise all rewrite in the same micro-batch,
    a batch writing every client whole, every ~15 batches. A cluster's shards step through
    [0, 1) by the golden ratio (well apart for any shard count: at most three gap sizes) from
    a start set by the cluster's id; stable across processes and restarts."""
    return (zlib.crc32(cluster_id.encode()) / 2**32 + shard * _GOLDEN) % 1.0


def plan(cls, before: dict | None, after: dict, touched, logged: int, spread: float = 0.0) -> TableWrite:
    """The write that takes the stored table (``before``: each entity's row values as stored, by
    id; None: nothing stored) to ``after``. ``touched``: the ids the rules changed (a superset
    is fine, a missing one is lost); ``logged``: rows already in the log since the base;
    ``spread``: the log may hold (1 + spread) times the table's rows before the rewrite."""
    if before is None:
        return _rewrite(cls, after, logged)
    # the set comparison first: a client shard's step drops none of its tens of thousands mostly
    removed = [] if before.keys() <= after.keys() else [key for key in before if key not in after]
    kept = list(before) if not removed else [key for key in before if key in after]
    keys = list(after)
    if keys[:len(kept)] != kept:  # an entity dropped and back within the step went last
        return _rewrite(cls, after, logged)
    # Every touched entity, not only those whose values differ: a value can be a list the rules
    # changed in place, the same object in ``before``. New ones last, in the table's order, as
    # replay puts them.
    changed = [key for key in touched if key in before and key in after] + keys[len(kept):]
    return plan_changes(cls, after, changed, removed, logged, spread)


def plan_changes(cls, after: dict, changed: list, removed: list, logged: int, spread: float = 0.0) -> TableWrite:
    """``plan`` once the changes are known: ``changed``, the ids to write again (the new ones last,
    in the table's order) and ``removed``, the ids dropped; the table's other entities are where
    the stored table has them."""
    size = len(changed) + len(removed)
    if size == 0:
        return TableWrite(False, None, None, False, logged)
    if logged + size >= len(after) * (1 + spread):
        return _rewrite(cls, after, logged)
    seq = logged + size
    text = orjson.dumps({"fields": records.field_names(cls), "rows": [after[key] for key in changed],
                         "removed": removed, "seq": seq}).decode()
    return TableWrite(False, None, (size, text), False, seq)


def _rewrite(cls, after: dict, logged: int) -> TableWrite:
    base = (len(after), json_table(cls, list(after.values()))) if after else None
    return TableWrite(True, base, None, logged > 0, 0)


def replay(kind: KeyKind, base: tuple[int, str] | None, log: list[tuple[int, str]]) -> tuple[list, int]:
    """The table a base and its log hold, in the order a live table would have (an entity keeps
    its place when changed, a new or returning one goes last), and the rows in the log."""
    ident = kind.entity_id
    table = {ident(rec): rec for rec in (from_json_rows(kind.record, base[1]) if base else [])}
    logged = 0
    for count, text in log:
        doc = orjson.loads(text)
        for key in doc["removed"]:
            table.pop(tuple(key) if isinstance(key, list) else key, None)
        for rec in from_json_rows(kind.record, text):
            table[ident(rec)] = rec
        logged += count
    return list(table.values()), logged


def to_json_rows(rows: list, cls=None, cluster=None) -> str:
    """A table of records (all of ``cls``, by default the first one's class) as its JSON value;
    ``cluster``: a brokers table's ClusterRecord."""
    cls = cls or type(rows[0])
    values = operator.attrgetter(*records.field_names(cls))
    return json_table(cls, [values(r) for r in rows], cluster)


def json_table(cls, row_values: list, cluster=None) -> str:
    doc = {"fields": records.field_names(cls), "rows": row_values}
    if cluster is not None:
        doc["cluster"] = dict(zip(records.field_names(type(cluster)), records.to_row(cluster)))
    return orjson.dumps(doc).decode()


def read_table(cls, text: str) -> tuple[list, records.ClusterRecord | None]:
    """A table's records and, for a brokers table, its ClusterRecord (None if it holds none), from
    one parse of its JSON value."""
    doc = orjson.loads(text)
    stored = doc.get("cluster") if isinstance(doc, dict) else None
    names = records.field_names(records.ClusterRecord)
    cluster = None if stored is None else records.ClusterRecord(**{k: v for k, v in stored.items() if k in names})
    return _records(cls, doc), cluster


def from_json_rows(cls, text: str) -> list:
    return _records(cls, orjson.loads(text))


def _records(cls, doc) -> list:
    if isinstance(doc, list):  # written by an older version: an array of objects
        return [cls(**row) for row in doc]
    names = records.field_names(cls)
    if tuple(doc["fields"]) == names:
        return [cls(*row) for row in doc["rows"]]
    # a field added or removed since it was written: match by name, defaults for the rest
    return [cls(**{k: v for k, v in zip(doc["fields"], row) if k in names}) for row in doc["rows"]]
