"""streaming.spark.engine_host with real host processes: a partition's steps keep their engines in
the host whichever Python worker asks, a failing step fails the task that sent it, and the
worker steps on its own when no host can be reached."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from streaming.config import RuleSettings
from streaming.spark.engine_host import EngineHostError, HostedSteps, host_address, start_host
from tests.support.builders import heartbeats
from tests.support.engine_hosts import KEY, broker_ids, host_stats
from tests.support.key_feed import empty_state, packed, request


def step_twice(steps, rules: RuleSettings):
    """Two micro-batches of one key as the processor sends them: the first reads the store."""
    first = request(rules, KEY, packed(heartbeats((1, 2, 3), 0, 10_000), KEY), None, 10_000)
    out = steps.step(first) or steps.step(first, empty_state())
    second = request(rules, KEY, packed(heartbeats((1, 2, 3), 10_000, 20_000), KEY), out.meta, 20_000)
    return out, steps.step(second)


def test_a_partitions_engines_stay_in_its_host_whichever_worker_asks(address):
    """Why: Spark hands the next micro-batch's task to whichever Python worker is idle; the
    engine must be kept across that (no rebuild from the store), which is the point of a host."""
    rules = RuleSettings()
    first_worker = HostedSteps(address, owner=os.getpid())
    first = request(rules, KEY, packed(heartbeats((1, 2, 3), 0, 10_000), KEY), None, 10_000)
    assert first_worker.step(first) is None, "a new key: the host asks for the stored state"
    out = first_worker.step(first, empty_state())
    first_worker.task_done()
    HostedSteps._connections.pop(address).close()  # the next task runs in another worker
    second = request(rules, KEY, packed(heartbeats((1, 2, 3), 10_000, 20_000), KEY), out.meta, 20_000)
    again = HostedSteps(address, owner=os.getpid()).step(second)
    assert again is not None and broker_ids(again) == {1, 2, 3}
    assert host_stats(address) | {"pid": 0} == {"loaded": 1, "kept": 1, "engines": 1, "pid": 0}


def test_a_step_that_fails_in_the_host_fails_the_task_and_the_host_serves_on(address):
    """Why: a rule that raises must fail the Spark task (which Spark retries and reports), with
    the host's traceback; it must not kill the host or answer for the key as if nothing happened."""
    rules = RuleSettings()
    steps = HostedSteps(address, owner=os.getpid())
    broken = request(rules, KEY, [b"not an Arrow stream"], None, 10_000)
    with pytest.raises(EngineHostError, match=r"(?s)\('c1', 'brokers', 0\).*Traceback.*ArrowInvalid"):
        steps.step(broken, empty_state())
    out, again = step_twice(steps, rules)
    assert again is not None and out.meta[0] == 10_000 - rules.allowed_lateness_ms


def test_without_a_reachable_host_the_worker_steps_its_keys_itself():
    """Why: the host is a cache; if it cannot be started (here: its folder does not exist) the
    job must go on with the same results, stepping in the Python worker."""
    rules = RuleSettings()
    steps = HostedSteps("/nonexistent-epochwatch/p0", owner=os.getpid())
    out, again = step_twice(steps, rules)
    assert steps.fallback and again is not None and broker_ids(again) == {1, 2, 3}


def test_a_host_exits_when_the_worker_daemon_it_belongs_to_is_gone(address):
    """Why: hosts are started by Spark's Python workers but outlive them; when the daemon (the
    executor) is gone, the host must not linger holding every engine in memory."""
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    conn = start_host(address, daemon.pid)
    conn.close()
    assert Path(address).exists()
    daemon.kill()
    daemon.wait()
    deadline = time.monotonic() + 15
    while Path(address).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(address).exists(), "the host removes its socket as it exits"
    assert not Path(address + ".lock").exists() and not Path(address + ".log").exists(), "and its empty leftovers"


def test_hosts_are_only_used_in_a_folder_of_this_users_alone(monkeypatch, short_tmp):
    """Why: workers unpickle what a host sends; a socket folder that another user can write to
    would let them answer in the host's place and run code in the job."""
    monkeypatch.setattr(tempfile, "tempdir", short_tmp)
    folder = Path(short_tmp) / f"epochwatch-engines-{os.getuid()}"
    folder.mkdir(mode=0o700)
    assert host_address(123, 4) == str(folder / "123-p4")
    folder.chmod(0o777)
    with pytest.raises(OSError, match="not a folder of this user's alone"):
        host_address(123, 4)
