"""Which served-epoch events the brokers key can skip without changing anything (pure, numpy).

Most events of a cluster's brokers key are the epochs its brokers serve to clients, and in steady
state a broker serves the same epoch to every client until the next metadata update: a *run* of
identical serves. Inside a run a serve only moves the broker's ``last_served_ms`` on, and that
time is only ever compared against the lag grace (``BrokerFleet._lagging`` and its deadline). So a
serve can be skipped when, for its broker, the events just before and after it in the step are
serves of the same epoch, no update that may raise the cluster's newest epoch lies in between,
and the serves kept around it are less than the grace apart: no condition, deadline or dirty flag
can tell the difference (tests/fastpath/test_served_runs.py compares every output and the final
state with the engine applying every event).

The broker's own heartbeats end its run only while it serves an epoch behind the cluster's
newest: a heartbeat can restart a lagging broker's lag clock or take it out of serving, and
``last_served_ms`` then counts. A broker serving the newest epoch is behind on nothing, so nothing
reads that time (a broker heartbeats every 2 s: ending runs there would keep many serves that
change nothing; figures: bench/RESULTS.md, Head to head).

Kept in each run: its first and last serve, and the first and last serve of every half-grace
bucket of time, so that consecutive kept serves are always less than the grace apart.

One function over columns, so the Spark processor runs it on Arrow before building any dict and
the engine on the dicts of a step (streaming.engine.key_engine, streaming.spark.processor).
"""

from __future__ import annotations

import numpy as np

from streaming.rules.records import NO_TIME
from streaming.rules.validity import invalid_reason

KIND_NAMES = ("broker_heartbeat", "metadata_update", "metadata_response")
OTHER, HEARTBEAT, UPDATE, RESPONSE = range(4)
KIND_CODES = {name: code for code, name in enumerate(KIND_NAMES, start=1)}


def repeated_serves(kind: np.ndarray, broker: np.ndarray, epoch: np.ndarray, error: np.ndarray,
                    time: np.ndarray, controller_epoch: np.ndarray, controller_id: np.ndarray, valid: np.ndarray,
                    newest_epoch: int, controller: int, last_served: dict[int, int],
                    grace_ms: int, max_epoch_jump: int, max_controller_epoch_jump: int) -> np.ndarray:
    """A mask of the events to skip, for events in the order the engine applies them.

    ``kind``: KIND_CODES; ``broker``, ``controller_epoch`` and ``controller_id`` -1, ``epoch`` -2
    and ``error`` 0 where the event has none; ``valid``: the event passes streaming.rules.validity's
    checks (the engine refuses the others: they are never skipped); ``newest_epoch`` and
    ``controller``: the cluster's newest metadata epoch and controller epoch before the step
    (updates above the newest may raise it, and end every run);
    ``last_served``: each broker's ``last_served_ms`` before the step (a serve older than that
    cannot anchor a run). A step with an update the engine refuses as a leap (BrokerFleet.
    implausible; the ``max_*_jump`` limits) skips nothing: the runs below assume it applied."""
    n = len(kind)
    skip = np.zeros(n, dtype=bool)
    half = grace_ms // 2
    if n < 3 or half < 1 or _leaps(kind, epoch, controller_epoch, newest_epoch, controller, max_epoch_jump,
                                   max_controller_epoch_jump):
        return skip
    serve = (kind == RESPONSE) & valid & (epoch >= 0) & (error == 0) & (broker >= 0)
    codes, ids = _broker_codes(broker)
    if last_served:
        known = np.array([last_served.get(b, -1) for b in ids.tolist()], np.int64)[codes]
        serve &= time >= known  # older than the broker's last serve: cannot anchor a run
    heartbeat = (kind == HEARTBEAT) & (broker >= 0)
    update = (kind == UPDATE) & (broker >= 0)  # that broker's applied epoch may change
    segment = np.cumsum((kind == UPDATE) & (epoch > _newest_floor(kind, epoch, controller_epoch, valid,
                                                                  newest_epoch, controller)))
    # within a segment the newest epoch is at most this (updates that would raise it start the next)
    newest = np.maximum.accumulate(np.where(kind == UPDATE, epoch, newest_epoch))
    # a response that is no plain serve (an error, epoch -1, too old) ends the run too: rare, and
    # on_served_epoch still compares such a broker against the newest epoch
    rows = np.flatnonzero(heartbeat | update | ((kind == RESPONSE) & (broker >= 0)))
    if len(rows) < 3:
        return skip
    rows = rows[np.argsort(codes[rows], kind="stable")]  # each broker's events, in step order
    beat = heartbeat[rows]
    beats = np.cumsum(beat)  # differs between two rows of a broker with its heartbeat between
    rows, beats = rows[~beat], beats[~beat]
    b, member = broker[rows], serve[rows]
    behind = epoch[rows] < newest[rows]
    # linked[j]: rows[j-1] and rows[j] are serves of one run
    linked = np.zeros(len(rows) + 1, dtype=bool)
    linked[1:-1] = ((b[1:] == b[:-1]) & member[1:] & member[:-1]
                    & (epoch[rows][1:] == epoch[rows][:-1]) & (segment[rows][1:] == segment[rows][:-1])
                    & ((beats[1:] == beats[:-1]) | ~behind[1:]))
    bucket = time[rows] // half
    same_bucket_before = np.zeros(len(rows), dtype=bool)
    same_bucket_before[1:] = bucket[1:] == bucket[:-1]
    same_bucket_after = np.zeros(len(rows), dtype=bool)
    same_bucket_after[:-1] = bucket[:-1] == bucket[1:]
    inside = linked[:-1] & linked[1:] & same_bucket_before & same_bucket_after
    skip[rows[inside]] = True
    return skip


