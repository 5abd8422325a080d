"""Passes over a pack's Arrow columns that the processor runs before it builds any event dict:
the brokers key leaves out repeated serves (streaming.fastpath.served_runs), the clients keys apply their
quiet runs (streaming.fastpath.quiet_responses). The rules decide; this module only reads the
columns they need, exactly as served_runs.serve_columns and quiet_responses.response_columns
read them from dicts (tests/spark compares the two)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming.engine.key_engine import KeyEngine
from streaming.events import INPUT_EVENT_TYPES
from streaming.fastpath import quiet_responses, served_runs
from streaming.rules import records, validity


def repeated_serves(engine: KeyEngine, table: pa.Table, rows: np.ndarray) -> np.ndarray:
    """Which of ``rows`` (the rows of ``table`` the brokers key applies in this step, in the
    engine's order) are serves that cannot change anything (streaming.fastpath.served_runs), found
    on Arrow columns before any dict is built or any row copied: most of the key's events are
    such serves. For streaming.spark.packs.ready_and_waiting's ``skip``."""
    columns = {name: values[rows] for name, values in serve_columns(table).items()}
    # late events are left to the engine's own pass, which counts them first
    return served_runs.fleet_repeated_serves(engine.table, **columns) & (columns["time"] >= engine.horizon)


def without_quiet_runs(engine: KeyEngine, ready: pa.Table) -> tuple[pa.Table | None, int]:
    """The clients key's ready events less the clients' quiet runs, applied here from Arrow
    columns (streaming.fastpath.quiet_responses), and how many events that applied."""
    done = quiet_responses.apply_quiet_responses(engine.table, *response_columns(ready), floor=engine.horizon)
    if not done.any():
        return ready, 0
    rest = ready.filter(pa.array(~done)) if not done.all() else None
    return rest, int(done.sum())


def response_columns(table: pa.Table) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """quiet_responses.response_columns, from a pack table."""
    client, client_ids = _codes(table, "client_id")
    cluster, cluster_ids = _codes(table, "response_cluster_id")
    columns = {"response": pc.fill_null(pc.equal(table.column("event_type"), "metadata_response"), False).to_numpy(),
               "client": client, "time": _ints(table, "event_time", records.NO_TIME),
               "epoch": _ints(table, "metadata_epoch", -2), "error": _ints(table, "error_code", 0),
               "broker_count": _ints(table, "broker_count", 0), "cluster": cluster, "valid": valid_rows(table)}
    return columns, client_ids, cluster_ids


def serve_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """served_runs.serve_columns, from a pack table (a pack leaves out its all-null columns)."""
    codes = pc.fill_null(pc.add(pc.index_in(table.column("event_type"), value_set=pa.array(served_runs.KIND_NAMES)), 1),
                         served_runs.OTHER)
    return {"kind": codes.to_numpy().astype(np.int8), "broker": _ints(table, "broker_id", -1),
            "epoch": _ints(table, "metadata_epoch", -2), "error": _ints(table, "error_code", 0),
            "time": _ints(table, "event_time", records.NO_TIME),
            "controller_epoch": _ints(table, "controller_epoch", -1), "controller_id": _ints(table, "controller_id", -1),
            "valid": valid_rows(table)}


def valid_rows(table: pa.Table) -> np.ndarray:
    """Per row, whether the event passes streaming.rules.validity's CHECKS (invalid_reason is
    None), read from the columns: the same table, evaluated column by column."""
    kind = pc.fill_null(pc.index_in(table.column("event_type"), value_set=_KIND_NAMES), len(_KIND_NAMES)).to_numpy()
    valid = np.ones(table.num_rows, dtype=bool)
    for check, applies in _CHECKS_AND_KINDS:
        fails = np.zeros(table.num_rows, dtype=bool)
        for name, floor in check.at_least:  # a null is a field the row's kind does not have
            fails |= _ints(table, name, floor) < floor
        for name in check.named:
            fails |= ~_set(table, name)
        valid &= ~(fails & applies[kind]) if applies is not None else ~fails
    return valid


_KIND_NAMES = pa.array(INPUT_EVENT_TYPES)
# each check with, per kind code (and one more for a kind of no event type), whether it applies
_CHECKS_AND_KINDS = [(c, None if c.kinds is None else np.array([k in c.kinds for k in INPUT_EVENT_TYPES] + [False]))
                     for c in validity.CHECKS]


def _ints(table: pa.Table, name: str, missing: int) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, missing, np.int64)
    return pc.fill_null(table.column(name), missing).to_numpy().astype(np.int64, copy=False)


def _set(table: pa.Table, name: str) -> np.ndarray:
    """A non-empty string."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return pc.fill_null(pc.greater(pc.utf8_length(table.column(name)), 0), False).to_numpy()


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list[str]]:
    """A code per row for a string column, -1 where null or empty, and the strings coded."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, np.int64), []
    column = table.column(name)
    distinct = pc.unique(column)
    names = distinct.to_pylist()
    code_of = np.array([i if v else -1 for i, v in enumerate(names)] + [-1], np.int64)
    index = pc.fill_null(pc.index_in(column, value_set=distinct), len(names)).to_numpy()
    return code_of[index], names
