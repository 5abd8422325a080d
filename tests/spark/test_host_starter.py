"""streaming.spark.host_starter with a real daemon process: a partition's engine host is forked
by the starter the daemon forked (not a new interpreter importing the job's modules), serves the
partition's steps, and goes with the daemon; the starter forks hosts for its daemon's addresses
only; a host's pid file tells it from a process that reused its pid."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from streaming.config import RuleSettings
from streaming.spark import engine_host
from streaming.spark.engine_host import HostedSteps
from tests.integration.faults.processes import alive, process_table
from tests.support.builders import heartbeats
from tests.support.engine_hosts import KEY, broker_ids
from tests.support.key_feed import empty_state, packed, request
from tests.support.polling import wait_until

# What the worker daemon does before Spark's daemon code: import the job's modules, fork the starter.
DAEMON = ("import sys, time\n"
          "from udfs import worker_daemon\n"
          "worker_daemon.preload()\n"
          "print(worker_daemon.start_host_starter(), flush=True)\n"
          "time.sleep(120)\n")


@pytest.fixture
def engines_tmp(monkeypatch, short_tmp):
    """The temporary folder of this test and of the daemon it starts."""
    monkeypatch.setattr(tempfile, "tempdir", short_tmp)
    return short_tmp


@pytest.fixture
def daemon(engines_tmp):
    """A stand-in for the worker daemon: its process, and the starter it forked."""
    process = subprocess.Popen([sys.executable, "-c", DAEMON], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": engines_tmp, "PYTHONPATH": os.pathsep.join(sys.path)})
    starter = int(process.stdout.readline())
    yield process, starter
    process.kill()
    process.wait()


def parent_of(pid: int) -> int:
    return process_table()[pid][0]


def command_of(pid: int) -> str:
    return " ".join(process_table()[pid][1])


def test_the_starter_forks_the_host_which_serves_steps_and_goes_with_the_daemon(daemon):
    """Why: a host started as a new interpreter imports the job's modules before it listens, while
    the task that asked waits (every partition's first task with input, at the job's start); the
    starter forks it from a process that has them imported. It must serve steps as any host does,
    and leave nothing running or on disk once the daemon (the executor) is gone."""
    process, starter = daemon
    address = engine_host.host_address(process.pid, 0)
    engine_host.start_host(address, process.pid).close()
    host = int(Path(address + ".pid").read_text().split()[0])
    assert parent_of(host) == starter, "forked by the starter, not a new interpreter"
    assert command_of(starter) == f"epochwatch engine host starter, worker daemon {process.pid}"
    assert command_of(host) == f"epochwatch engine host, worker daemon {process.pid}: {address}", \
        "named in ps, not shown as the daemon it was forked from"

    rules = RuleSettings()
    steps = HostedSteps(address, owner=process.pid)
    first = request(rules, KEY, packed(heartbeats((1, 2, 3), 0, 10_000), KEY), None, 10_000)
    assert steps.step(first) is None, "a new key: the host asks for the stored state"
    assert broker_ids(steps.step(first, empty_state())) == {1, 2, 3}
    HostedSteps._connections.pop(address).close()

    process.kill()
    process.wait()
    wait_until(lambda: not alive(starter) and not alive(host), 15, what="the starter and its host gone with the daemon")
    left = [p.name for p in Path(address).parent.iterdir() if p.name.startswith(f"{process.pid}-")]
    assert left == [], "their sockets and empty logs removed"


def ask_starter(owner: int, host: str) -> str:
    """The starter's answer to a request for ``host``, sent as a worker sends it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(engine_host.starter_address(owner))
        sock.sendall(host.encode())
        sock.shutdown(socket.SHUT_WR)
        return sock.recv(64).decode()


def test_the_starter_forks_hosts_for_its_daemons_addresses_only(daemon, engines_tmp):
    """Why: whatever asks the starter gets a process running the job's code; only the addresses
    its daemon's workers use (its folder, its daemon's name, a partition) are served."""
    process, starter = daemon
    refused = (engine_host.host_address(process.pid + 1, 0),          # another daemon's
               str(Path(engines_tmp) / f"{process.pid}-p0"),          # another folder
               engine_host.host_address(process.pid, 0) + "x",        # not a partition's
               "")
    assert [ask_starter(process.pid, address) for address in refused] == ["0"] * len(refused)
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(starter)], capture_output=True, text=True).stdout
    assert children.split() == [], "no host forked"
    assert int(ask_starter(process.pid, engine_host.host_address(process.pid, 7))) > 0, "its own: forked"


def test_without_a_starter_the_host_starts_as_a_new_interpreter(address):
    """Why: the job must run where the daemon has no starter (another daemon module, a worker
    without a daemon): the host is then a process of its own, as before the starter."""
    engine_host.start_host(address, os.getpid()).close()
    host = int(Path(address + ".pid").read_text().split()[0])
    assert parent_of(host) == os.getpid(), "started by the worker"
    assert command_of(host) == f"epochwatch engine host, worker daemon {os.getpid()}: {address}", \
        "named as a forked one"


def test_a_pid_file_whose_process_is_another_now_kills_nothing(tmp_path):
    """Why: a host's pid may be reused once it is gone; its command line is only the title it
    gave itself (a forked host's was the daemon's before it did): its start time says which
    process it is."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = engine_host._start_time(sleeper.pid)
        address = str(tmp_path / "p0")
        Path(address + ".pid").write_text(f"{sleeper.pid} {started + 1}")
        assert engine_host.kill_host(address) is None and sleeper.poll() is None, "another process: left alone"
        Path(address + ".pid").write_text(f"{sleeper.pid} {started}")
        assert engine_host.kill_host(address) == f"killed pid {sleeper.pid}"
        assert sleeper.wait(10) == -9
    finally:
        sleeper.kill()