def _leaps(kind: np.ndarray, epoch: np.ndarray, controller_epoch: np.ndarray, newest_epoch: int, controller: int,
           max_epoch_jump: int, max_controller_epoch_jump: int) -> bool:
    """Whether an update leaps past every epoch before it (the step's and the cluster's) by more
    than the limit, or a heartbeat or update leaps so past every controller epoch: the first such
    event is found exactly (all before it are plausible), which is all that matters here."""
    update = kind == UPDATE
    controlled = update | (kind == HEARTBEAT)
    before = np.maximum(newest_epoch, np.r_[-1, np.maximum.accumulate(np.where(update, epoch, -1))[:-1]])
    if (update & (before >= 0) & (epoch - before > max_epoch_jump)).any():
        return True
    seen = np.r_[-1, np.maximum.accumulate(np.where(controlled, controller_epoch, -1))[:-1]]
    before = np.maximum(controller, seen)
    return bool((controlled & (before >= 0) & (controller_epoch - before > max_controller_epoch_jump)).any())


def _broker_codes(broker: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A code per row that orders as the broker ids do, and the id of each code.

    Broker ids of a cluster span a few thousand values at most: offsets from the smallest fit in
    16 bits, which numpy sorts stably by radix, several times faster than np.unique's or lexsort's
    comparison sorts over the hundreds of thousands of rows of a catch-up batch (figures:
    bench/RESULTS.md, Head to head). Ids spread wider (absurd ones from hostile input) take np.unique."""
    low = int(broker.min(initial=0))
    span = int(broker.max(initial=0)) - low + 1
    if span <= 1 << 16:
        return (broker - low).astype(np.uint16), np.arange(low, low + span)
    ids, codes = np.unique(broker, return_inverse=True)
    return codes, ids


def _newest_floor(kind: np.ndarray, epoch: np.ndarray, controller_epoch: np.ndarray, valid: np.ndarray,
                  newest_epoch: int, controller: int) -> np.ndarray:
    """Per event, an epoch the cluster's newest is certainly at or above just before it: only an
    update above that may raise the newest (and so start a segment).

    The 1,000 brokers of a fleet each apply every new epoch: without this, each of those updates
    would end every broker's run, not only the first one. An update certainly raised the newest
    to its epoch if the engine applies it: valid (streaming.rules.validity) and from a controller
    epoch at least every one seen so far in the step or before it (BrokerFleet.on_metadata_update
    ignores a deposed controller's update, and no broker applied a later controller's)."""
    update = kind == UPDATE
    newest_controller = np.maximum.accumulate(np.maximum(controller_epoch, controller))
    applied = update & valid & (controller_epoch >= newest_controller)
    floor_after = np.maximum.accumulate(np.where(applied, epoch, newest_epoch))
    return np.concatenate(([newest_epoch], floor_after[:-1]))


def without_repeated_serves(fleet, ready: list[dict]) -> list[dict]:
    """A brokers key's step events (in the order the engine applies them) less the serves that
    cannot change anything, judged against the fleet's state before the step."""
    if len(ready) < 3:
        return ready
    skip = fleet_repeated_serves(fleet, **serve_columns(ready))
    return [ev for ev, s in zip(ready, skip.tolist()) if not s] if skip.any() else ready


def fleet_repeated_serves(fleet, **columns) -> np.ndarray:
    """repeated_serves against a BrokerFleet's state before the step (columns: serve_columns, or
    the processor's from Arrow: streaming.fastpath.column_passes)."""
    return repeated_serves(
        **columns, newest_epoch=fleet.cluster.newest_epoch, controller=fleet.cluster.controller_epoch,
        last_served={bid: b.last_served_ms for bid, b in fleet.brokers.items() if b.last_served_ms != NO_TIME},
        grace_ms=fleet.settings.metadata_lag_grace_ms, max_epoch_jump=fleet.settings.max_epoch_jump,
        max_controller_epoch_jump=fleet.settings.max_controller_epoch_jump)


def serve_columns(events: list[dict]) -> dict[str, np.ndarray]:
    """The columns served_runs.repeated_serves reads, from event dicts."""
    n = len(events)
    codes = KIND_CODES

    def ints(name: str, missing: int) -> np.ndarray:
        return np.fromiter((missing if (v := ev.get(name)) is None else v for ev in events), np.int64, n)

    return {"kind": np.fromiter((codes.get(ev["event_type"], OTHER) for ev in events), np.int8, n),
            "broker": ints("broker_id", -1), "epoch": ints("metadata_epoch", -2), "error": ints("error_code", 0),
            "time": ints("event_time", NO_TIME), "controller_epoch": ints("controller_epoch", -1),
            "controller_id": ints("controller_id", -1),
            "valid": np.fromiter((invalid_reason(ev) is None for ev in events), bool, n)}
