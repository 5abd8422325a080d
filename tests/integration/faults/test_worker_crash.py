"""kill -9 of Spark's Python workers under a live `epochwatch run` (local mode, processing time):
the job must not end; the tasks those workers ran are retried and detection goes on."""

from __future__ import annotations

import os
import signal

import pytest

from tests.integration.faults.processes import python_workers
from tests.integration.faults.support import LiveTelemetry, job_on_fresh_topics
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

START_DEADLINE_S = 180   # JVM + SparkSession + first batch on two busy cores
KILLS = 3
RULES = {"controller.heartbeat.timeout.ms": 3000, "broker.heartbeat.interval.ms": 250,
         "heartbeat.timeout.pending.ms": 600}


def test_a_crashed_python_worker_does_not_end_the_job(broker, job_factory, tail_factory, tmp_path, fault_report):
    """Why: under Spark's local mode a task is tried once (local[2] means spark.task.maxFailures
    1), so one Python worker killed by the OOM killer or a segfault failed its task, the micro-
    batch and the query: `epochwatch run` exited for good, paging no one until a supervisor
    noticed. Killed workers are replaced and their tasks retried; the job keeps deciding."""
    config, topics = job_on_fresh_topics(broker.bootstrap_servers, tmp_path, "wc", partitions=(2, 1, 1),
                                         rules=RULES)
    telemetry = LiveTelemetry(broker.bootstrap_servers, topics["events"], "wc", brokers=[1, 2, 3]).start()
    tail = tail_factory(broker.bootstrap_servers, topics["alerts"])
    job = job_factory(config, "--set", "sinks.console=off").start()   # processing time: not --event-time
    try:
        job.wait_for_batch(START_DEADLINE_S, "the first batch")
        killed = []
        for _ in range(KILLS):
            done = len(job.progress())
            workers = wait_until(lambda: python_workers(job._proc.pid), timeout_s=60, what="a Python worker")
            os.kill(workers[0], signal.SIGKILL)
            killed.append(workers[0])
            # two more batches each time: the next one may have run into the dead worker and retried
            wait_until(lambda: len(job.progress()) >= done + 2, timeout_s=120, interval_s=0.2,
                       what=f"batches after killing Python worker {workers[0]} (log {job.log_path})")
        assert job.alive(), "the job survived every kill"

        telemetry.silence(2)
        wait_until(lambda: any(r["alertname"] == "BrokerHeartbeatTimeout" and r["labels"].get("broker_id") == "2"
                               for _, r in tail.poll()), timeout_s=60, interval_s=0,
                   what="BrokerHeartbeatTimeout of broker 2 after the kills")
        fault_report(f"{KILLS} Python workers killed ({killed}); the job ran on, {len(job.batches())} batches")
    finally:
        telemetry.stop()
    assert job.stop() == 0
