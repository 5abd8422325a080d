"""One real KRaft cluster (3 controllers, 3 brokers) watched by the whole monitor, shared by the
incident tests of a module: starting it costs about a minute (the cluster, then Spark)."""

from __future__ import annotations

import pytest

from streaming.tools.embedded import create_topics, free_port
from streaming.tools.kafka_cluster import KafkaCluster
from tests.integration.faults.support import JobProcess, TopicTail
from tests.integration.observability.services import (
    WebhookReceiver,
    alertmanager_process,
    prometheus_process,
    render_alertmanager_config,
)
from tests.integration.real.support import CollectorProcess, Monitor, prometheus_config, write_config
from tests.support.polling import wait_until

# Short graces so that every incident ends within a test; Kafka's own timers stay the defaults.
# The pending time is the one recommended with the collector (docs/operations.md): a heartbeat
# reaches the job up to a collect round after the controller heard it, and a broker restarted
# after kill -9 is back only once its old session expired (a gap just over the 9 s timeout).
TEST_RULES = {
    "heartbeat.timeout.pending.ms": 5000,
    "broker.not.returned.grace.ms": 20000,
    "metadata.lag.grace.ms": 15000,
    "stale.metadata.quiet.ms": 20000,
    # Broker 1 is paused twice and restarted within about five minutes of the module: four timeouts
    # and returns at least, six (BrokerFlapping under the default 10-minute window) if the restart's
    # gap is read as a timeout too (a round late after its shutdown; back within the pending time,
    # it pages nothing). Paged then in the test that came last, it was no incident of that test's:
    # a minute keeps each test's flapping its own.
    "broker.flapping.window.ms": 60000,
}


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    """The bus (the monitor's own topics) is a one-broker Kafka apart from the watched cluster, as
    in production: pausing a watched broker must not stall the monitor's own input."""
    work = tmp_path_factory.mktemp("real")
    bus = KafkaCluster(work / "bus", controllers=1, brokers=1)
    cluster = KafkaCluster(work / "cluster", controllers=3, brokers=3)
    collector = job = tail = alertmanager = prometheus = None
    webhook = WebhookReceiver()
    try:
        alertmanager = alertmanager_process(work, render_alertmanager_config(work / "alertmanager.yml", webhook)).start()
        bus.start()
        cluster.start()
        # partitions led by every broker: fencing one moves leaderships, and leader epochs with them
        create_topics(cluster.bootstrap_servers, {"orders": 6}, replication_factor=3)
        suffix = work.name[-8:]
        topics = {"events": f"real-ev-{suffix}", "alerts": f"real-al-{suffix}", "dlq": f"real-dlq-{suffix}"}
        create_topics(bus.bootstrap_servers, {topics["events"]: 2, topics["alerts"]: 1, topics["dlq"]: 1})
        job_port, collector_port = free_port(), free_port()
        config = write_config(work / "epochwatch.yaml", cluster=cluster, bus=bus.bootstrap_servers, topics=topics,
                              checkpoint=work / "checkpoint", rules=TEST_RULES, alertmanager_url=alertmanager.url,
                              job_metrics_port=job_port, collector_metrics_port=collector_port)
        prometheus = prometheus_process(work, prometheus_config(
            work / "prometheus.yml", job_port=job_port, collector_port=collector_port,
            alertmanager_port=alertmanager.port)).start()
        collector = CollectorProcess(config, work / "collect.log").start()
        job = JobProcess(config, work / "job.log", ()).start()  # processing time: the live job
        tail = TopicTail(bus.bootstrap_servers, topics["alerts"])
        m = Monitor(cluster, collector, job, tail, alertmanager, prometheus)
        wait_until(lambda: m.check_alive() or job.batches(), timeout_s=180, interval_s=0.5, what="the job's first batch")
        wait_until(lambda: m.collector_rounds() >= 3, timeout_s=60, interval_s=0.5, what="three collector rounds")
        yield m
    finally:
        for stop in (collector and collector.stop, job and job.stop, tail and tail.close, cluster.stop, bus.stop,
                     prometheus and prometheus.stop, alertmanager and alertmanager.stop, webhook.close):
            if stop:
                stop()
