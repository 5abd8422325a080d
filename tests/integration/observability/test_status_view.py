"""The status view of a real `epochwatch run` (its own process, live: processing time) on the real
broker: a scripted incident from the simulator, produced to end at the wall clock, shows on
/status with its age by the wall clock and the broker fenced, and `epochwatch status` prints it
and exits 1; once the job is gone, the command says so in one line and exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from streaming.engine.local import detect_all
from streaming.tools.demo import load_events
from streaming.tools.embedded import free_port
from streaming.tools.simulate import run_scenario
from streaming.tools.simulate.truth import settings_dict
from streaming.tools.simulate.writers import KafkaEventWriter
from tests.integration.faults.support import JobProcess, job_on_fresh_topics
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCENARIO = "broker_not_returned"   # its incident still fires when the script ends
EVENT_PARTITIONS = 2
START_DEADLINE_S = 180             # JVM + SparkSession + first batch on two busy cores


def status(url: str, path: str = "/status") -> dict | None:
    try:
        return requests.get(url + path, timeout=5).json()
    except requests.ConnectionError:
        return None


def epochwatch_status(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.commands", "status", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_firing_incident_shows_on_the_running_jobs_status_with_its_age(broker, tmp_path):
    template = run_scenario(SCENARIO, seed=3).truth
    script_ms, rules = template.end_ms - template.start_ms, template.rule_settings()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config, topics = job_on_fresh_topics(broker.bootstrap_servers, tmp_path, "status",
                                         partitions=(EVENT_PARTITIONS, 1, 1), rules=settings_dict(rules),
                                         sinks={"metrics.port": port})
    job = JobProcess(config, tmp_path / "job.log", extra_args=()).start()   # live: wall-clock timers
    try:
        def running():
            if not job.alive():
                pytest.fail(f"the job exited:\n{job.log()[-3000:]}")
            body = status(url)
            return body and body["status"]["job"]["status"] == "RUNNING" and body
        first = wait_until(running, timeout_s=START_DEADLINE_S, interval_s=0.5, what="the job's first micro-batch")
        assert first["error"] is False and first["status"]["clusters"] == []

        # the incident's script, shifted to end now: the live job decides on the wall clock
        result = run_scenario(SCENARIO, seed=3, start_ms=int(time.time() * 1000) - script_ms)
        (expected,) = result.truth.expected
        broker_id, cluster = expected.labels["broker_id"], result.truth.cluster_id
        (reference,) = [a for a in detect_all(result.events, rules) if a["alertname"] == expected.alertname]
        with KafkaEventWriter(broker.bootstrap_servers, topics["events"], progress=None) as writer:
            load_events(writer, result.events, EVENT_PARTITIONS)

        def firing():
            body = status(url, f"/status/{cluster}")
            return body and not body["error"] and [i for i in body["status"]["incidents"]
                                                   if i["alertname"] == expected.alertname] and body
        before = time.time()
        body = wait_until(firing, timeout_s=120, interval_s=0.5, what=f"{expected.alertname} on /status/{cluster}")
        after = time.time()
        (incident,) = [i for i in body["status"]["incidents"] if i["alertname"] == expected.alertname]
        assert incident["fingerprint"] == reference["fingerprint"], "the incident the rules decide, not another"
        assert incident["labels"]["broker_id"] == broker_id and incident["severity"] == "warning"
        wall_age = (before - reference["starts_at"] / 1000, after - reference["starts_at"] / 1000)
        assert wall_age[0] - 1 <= incident["age_s"] <= wall_age[1] + 1, f"age by the wall clock: {wall_age}"
        assert int(broker_id) in [f["broker_id"] for f in body["status"]["brokers"]["fenced"]]
        assert body["status"]["status"] in ("WARN", "ERR")   # ClusterSilent (critical) follows the script's end

        progress = status(url)["status"]["job"]   # the job's own lag, from its query's progress
        assert progress["status"] == "RUNNING" and progress["batch_id"] > first["status"]["job"]["batch_id"]
        assert progress["source_lag_records"] == 0 and progress["last_progress_age_s"] < 60

        shown = epochwatch_status("--url", url)
        assert shown.returncode == 1, shown.stderr
        line = next(line for line in shown.stdout.splitlines() if expected.alertname in line)
        assert line.split()[:3] == ["warning", cluster, expected.alertname] and f"broker_id={broker_id}" in line
        assert f"{cluster}: broker {broker_id} fenced" in shown.stdout
        as_json = epochwatch_status("--url", url, "--cluster", cluster, "--json")
        assert as_json.returncode == 1
        assert expected.alertname in [i["alertname"] for i in json.loads(as_json.stdout)["status"]["incidents"]]
    finally:
        job.stop()

    gone = epochwatch_status("--url", url)
    assert gone.returncode == 2 and gone.stdout == ""
    assert gone.stderr.startswith(f"epochwatch status: the job is not reachable at {url}/status")
