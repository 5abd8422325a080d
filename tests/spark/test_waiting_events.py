"""Events past the horizon wait in the key's state as Arrow (streaming.spark.packs.ready_and_waiting),
outside the engine. The processor must still give exactly what the pure engine gives with its
own buffer of dicts, and a buffer written by an older version (pickled dicts) must still load."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.spark import engine_host, key_steps
from streaming.spark.processor import EpochwatchProcessor
from streaming.spark.routing import routes
from streaming.tools.simulate import ClusterShape, run_scenario
from tests.support.builders import heartbeats
from tests.support.key_feed import pack_time, packed

BATCH = 1500


def _feed(tester, key, events, clock_ms, client_shards=16):
    frame = pa.table({"payload": packed(events, key, client_shards)}).to_pandas()
    frame["clock_ms"], frame["event_time"] = clock_ms, None
    return tester.testInPandas(key, frame) if len(frame) else None


def _alerts(frames) -> list[dict]:
    return [json.loads(r["payload"]) for f in frames if f is not None for _, r in f.iterrows() if r["kind"] == "alert"]


@pytest.mark.parametrize("name,kind", [("partitioned_broker", "brokers"), ("zombie_incarnation", "brokers"),
                                       ("wrong_cluster_rebootstrap", "clients")])
def test_the_processor_gives_what_the_engine_gives_with_its_own_buffer(name, kind):
    result = run_scenario(name, shape=ClusterShape(clients=300))
    rules, cluster = result.truth.rule_settings(), result.truth.cluster_id
    rng = np.random.default_rng(3)
    # shuffled within and beyond the allowed lateness: events wait, and some arrive late
    events = [{**ev, "event_time": ev["event_time"] - int(rng.choice([0, 0, 700, 1900, 5000]))}
              for ev in result.events if ev["cluster_id"] == cluster]
    # the key of that kind holding the incident: the brokers key, or the shard of the client
    # that rebootstraps
    marker = next(ev for ev in events if ev["event_type"] == ("client_rebootstrap" if kind == "clients"
                                                                else "broker_heartbeat"))
    key = (cluster, *next(k for k in routes(marker, rules.client_shards) if k[0] == kind))
    mine = [ev for ev in events if key[1:] in routes(ev, rules.client_shards)]

    tester = TwsTester(EpochwatchProcessor(rules, "EventTime"), timeMode="EventTime", eventTimeExtractor=pack_time)
    engine = KeyEngine.new(key[1], cluster, key[2], rules)
    frames, expected, waited = [], [], 0
    for i in range(0, len(events), BATCH):
        clock = max(ev["event_time"] for ev in events[:i + BATCH])
        batch = [ev for ev in events[i:i + BATCH] if key[1:] in routes(ev, rules.client_shards)]
        if not batch:
            continue
        frames.append(_feed(tester, key, batch, clock, rules.client_shards))
        expected += engine.step(batch, clock - rules.allowed_lateness_ms).alerts
        waited += sum(count for count, _ in tester.peekListState("buffer", key))
    end = max(ev["event_time"] for ev in mine) + 3_600_000
    frames.append(tester.setWatermark(end))
    expected += engine.step([], end).alerts
    assert waited > 0, "nothing waited: the test would not exercise the waiting events"
    assert _alerts(frames) == expected and expected


def test_a_buffer_pickled_by_an_older_version_is_refused_with_the_fix(monkeypatch):
    """Why (issue #22): a restart after an upgrade reads the checkpoint the old version wrote,
    whose waiting events are pickled dicts. They used to be unpickled, and unpickling state runs
    whatever code the bytes name: the step refuses them instead, saying what to do."""
    key = ("c1", "brokers", 0)
    rules = RuleSettings()
    tester = TwsTester(EpochwatchProcessor(rules, "EventTime"), timeMode="EventTime", eventTimeExtractor=pack_time)
    first = heartbeats((1, 2, 3), 0, 10_000)
    _feed(tester, key, first, 10_000)
    assert tester.peekListState("buffer", key), "the last 2 s must wait"
    late_ones = heartbeats((4,), 9_000, 10_000)  # a broker only the old buffer knows of
    tester.updateListState("buffer", key, [(len(late_ones), pickle.dumps(late_ones, protocol=5))])
    # restarted: a new Python worker reads the state
    monkeypatch.setattr(engine_host.IN_PROCESS, "engines", key_steps.EngineCache())
    with pytest.raises(Exception, match="no longer unpickles state. Fix: start on a new checkpoint"):
        tester.setWatermark(20_000)
