"""Fault-injection fixtures: the job as a real `epochwatch run` process, tails of output topics,
a Kafka cluster of the test's own (one controller, one broker) to pause, and a report of what was
measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.tools.embedded import free_port
from tests.integration.faults.support import JobProcess, TopicTail


@pytest.fixture
def job_factory(tmp_path):
    """job_factory(config_path) -> a JobProcess (not started); every one is killed at teardown."""
    jobs: list[JobProcess] = []

    def make(config: Path, *extra_args: str) -> JobProcess:
        job = JobProcess(config, tmp_path / f"job-{len(jobs)}.log", tuple(extra_args) or ("--event-time",))
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop(timeout_s=20)


@pytest.fixture
def tail_factory():
    tails: list[TopicTail] = []

    def make(bootstrap: str, topic: str) -> TopicTail:
        tails.append(TopicTail(bootstrap, topic))
        return tails[-1]

    yield make
    for tail in tails:
        tail.close()


@pytest.fixture
def own_broker(kafka_cluster_factory):
    """Apache Kafka only this test uses (one controller, one broker: support.OWN_BROKER), to pause,
    kill or restart; its ports stay the same across restarts. Stopped at teardown, paused or not."""
    return kafka_cluster_factory(controllers=1, brokers=1)


MEASURED: list[str] = []


@pytest.fixture
def fault_report(request):
    """fault_report(line): a measured number, shown in pytest's summary even when the test passes."""

    def report(line: str) -> None:
        request.node.user_properties.append(("measured", line))
        MEASURED.append(f"{request.node.name}: {line}")

    return report


def pytest_terminal_summary(terminalreporter):
    if MEASURED:
        terminalreporter.section("fault injection: measured")
        for line in MEASURED:
            terminalreporter.write_line(line)


@pytest.fixture
def alertmanager_on_fixed_port(tmp_path):
    """The real Alertmanager (deploy/alertmanager config, fast grouping) that a test may stop and
    start again on the same port; notifications go to a loopback webhook receiver."""
    from tests.integration.observability.services import (
        WebhookReceiver,
        alertmanager_process,
        render_alertmanager_config,
    )

    webhook = WebhookReceiver()
    config = render_alertmanager_config(tmp_path / "alertmanager.yml", webhook)
    service = alertmanager_process(tmp_path, config, port=free_port()).start()
    yield service
    service.stop()
    webhook.close()
