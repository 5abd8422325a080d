"""The embedded broker (tansu) as the demo and the tests start it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from streaming.tools.embedded import EmbeddedBroker, create_topics, tansu_binary

pytestmark = pytest.mark.integration


def test_waiting_for_a_slow_broker_to_listen_logs_no_kafka_failure(tmp_path, capfd, monkeypatch):
    """Why: the demo's first lines must not read like errors. A Kafka client probing a broker that
    does not listen yet logs each refused connection as a librdkafka FAIL line (seen once in a
    fresh-clone demo), so readiness is first a plain TCP connect. The wrapper delays tansu's start
    so that the probe always meets refused connections."""
    slow = tmp_path / "slow-tansu"
    slow.write_text(f'#!/bin/sh\nsleep 1\nexec "{tansu_binary()}" "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setenv("EPOCHWATCH_TANSU_BIN", str(slow))
    with EmbeddedBroker() as broker:
        create_topics(broker.bootstrap_servers, {"ready.check": 1})
    # Lines about this broker only: librdkafka clients other tests left behind share the
    # process's stderr, and log each refused reconnect to their own (stopped) brokers.
    failures = [line for line in capfd.readouterr().err.splitlines()
                if "|FAIL|" in line and broker.bootstrap_servers in line]
    assert not failures, failures


def test_the_broker_dies_with_the_process_that_started_it():
    """Why: a demo or test run killed by SIGKILL (a CI timeout, kill -9) runs no stop(); tansu
    used to stay behind, holding its port, for as long as the machine ran."""
    starter = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom streaming.tools.embedded import EmbeddedBroker\n"
         "b = EmbeddedBroker().start()\nprint(b._proc.pid, flush=True)\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        broker_pid = int(starter.stdout.readline())
        assert _alive(broker_pid)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        deadline = time.monotonic() + 10
        while _alive(broker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(broker_pid)
    finally:
        starter.kill()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (this sandbox's pid 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except FileNotFoundError:
        return False
    return "zombie" not in state
