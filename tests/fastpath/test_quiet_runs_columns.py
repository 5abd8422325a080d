"""The processor applies the clients' quiet runs from Arrow columns before it builds any dict
(streaming.fastpath.quiet_responses). That early pass must read the same columns the engine's own
pass reads from dicts, and a clients key must emit and store exactly what it does applying every
event one by one."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.fastpath import column_passes
from streaming.fastpath.quiet_responses import response_columns
from streaming.spark.packs import read_packs, ready_and_waiting, to_dicts
from streaming.spark.routing import shard_of
from streaming.tools.simulate import ClusterShape, run_scenario
from tests.support.builders import failed, rebootstrap, response
from tests.support.key_feed import packed, run_key

SHARDS = 16


def _named(columns: dict, client_ids: list, cluster_ids: list) -> dict:
    """Columns with the codes replaced by what they stand for (each side numbers its own)."""
    out = {k: v.tolist() for k, v in columns.items()}
    out["client"] = [client_ids[c] if c >= 0 else None for c in out["client"]]
    out["cluster"] = [cluster_ids[c] if c >= 0 else None for c in out["cluster"]]
    return out


def test_arrow_and_dict_columns_agree():
    """Why: the early pass on Arrow and the engine's pass on dicts must see the same events, or
    the early one could apply a run the engine would have applied one by one. Responses with and
    without a cluster id, an error, an empty client id, failures, rebootstraps, and two packs
    that kept different columns."""
    first = [response(10, "a", 1, 7), response(20, "b", 2, 7, cluster=None), response(30, "", 1, 7),
             response(40, "a", 1, 7, error=129, brokers=0)]
    second = [failed(50, "a"), rebootstrap(60, "b", after="kc-2")]
    key = ("c1", "clients", 0)
    table = read_packs(*packed(first, key), *packed(second, key))
    from_arrow = _named(*column_passes.response_columns(table))
    from_dicts = _named(*response_columns(to_dicts(table)))
    assert from_arrow.keys() == from_dicts.keys()
    for name in from_dicts:
        assert from_arrow[name] == from_dicts[name], name


def _run(events: list[dict], key: tuple, batch: int, quiet: bool, rules: RuleSettings) -> list:
    return run_key(events, key, batch, rules, quiet, ("clients",))


@pytest.mark.parametrize("name", ["wrong_cluster_rebootstrap", "proxy_rebootstrap_required", "partitioned_broker",
                                  "metadata_epoch_regression"])
def test_a_clients_key_emits_the_same_with_and_without_the_pass(name):
    result = run_scenario(name, shape=ClusterShape(clients=1500))
    cluster, rules = result.truth.cluster_id, result.truth.rule_settings()
    events = [ev for ev in result.events if ev["cluster_id"] == cluster]
    # out of order within the allowed lateness, and some beyond it (applied late)
    rng = np.random.default_rng(11)
    shifted = [{**ev, "event_time": ev["event_time"] - int(rng.choice([0, 0, 0, 500, 1500, 4000]))} for ev in events]
    # the shard with the most clients that see the incident
    alerting = [ev["client_id"] for ev in events if ev["event_type"] in ("metadata_request_failed", "client_rebootstrap")]
    shard = shard_of(alerting[0], SHARDS) if alerting else 0
    key = (cluster, "clients", shard)
    with_pass = _run(shifted, key, 2000, quiet=True, rules=rules)
    assert with_pass == _run(shifted, key, 2000, quiet=False, rules=rules)
    assert any(r["kind"] == "summary" for r in with_pass[0])


def _one_by_one(waited: list[dict], arrived: list[dict], horizon: int) -> list[int]:
    """Times of the events the early pass leaves for the engine, as the processor calls it: what
    waited and what arrived, split at the horizon (streaming.spark.packs.ready_and_waiting)."""
    engine = KeyEngine.new("clients", "c1", 0, RuleSettings())
    key = ("c1", "clients", 0)
    waiting = read_packs(*packed(waited, key)) if waited else None
    ready, _ = ready_and_waiting(waiting, read_packs(*packed(arrived, key)), horizon)
    rest, applied = column_passes.without_quiet_runs(engine, ready)
    kept = [] if rest is None else rest.column("event_time").to_pylist()
    assert applied + len(kept) == ready.num_rows
    return kept


CLIENTS = ["c16", "c21", "c40"]  # all in shard 0 of 16
QUIET = [response(t, CLIENTS[t // 100 % 3], 1, 10) for t in range(100, 5100, 100)]


def test_the_early_pass_applies_every_quiet_client():
    """Why: the point of the early pass is that no dict is built for a quiet client's events."""
    assert _one_by_one([], QUIET, horizon=10_000) == []


def test_the_early_pass_sees_the_waiting_events_between_the_new_ones():
    """Why: events that waited are applied in this step too: a waiting failure of client c21 makes
    every c21 event of the step go one by one, in time order."""
    assert _one_by_one([failed(2550, "c21")], QUIET, horizon=10_000) == sorted(
        [2550] + [t for t in range(100, 5100, 100) if t // 100 % 3 == 1])
