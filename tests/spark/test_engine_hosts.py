"""In a real query each state partition's keys are stepped in its engine host
(streaming.spark.engine_host): built once from the store, then kept across micro-batches."""

import io
import json
import os

import pytest

from streaming import config
from streaming.engine.local import detect_all
from streaming.sinks.memory import MemorySink
from streaming.spark.engine_host import local_host_stats
from streaming.spark.pipeline import ENGINE_HOSTS_CONF
from streaming.spark.replay import replay
from streaming.spark.routing import routes
from streaming.tools.simulate import run_scenario
from tests.integration.faults.processes import engine_hosts, process_table

pytestmark = pytest.mark.spark


def test_keys_are_built_once_and_kept_across_micro_batches(spark, tmp_path):
    """Why: without hosts, a micro-batch whose state task ran in the other Python worker rebuilt
    every key of that partition from the store (the slow tail of live latency); with them, a key
    is built from the store only at its first step whichever worker runs each batch."""
    result = run_scenario("zombie_incarnation")
    rules = result.truth.rule_settings()
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    events = result.events
    keys = {(ev["cluster_id"], kind, shard) for ev in events for kind, shard in routes(ev, rules.client_shards)}
    before = _totals(local_host_stats(spark))
    stats = replay(spark, settings, io.StringIO("".join(json.dumps(ev) + "\n" for ev in events)), "scenario",
                   [MemorySink()], chunk_events=150, checkpoint=str(tmp_path / "ckpt"))
    assert stats.batches >= 5
    hosts = local_host_stats(spark)
    after = _totals(hosts)
    assert sorted(hosts) == [0, 1], "one host per state partition"
    assert after["loaded"] - before["loaded"] == len(keys), "each key built from the store once"
    assert after["kept"] - before["kept"] >= len(keys), "and kept in later micro-batches"
    table = process_table()
    starters = {table[host["pid"]][0] for host in hosts.values()}
    assert [table[starter][1][0].split(",")[0] for starter in starters] == ["epochwatch engine host starter"], \
        "forked by the worker daemon's starter, not started as new interpreters"
    assert {host["pid"] for host in hosts.values()} <= set(engine_hosts(os.getpid())), "found as fault tests find them"


def test_with_engine_hosts_off_the_python_workers_step_the_keys(spark, tmp_path):
    """Why: spark.epochwatch.engineHosts=false is the way back to stepping in Spark's workers (a
    platform that forbids extra processes); no host may be asked then, and alerts still come."""
    result = run_scenario("zombie_incarnation")
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=result.truth.rule_settings(), sinks=settings.sinks)
    before = _totals(local_host_stats(spark))
    sink = MemorySink()
    spark.conf.set(ENGINE_HOSTS_CONF, "false")
    try:
        replay(spark, settings, io.StringIO("".join(json.dumps(ev) + "\n" for ev in result.events)), "scenario",
               [sink], chunk_events=400, checkpoint=str(tmp_path / "ckpt"))
    finally:
        spark.conf.unset(ENGINE_HOSTS_CONF)
    assert _totals(local_host_stats(spark)) == before
    # the same alerts as with hosts (test_replay.py holds the hosted query to these)
    got = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"]) for a in sink.all("alerts"))
    want = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"])
                  for a in detect_all(result.events, result.truth.rule_settings(), batch=400))
    assert any(a[0] == "BrokerIncarnationRegression" for a in got) and got == want


def _totals(hosts: dict) -> dict:
    return {name: sum(h.get(name, 0) for h in hosts.values()) for name in ("loaded", "kept")}
