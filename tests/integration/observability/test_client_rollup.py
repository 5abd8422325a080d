"""A broker partitioned from the controller while 10,000 clients ask it (simulator scenario
partitioned_broker_fleet), through the single-process detector into the sinks `epochwatch run` wires
(build_sinks: the roll-up, the alerts topic on Apache Kafka, /metrics, AlertmanagerSink) and the real
Alertmanager routed by deploy/alertmanager/alertmanager.yml. After every micro-batch, what
Alertmanager holds (GET /api/v2/alerts) is compared with the incidents the detector has open."""

from __future__ import annotations

import pytest
import requests

from streaming import config
from streaming.commands.run import build_sinks
from streaming.rules.rollup import CLIENT_COUNT, per_client
from streaming.sinks.alert_book import BookSettings, alertmanager_payload
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.base import Dispatcher, OutputBatch
from streaming.sinks.labels import presented
from streaming.tools.embedded import create_topics
from streaming.tools.simulate import run_scenario
from streaming.tools.simulate.model import ClusterShape
from tests.support.detector_batches import alert_batches
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

CLIENTS = 10_000
STALE = "StaleMetadataResponse"


@pytest.fixture(scope="module")
def fleet():
    """The scenario's alert records per micro-batch of 5,000 events (detected once: ~1 min)."""
    result = run_scenario("partitioned_broker_fleet", shape=ClusterShape(clients=CLIENTS))
    truth = result.truth
    k = next(str(e.labels["broker_id"]) for e in truth.expected if e.alertname == "BrokerMetadataLag")
    return k, alert_batches(result.events, truth.rule_settings(), 5000, truth.end_ms)


@pytest.fixture
def job_settings(broker, alertmanager, tmp_path):
    def make(**overrides) -> config.Settings:
        suffix = tmp_path.name[-10:]
        settings = config.load(overrides={
            "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.topics.alerts": f"rollup-al-{suffix}",
            "kafka.topics.dlq": f"rollup-dlq-{suffix}", "sinks.alertmanager.url": alertmanager.url,
            "sinks.metrics.port": 0, **overrides})
        create_topics(broker.bootstrap_servers, {settings.kafka.alerts_topic: 3, settings.kafka.dlq_topic: 1})
        return settings
    return make


class Incidents:
    """The incidents the detector has open (its records before any roll-up)."""

    def __init__(self):
        self.open: dict[str, dict] = {}

    def take(self, alerts: list[dict]) -> None:
        for a in alerts:
            if a["status"] == "firing":
                self.open[a["fingerprint"]] = a
            else:
                self.open.pop(a["fingerprint"], None)

    def clients(self) -> int:
        return sum(1 for a in self.open.values() if per_client(a))

    def others(self) -> set[frozenset]:
        """Alertmanager labels of the open incidents that are not per client."""
        return {labels_of(alertmanager_payload(presented(a), 0, BookSettings())) for a in self.open.values()
                if not per_client(a)}


def labels_of(alert: dict) -> frozenset:
    return frozenset(alert["labels"].items())


def in_alertmanager(am) -> list[dict]:
    return requests.get(am.url + "/api/v2/alerts", timeout=5).json()


def deliver(sinks: list, batch_id: int, alerts: list[dict]) -> None:
    """One micro-batch through the sinks, in their order; returns once Alertmanager accepted it."""
    batch = OutputBatch(batch_id, alerts=list(alerts))
    for sink in sinks:
        sink.write(batch)
    sink = next(s for s in sinks if isinstance(s, AlertmanagerSink))
    wait_until(lambda: sink.backlog == 0, timeout_s=30, what="Alertmanager to accept the batch's alerts")


