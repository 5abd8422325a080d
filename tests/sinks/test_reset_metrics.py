"""epochwatch reset-cluster drops the cluster's Prometheus series: the keys' steps tell the
metrics sink (a ``reset`` summary), and the sink forgets the cluster's gauges."""

from __future__ import annotations

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from tests.support.builders import CLUSTER, hb, reset, response
from tests.support.metrics import Batches, scrape, series_of

OTHER = "c2"


def on(cluster: str, event: dict) -> dict:
    return {**event, "cluster_id": cluster}


def engines_for(cluster: str) -> list[KeyEngine]:
    return [KeyEngine.new("brokers", cluster, 0, RuleSettings()), KeyEngine.new("clients", cluster, 0, RuleSettings())]


def test_a_reset_drops_the_clusters_series_and_keeps_the_others():
    """Why: reset-cluster is how an operator clears what forged events left (a broker 999 that
    never existed, a forged cluster id); the job forgot the cluster, but its broker gauges,
    client counts and the zeroed firing gauge stayed on /metrics for good, one more series per
    forged id, and dashboards kept showing a broker that is not there."""
    job = Batches(engines_for(CLUSTER) + engines_for(OTHER))
    metrics = job.metrics
    beats = [on(c, hb(t + b, b)) for t in range(0, 20_000, 2000) for b in (1, 2) for c in (CLUSTER, OTHER)]
    clients = [on(c, response(t, "app-1", 1, 10)) for t in range(0, 20_000, 1000) for c in (CLUSTER, OTHER)]
    job.run(beats + clients + [hb(1_000, 999)], 20_000)   # 999 falls silent: it pages
    assert {"epochwatch_broker_state", "epochwatch_cluster_metadata_epoch", "epochwatch_clients_stale_metadata",
            "epochwatch_alerts_firing"} <= series_of(metrics, CLUSTER)
    before_other = {k: v for k, v in scrape(metrics).items() if ("kafka_cluster", OTHER) in k[1]}

    job.run([on(CLUSTER, reset(30_000))], 30_000)

    assert series_of(metrics, CLUSTER) == set(), "every series of the reset cluster is gone"
    after_other = {k: v for k, v in scrape(metrics).items() if ("kafka_cluster", OTHER) in k[1]}
    assert before_other.keys() <= after_other.keys(), "the other cluster keeps its series"
    job.run([], 600_000)
    assert series_of(metrics, CLUSTER) == set(), "later micro-batches bring nothing back"


def test_what_the_cluster_sends_after_the_reset_is_exposed_afresh():
    """Why: a reset is not a ban: brokers heard from after it (in the same micro-batch or later)
    are live and must show, with the state learned since the reset only."""
    job = Batches(engines_for(CLUSTER))
    metrics = job.metrics
    job.run([hb(t + b, b) for t in range(0, 10_000, 2000) for b in (1, 2)], 10_000)
    job.run([reset(11_000), hb(12_000, 1)], 12_000)
    brokers = {dict(labels)["broker_id"] for name, labels in scrape(metrics)
               if name == "epochwatch_broker_state" and ("kafka_cluster", CLUSTER) in labels}
    assert brokers == {"1"}, "only the broker heard from after the reset"
