"""The cap on clusters per job (streaming.spark.cluster_gate): the source task's gate and the driver's
registry, and routing that refuses a cluster past the cap as a dead letter with its reason."""

from __future__ import annotations

import json

import pyarrow as pa

from streaming.rules.validity import CLUSTER_CAP
from streaming.spark.cluster_gate import ClusterGate, ClusterRegistry, read_admitted
from streaming.spark.replay import rows_to_batch
from streaming.spark.routing import route_batch
from streaming.spark.validity import Limits
from tests.support.builders import hb

T0 = 1_700_000_000_000


def beats(*clusters: str, t0: int = T0) -> list[dict]:
    out = []
    for i, cluster in enumerate(clusters):
        ev = hb(t0 + i, 1)
        ev["cluster_id"] = cluster
        out.append(ev)
    return out


def routed(events: list[dict], gate: ClusterGate | None, now: int = T0) -> list[dict]:
    table = pa.Table.from_batches([rows_to_batch(events)])
    return route_batch(table, client_shards=4, limits=Limits(), now_ms=now, gate=gate).to_pylist()


def test_a_task_admits_new_clusters_while_the_cap_has_room_and_refuses_the_rest():
    gate = ClusterGate(3, {"a"})
    rows = routed(beats("a", "b", "c", "d", "b", "d"), gate)
    assert [(r["cluster_id"], r["kind"]) for r in rows if r["kind"] != "dead_letter"] == [
        ("a", "brokers"), ("b", "brokers"), ("c", "brokers"), ("b", "brokers")]
    dead = [r for r in rows if r["kind"] == "dead_letter"]
    assert [(r["cluster_id"], r["dlq_reason"]) for r in dead] == [("d", CLUSTER_CAP)] * 2
    assert "rules.state.max.clusters" in dead[0]["dlq_detail"]
    # the task remembers what it admitted: its next batch refuses "d" again and keeps "c"
    later = routed(beats("c", "d"), gate)
    assert [(r["cluster_id"], r["kind"]) for r in later] == [("c", "brokers"), ("d", "dead_letter")]


def test_an_event_refused_for_another_reason_takes_no_place():
    gate = ClusterGate(1, set())
    forged = beats("forged", t0=T0 + 10 * 86_400_000)  # ten days ahead of the clock
    rows = routed(forged + beats("real"), gate)
    assert sorted((r["cluster_id"], r["dlq_reason"] or "") for r in rows) == [
        ("forged", "future_event_time"), ("real", "")]


def test_the_registry_admits_up_to_the_cap_forgets_idle_clusters_and_survives_a_restart(tmp_path):
    path = tmp_path / "checkpoint" / "epochwatch-clusters.json"
    now = [1000.0]
    registry = ClusterRegistry(path, max_clusters=2, idle_ms=60_000, clock=lambda: now[0])
    assert read_admitted(path) is None
    registry.observe(["a", "b", "c"])
    assert read_admitted(path) == {"a", "b"}
    now[0] += 50
    registry.observe(["b"])
    now[0] += 20  # "a" unseen for 70 s: idle, its state expired, its place free
    registry.observe(["c"])
    assert read_admitted(path) == {"b", "c"}
    restarted = ClusterRegistry(path, max_clusters=2, idle_ms=60_000, clock=lambda: now[0])
    restarted.observe(["a"])
    assert read_admitted(path) == {"b", "c"}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_a_file_that_is_not_the_registry_is_reported_and_ignored(tmp_path, caplog):
    path = tmp_path / "clusters.json"
    path.write_text(json.dumps(["a"]))
    assert read_admitted(path) is None
    assert "not a cluster registry" in caplog.text


def test_the_planner_hands_every_task_the_clusters_the_job_holds(tmp_path):
    from streaming.spark.source_packs import SourcePacker
    from udfs.kafka_options import parse_source_options
    from udfs.kafka_source import KafkaRangePartition, KafkaStreamReader

    path = tmp_path / "clusters.json"
    ClusterRegistry(path, max_clusters=10, idle_ms=60_000).observe(["a", "b", "c"])
    options = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "ev", "decode": "avro",
                                    "output": "packs", "packs.maxClusters": "10", "packs.clusterRegistry": str(path)})
    planned = [KafkaRangePartition([]) for _ in range(3)]
    KafkaStreamReader(options, SourcePacker())._hand_out_clusters(planned)
    assert [p.admitted_clusters for p in planned] == [{"a", "b", "c"}] * 3


def test_one_registry_listener_per_session_feeds_each_query_its_own_registry(tmp_path):
    """Why: a listener per query piled up in a long-lived session (the test suite's): each is
    called for every query's progress, and Spark's listener thread ended up busy for minutes."""
    from types import SimpleNamespace

    from streaming.spark.listeners import ClusterRegistryListener

    added = []
    spark = SimpleNamespace(streams=SimpleNamespace(addListener=added.append))
    first, second = ClusterRegistryListener.of(spark), ClusterRegistryListener.of(spark)
    assert first is second and added == [first]
    first.registries["q1"] = ClusterRegistry(tmp_path / "q1.json", max_clusters=5, idle_ms=60_000)
    progress = {"name": "q1", "observedMetrics": {"epochwatch_input": {"records": 3, "clusters": ["a", ""]}}}
    first.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))
    first.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps({**progress, "name": "q2"}))))
    assert read_admitted(tmp_path / "q1.json") == {"a"} and not (tmp_path / "q2.json").exists()
