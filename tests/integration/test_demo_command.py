"""README command 1's job, as a user runs it. ``epochwatch demo`` starts a real Kafka cluster, the
collector and the live job, cuts a broker off from the controller, and says DEMO OK; ``epochwatch
demo --simulated`` plays the simulator's scripted incident on the embedded broker. Nothing after
either may look like a failure (librdkafka logs FAIL when a client outlives the broker it talks
to), on screen or in the file that keeps Spark's own output."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]


def run_demo(tmp_path, *args):
    command = Path(sys.executable).with_name("epochwatch")
    done = subprocess.run([str(command), "demo", *args, "--report", str(tmp_path / "report.png")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    spark_log = next(Path(line.rsplit(": ", 1)[1]) for line in done.stdout.splitlines()
                     if line.startswith("Spark's own output"))
    return done, spark_log.read_text(errors="replace")


def test_the_real_cluster_demo_pages_on_a_cut_off_broker_and_ends_cleanly(tmp_path):
    done, spark_output = run_demo(tmp_path)
    output = done.stdout + done.stderr + spark_output
    assert done.returncode == 0, output[-4000:]
    assert "DEMO OK" in done.stdout
    for name in ("BrokerHeartbeatTimeout", "BrokerMetadataLag", "StaleMetadataResponse"):
        assert f"FIRING   warning  {name}" in done.stdout or f"FIRING   critical {name}" in done.stdout, name
        assert "RESOLVED" in done.stdout
    assert (tmp_path / "report.png").stat().st_size > 10_000
    failures = [line for line in output.splitlines() if "|FAIL|" in line]
    assert not failures, "\n".join(failures[:5])


def test_the_simulated_demo_plays_the_incident_and_ends_cleanly(tmp_path):
    done, spark_output = run_demo(tmp_path, "--simulated")
    output = done.stdout + done.stderr + spark_output
    assert done.returncode == 0, output[-4000:]
    assert "DEMO OK" in done.stdout
    assert "3 malformed records in epochwatch.dlq" in done.stdout
    assert (tmp_path / "report.png").stat().st_size > 10_000
    for noise in ("TransformWithStateInPandas Python worker", "log4j"):  # kept in the file, not on screen
        assert noise not in done.stdout + done.stderr and noise in spark_output, noise
    failures = [line for line in output.splitlines() if "|FAIL|" in line]
    assert not failures, "\n".join(failures[:5])
