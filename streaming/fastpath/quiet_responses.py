"""Which clients of a clients key only received quiet metadata responses in a step (pure, numpy).

In steady state nearly every event of a clients key is a successful metadata response (error 0,
brokers listed) at an epoch no older than the client's last one: it moves the client's accepted
epoch and its times on, and nothing else. No condition, deadline or dirty flag depends on the
responses in between, so such a run can be applied at once, as its last response
(ClientShard.apply_quiet_runs), provided that

- every event of the client in the step is one (a failure, a rebootstrap or an error in between
  would need the order), none is late (older than the key's horizon), the epochs never go down nor
  leap (rules.event.max.epoch.jump) and every cluster id they carry is the same;
- they span less than the entity expiry, so the engine cannot forget the client in between;
- the client has no failure, stale incident or cluster-id mismatch open (checked against its
  record, with the run's first epoch and cluster id: ClientShard.apply_quiet_runs).

tests/fastpath/test_quiet_responses.py compares every output and the final state with the
engine applying every event. One function over columns: the Spark processor runs it on Arrow
before building any dict, the engine on the dicts of a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming.rules.records import NO_TIME
from streaming.rules.validity import invalid_reason


@dataclass(frozen=True)
class QuietRuns:
    """One entry per client whose step events are all quiet responses (codes as given)."""

    client: np.ndarray
    last_ms: np.ndarray      # the last response's time (events come in time order)
    first_epoch: np.ndarray
    final_epoch: np.ndarray
    cluster: np.ndarray      # the cluster id code the run carries, -1 for none


def quiet_runs(response: np.ndarray, client: np.ndarray, time: np.ndarray, epoch: np.ndarray,
               error: np.ndarray, broker_count: np.ndarray, cluster: np.ndarray, valid: np.ndarray,
               floor: int, expiry_ms: int, max_jump: int) -> QuietRuns:
    """Events in the order the engine applies them. ``response``: a metadata_response;
    ``client``: a code per client id, -1 where empty; ``error`` 0 and ``broker_count`` 0 where
    missing; ``cluster``: a code per response cluster id, -1 where none or empty; ``valid``: the
    event passes streaming.rules.validity's checks (the engine refuses the others); ``floor``:
    the key's horizon before the step (older events are late);
    ``max_jump``: an epoch leaping further past the one before it is left to the engine, which
    refuses it (ClientShard.implausible)."""
    rows = np.flatnonzero(client >= 0)
    rows = rows[np.argsort(client[rows], kind="stable")]  # each client's events, in step order
    if not len(rows):
        return _no_runs()
    c, t, e, r = client[rows], time[rows], epoch[rows], cluster[rows]
    quiet = (response & (error == 0) & (broker_count > 0) & (epoch >= 0) & valid & (time >= floor))[rows]
    same_client = c[1:] == c[:-1]
    starts = np.flatnonzero(np.r_[True, ~same_client])
    ends = np.r_[starts[1:], len(rows)] - 1
    spoiled = ~quiet
    spoiled[1:] |= same_client & ((e[1:] < e[:-1]) | (e[1:] - e[:-1] > max_jump))
    spoiled = np.logical_or.reduceat(spoiled, starts)
    cluster_max = np.maximum.reduceat(r, starts)
    cluster_min = np.minimum.reduceat(np.where(r < 0, np.iinfo(r.dtype).max, r), starts)
    one_cluster = (cluster_max < 0) | (cluster_min == cluster_max)
    first_ms, last_ms = np.minimum.reduceat(t, starts), np.maximum.reduceat(t, starts)
    keep = ~spoiled & one_cluster & (last_ms - first_ms < expiry_ms)
    return QuietRuns(c[starts][keep], last_ms[keep], e[starts][keep], e[ends][keep], cluster_max[keep])


def _no_runs() -> QuietRuns:
    empty = np.zeros(0, np.int64)
    return QuietRuns(empty, empty, empty, empty, empty)


def without_quiet_runs(shard, ready: list[dict], floor: int) -> list[dict]:
    """A clients key's step events (in the order the engine applies them, none applied yet;
    ``floor``: the key's horizon before the step) less the quiet runs, applied here."""
    if not ready:
        return ready
    done = apply_quiet_responses(shard, *response_columns(ready), floor=floor)
    return [ev for ev, d in zip(ready, done.tolist()) if not d] if done.any() else ready


def apply_quiet_responses(shard, columns: dict[str, np.ndarray], client_ids: list[str], cluster_ids: list[str],
                          floor: int) -> np.ndarray:
    """Apply the quiet runs of a step's events to a ClientShard, given as columns (response_columns,
    or the processor's from Arrow: streaming.fastpath.column_passes); a mask of the events applied."""
    runs = quiet_runs(**columns, floor=floor, expiry_ms=shard.settings.entity_expiry_ms,
                      max_jump=shard.settings.max_epoch_jump)
    return np.isin(columns["client"], np.array(shard.apply_quiet_runs(runs, client_ids, cluster_ids), np.int64))


def response_columns(events: list[dict]) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """The columns quiet_responses.quiet_runs reads, from event dicts, with the client ids and
    response cluster ids their codes stand for."""
    n = len(events)
    clients: dict[str, int] = {}
    clusters: dict[str, int] = {}

    def codes(name: str, table: dict[str, int]) -> np.ndarray:
        return np.fromiter((table.setdefault(v, len(table)) if (v := ev.get(name)) else -1 for ev in events),
                           np.int64, n)

    def ints(name: str, missing: int) -> np.ndarray:
        return np.fromiter((missing if (v := ev.get(name)) is None else v for ev in events), np.int64, n)

    columns = {"response": np.fromiter((ev["event_type"] == "metadata_response" for ev in events), bool, n),
               "client": codes("client_id", clients), "time": ints("event_time", NO_TIME),
               "epoch": ints("metadata_epoch", -2), "error": ints("error_code", 0),
               "broker_count": ints("broker_count", 0), "cluster": codes("response_cluster_id", clusters),
               "valid": np.fromiter((invalid_reason(ev) is None for ev in events), bool, n)}
    return columns, list(clients), list(clusters)
