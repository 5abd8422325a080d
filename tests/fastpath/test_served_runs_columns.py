"""The processor skips repeated serves on Arrow columns before it builds dicts
(streaming.fastpath.served_runs). That early pass must read the same columns the engine's own pass
reads from dicts, and a brokers key must emit exactly what it emits applying every event."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.fastpath import column_passes
from streaming.fastpath.served_runs import serve_columns
from streaming.spark.packs import read_packs, ready_and_waiting, to_dicts
from streaming.tools.simulate import ClusterShape, run_scenario
from tests.support.builders import hb, response, update
from tests.support.key_feed import packed, run_key


def test_arrow_and_dict_columns_agree():
    """Why: the early pass on Arrow and the engine's pass on dicts must see the same events, or
    the early one could skip a serve the engine would have kept. Mixed event types, errors,
    epoch -1, empty and missing client ids, and two packs that kept different columns."""
    first = [hb(10, 1), update(20, 2, 7), response(30, "a", 1, 7), response(40, "a", 1, -1),
             response(50, "", 2, 7, error=129)]
    second = [hb(60, 2, current="INACTIVE")]
    payloads = packed(first, ("c1", "brokers", 0)) + packed(second, ("c1", "brokers", 0))
    table = read_packs(*payloads)
    from_arrow = column_passes.serve_columns(table)
    from_dicts = serve_columns(to_dicts(table))
    assert from_arrow.keys() == from_dicts.keys()
    for name in from_dicts:
        assert from_arrow[name].tolist() == from_dicts[name].tolist(), name


def _run(events: list[dict], key: tuple, batch: int, skip: bool, rules: RuleSettings) -> list:
    return run_key(events, key, batch, rules, skip, ("brokers", "cluster"))


@pytest.mark.parametrize("name", ["partitioned_broker", "rolling_restart", "zombie_incarnation",
                                  "metadata_epoch_regression"])
def test_a_brokers_key_emits_the_same_with_and_without_skipping(name):
    # 1,500 clients: long runs of serves per broker, as in a real fleet
    result = run_scenario(name, shape=ClusterShape(clients=1500))
    cluster, rules = result.truth.cluster_id, result.truth.rule_settings()
    events = [ev for ev in result.events if ev["cluster_id"] == cluster]
    # out of order within the allowed lateness, and some beyond it (applied late)
    rng = np.random.default_rng(7)
    shifted = [{**ev, "event_time": ev["event_time"] - int(rng.choice([0, 0, 0, 500, 1500, 4000]))} for ev in events]
    key = (cluster, "brokers", 0)
    with_skip = _run(shifted, key, 2000, skip=True, rules=rules)
    assert with_skip == _run(shifted, key, 2000, skip=False, rules=rules)
    assert any(r["kind"] == "alert" for r in with_skip[0]) or name == "rolling_restart"


def _kept_times(waited: list[dict], arrived: list[dict], horizon: int) -> list[int]:
    """Times of the serves the early pass leaves for the engine, as the processor calls it: what
    waited and what arrived, split at the horizon (streaming.spark.packs.ready_and_waiting)."""
    engine = KeyEngine.new("brokers", "c1", 0, RuleSettings())
    engine.step([hb(0, 1), update(10, 1, 10)], 10)
    key = ("c1", "brokers", 0)
    waiting = read_packs(*packed(waited, key)) if waited else None
    skip = functools.partial(column_passes.repeated_serves, engine)
    kept, _ = ready_and_waiting(waiting, read_packs(*packed(arrived, key)), horizon, skip)
    return [t for t, kind in zip(kept.column("event_time").to_pylist(), kept.column("event_type").to_pylist())
            if kind == "metadata_response"]


SERVES = [response(t, f"c{t}", 1, 10) for t in range(100, 5100, 100)]


def test_the_early_pass_skips_most_of_a_run():
    """Why: the point of the early pass is that the dicts are never built for repeated serves."""
    assert _kept_times([], SERVES, horizon=10_000) == [100, 5000]


def test_the_early_pass_sees_the_waiting_events_between_the_new_ones():
    """Why: events that waited are applied in this step too, in time order among the new ones: a
    waiting metadata update of the broker inside a run of new serves ends that run."""
    assert _kept_times([update(2550, 1, 10)], SERVES, horizon=10_000) == [100, 2500, 2600, 5000]


def test_the_early_pass_stops_at_the_horizon():
    """Why: serves past the horizon wait and are not applied in this step, so they cannot close a
    run of this step: the last serve before the horizon is kept, and the rest are not in ready."""
    assert _kept_times([], SERVES, horizon=2000) == [100, 2000]
