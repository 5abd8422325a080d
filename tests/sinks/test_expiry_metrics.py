"""Brokers forgotten after state.entity.expiry.ms of silence leave /metrics: the key's step says
which (an ``expired`` summary), and the metrics sink drops their series; the cluster's own
gauge goes with its last broker."""

from __future__ import annotations

from dataclasses import replace

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.rules.table import EXPIRED_SUMMARY
from tests.support.builders import CLUSTER, hb
from tests.support.metrics import Batches, scrape, series_of

EXPIRY_MS = 60_000
RULES = replace(RuleSettings(), entity_expiry_ms=EXPIRY_MS)


def decommissioned(t: int, broker: int) -> dict:
    """The last heartbeat of a broker shut down for good: controlled shutdown, no alert."""
    return hb(t, broker, target="STOPPING", current="STOPPING", want_shutdown=True)


def broker_series(metrics, broker_id: int) -> set[str]:
    return {name for name, labels in scrape(metrics) if ("broker_id", str(broker_id)) in labels}


def test_a_decommissioned_broker_leaves_metrics_after_the_expiry_and_its_peer_stays():
    """Why: the state forgot a broker silent for state.entity.expiry.ms, but its state, epoch,
    incarnation and restart series stayed on /metrics for good, one more set per broker id
    ever seen (decommissioned brokers, forged ids)."""
    job = Batches([KeyEngine.new("brokers", CLUSTER, 0, RULES)])
    job.run([hb(t + b, b) for t in range(0, 10_000, 2000) for b in (1, 2)] + [decommissioned(10_500, 2)], 11_000)
    assert broker_series(job.metrics, 2) >= {"epochwatch_broker_state", "epochwatch_broker_metadata_epoch"}

    for now in range(12_000, 10_500 + EXPIRY_MS, 4_000):
        job.run([hb(now, 1)], now)
    assert broker_series(job.metrics, 2), "kept until the expiry"
    for now in range(10_500 + EXPIRY_MS, 200_000, 4_000):
        job.run([hb(now, 1)], now)
    assert broker_series(job.metrics, 2) == set(), "the expired broker's series are gone"
    assert broker_series(job.metrics, 1), "its peer stays"
    assert "epochwatch_cluster_metadata_epoch" in series_of(job.metrics, CLUSTER)


def test_the_last_broker_expired_takes_the_clusters_gauge_along():
    """The cluster's only broker shut down: ClusterSilent pages (its firing gauge is live and
    stays), everything else the cluster had on /metrics goes with the broker."""
    job = Batches([KeyEngine.new("brokers", CLUSTER, 0, RULES)])
    job.run([hb(t, 1) for t in range(0, 10_000, 2000)] + [decommissioned(10_500, 1)], 11_000)
    assert "epochwatch_cluster_metadata_epoch" in series_of(job.metrics, CLUSTER)
    for now in range(20_000, 400_000, 20_000):
        job.run([], now)
    left = {k: v for k, v in scrape(job.metrics).items() if ("kafka_cluster", CLUSTER) in k[1]}
    assert left == {("epochwatch_alerts_firing", (("alertname", "ClusterSilent"), ("kafka_cluster", CLUSTER),
                                                  ("severity", "critical"))): 1.0}


def test_the_expired_summary_names_the_brokers_and_whether_any_is_left():
    engine = KeyEngine.new("brokers", CLUSTER, 0, RULES)
    engine.step([hb(0, 1), hb(0, 2), decommissioned(1_000, 2)], 1_000)
    result = engine.step([hb(t, 1) for t in range(2_000, 70_000, 2_000)], 70_000)
    expired = [s for s in result.summaries if s["kind"] == EXPIRED_SUMMARY]
    assert [(s["broker_ids"], s["fleet_empty"]) for s in expired] == [([2], False)]