def test_ten_thousand_clients_of_a_partitioned_broker_are_one_alert(fleet, job_settings, alertmanager):
    """per_broker (the default): one StaleMetadataResponse alert for broker k whatever the number of
    clients, updated in place (Alertmanager's own fingerprint and startsAt stay) as the count grows."""
    k, batches = fleet
    sinks, _metrics, _board = build_sinks(job_settings(), console=False)
    rollup_labels = frozenset({"alertname": STALE, "kafka_cluster": "cluster-a", "severity": "warning",
                               "broker_id": k}.items())
    incidents, seen, peak = Incidents(), set(), 0
    try:
        for batch_id, alerts in enumerate(batches):
            deliver(sinks, batch_id, alerts)
            incidents.take(alerts)
            held = in_alertmanager(alertmanager)
            expected = incidents.others() | ({rollup_labels} if incidents.clients() else set())
            assert sorted(map(sorted, map(labels_of, held))) == sorted(map(sorted, expected)), f"batch {batch_id}"
            for alert in held:
                if alert["labels"]["alertname"] == STALE:
                    assert alert["annotations"][CLIENT_COUNT] == str(incidents.clients())
                    seen.add((alert["fingerprint"], alert["startsAt"]))
                    peak = max(peak, incidents.clients())
    finally:
        Dispatcher(sinks).close()
    assert peak == CLIENTS, "every client's incident was open at once, in one alert"
    assert len(seen) == 1, "every update was the same alert to Alertmanager"
    assert in_alertmanager(alertmanager) == [], "resolved with the last client"


def test_per_client_alerts_are_capped_and_the_rest_rolled_up(fleet, job_settings, alertmanager):
    k, batches = fleet
    settings = job_settings(**{"rules.client.alerts": "per_client", "rules.client.alerts.max.per.cluster": 20})
    sinks, _metrics, _board = build_sinks(settings, console=False)
    incidents, at_peak = Incidents(), None
    try:
        for batch_id, alerts in enumerate(batches):
            deliver(sinks, batch_id, alerts)
            incidents.take(alerts)
            stale = [a for a in in_alertmanager(alertmanager) if a["labels"]["alertname"] == STALE]
            alone = [a for a in stale if "client_id" in a["labels"]]
            rolled = [a for a in stale if "client_id" not in a["labels"]]
            assert len(alone) <= 20 and len(rolled) <= 1, f"batch {batch_id}"
            assert len(alone) + sum(int(a["annotations"][CLIENT_COUNT]) for a in rolled) == incidents.clients()
            if incidents.clients() == CLIENTS:
                at_peak = (len(alone), [(a["labels"]["broker_id"], a["annotations"][CLIENT_COUNT]) for a in rolled])
    finally:
        Dispatcher(sinks).close()
    assert at_peak == (20, [(k, str(CLIENTS - 20))]), "21 alerts for 10,000 clients: 20 alone, 1 roll-up"
    assert in_alertmanager(alertmanager) == []


def test_a_restart_mid_incident_keeps_the_one_alert(fleet, job_settings, alertmanager):
    """The driver restarts while 10,000 clients' incidents are open: the new one reads the alerts
    topic back (build_sinks), Alertmanager keeps the same alert, and the batch that was running is
    computed again (replayed) without counting any client twice."""
    _, batches = fleet
    settings = job_settings()
    sinks, _metrics, _board = build_sinks(settings, console=False)
    incidents, alert_before = Incidents(), None
    try:
        for batch_id, alerts in enumerate(batches):
            deliver(sinks, batch_id, alerts)
            incidents.take(alerts)
            if incidents.clients() == CLIENTS:
                (alert_before,) = [a for a in in_alertmanager(alertmanager) if a["labels"]["alertname"] == STALE]
                break
    finally:
        Dispatcher(sinks).close()
    assert alert_before is not None and alert_before["annotations"][CLIENT_COUNT] == str(CLIENTS)
    restarted, metrics, _board = build_sinks(settings, console=False)
    firing = metrics.registry.get_sample_value("epochwatch_alerts_firing", {
        "kafka_cluster": "cluster-a", "alertname": STALE, "severity": "warning"})
    assert firing == CLIENTS, "the firing gauge counts the clients' incidents, seeded from the alerts topic"
    try:
        for batch_id, alerts in enumerate(batches[batch_id:], start=batch_id):
            deliver(restarted, batch_id, alerts)
            incidents.take(alerts)
            stale = [a for a in in_alertmanager(alertmanager) if a["labels"]["alertname"] == STALE]
            if incidents.clients():
                (alert,) = stale
                assert alert["fingerprint"] == alert_before["fingerprint"], "the same alert to Alertmanager"
                assert alert["startsAt"] == alert_before["startsAt"]
                assert alert["annotations"][CLIENT_COUNT] == str(incidents.clients())
            else:
                assert stale == []
    finally:
        Dispatcher(restarted).close()
    assert in_alertmanager(alertmanager) == []
