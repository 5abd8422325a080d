"""A hung engine host (stopped, deadlocked) must not stall the query: the step in flight falls
back to the Python worker within a bound, the hung host is killed, and the partition's next
task starts a new one (streaming.spark.engine_host.HostWatch)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from streaming.config import RuleSettings
from streaming.spark import engine_host
from streaming.spark.engine_host import HostedSteps
from tests.support.builders import heartbeats
from tests.support.engine_hosts import KEY, broker_ids, host_stats
from tests.support.key_feed import empty_state, packed
from tests.support.key_feed import request as step_request
from tests.support.polling import wait_until

# A working host answers the ping from a thread of its own, and one that does not answer in time
# is killed: 3 s leaves that thread room on a loaded host.
PING_AFTER_S, PING_TIMEOUT_S = 0.5, 3.0
BOUND_S = 15   # ping after 0.5 s, 3 s without an answer, the watch's 1 s tick: well under this


@pytest.fixture(autouse=True)
def quick_watch(monkeypatch):
    """The production waits (5 s, then 10 s without an answer) scaled down to a test's."""
    monkeypatch.setattr(engine_host, "PING_AFTER_S", PING_AFTER_S, raising=False)
    monkeypatch.setattr(engine_host, "PING_TIMEOUT_S", PING_TIMEOUT_S, raising=False)
    monkeypatch.setattr(engine_host, "CONNECT_TIMEOUT_S", PING_TIMEOUT_S, raising=False)


def step_within(steps: HostedSteps, req, stored=None, bound_s: float = BOUND_S):
    """The step's output, failing (not hanging) the test when it does not return within bound_s."""
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=steps.step(req, stored)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(bound_s)
    assert not worker.is_alive(), f"the step was still waiting for its host after {bound_s} s: the query stalls"
    return result["out"], time.monotonic() - started


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a killed child of this test process is a zombie until reaped; reap it if it is ours
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return "Z" in open(f"/proc/{pid}/stat").read().split(")")[1].split()[0]


def test_a_stopped_host_is_killed_the_step_falls_back_and_the_next_task_gets_a_new_host(address, request):  # noqa: F811
    """Why: a step waited for its host's reply with no deadline; a host stopped (SIGSTOP, a
    debugger, a deadlock) held the task, so the micro-batch and the whole query, for good. The
    host is only a cache: the worker steps the key from the store and the same output follows."""
    rules = RuleSettings()
    steps = HostedSteps(address, owner=os.getpid())
    first = step_request(rules, KEY, packed(heartbeats((1, 2, 3), 0, 10_000), KEY), None, 10_000)
    out = steps.step(first) or steps.step(first, empty_state())
    hung_pid = host_stats(address)["pid"]
    os.kill(hung_pid, signal.SIGSTOP)
    request.addfinalizer(lambda: gone(hung_pid) or os.kill(hung_pid, signal.SIGKILL))  # whatever happens

    second = step_request(rules, KEY, packed(heartbeats((1, 2, 3), 10_000, 20_000), KEY), out.meta, 20_000)
    again, took = step_within(steps, second)
    again = again or steps.step(second, empty_state())  # the worker has no engine kept: the store's
    assert steps.fallback, "the worker stepped the key itself"
    assert broker_ids(again) == {1, 2, 3}
    # its socket closes as it dies, a moment before it is gone: the step may return in between
    wait_until(lambda: gone(hung_pid), 10, what="the hung host killed, not left holding memory and its socket")

    steps.task_done()
    third = step_request(rules, KEY, packed(heartbeats((1, 2, 3), 20_000, 30_000), KEY), again.meta, 30_000)
    next_task = HostedSteps(address, owner=os.getpid())
    later, _ = step_within(next_task, third)
    later = later or next_task.step(third, empty_state())
    assert not next_task.fallback, "the partition's next task uses a host again"
    assert host_stats(address)["pid"] != hung_pid, "a new one"


def test_a_host_busy_with_a_long_step_still_answers_the_ping():
    """Why: a catch-up step of a large key may take longer than the ping delay; a host that is
    working must answer from its other thread, or the watch would kill it and throw the work away."""
    import tempfile
    from multiprocessing.connection import Client

    # in this process (not the address fixture's, which stops its host by pid at teardown)
    address = os.path.join(tempfile.mkdtemp(prefix="ew-host-", dir="/tmp"), "p0")
    host = engine_host.Host(address, owner=os.getpid(), idle_exit_s=10**9)  # here: it must never exit
    threading.Thread(target=host.serve, daemon=True).start()
    wait_for_listening(address)
    with host.lock:   # as while a step runs
        assert engine_host.answers(address, PING_TIMEOUT_S), "a busy host answers the ping"
        with Client(address, family="AF_UNIX") as conn:
            conn.send(("stats",))
            assert not conn.poll(0.5), "(the test holds the lock: a request that needs it waits)"
    assert engine_host.answers("/nonexistent-epochwatch/p0", PING_TIMEOUT_S), "no host: nothing hung to kill"


def wait_for_listening(address: str) -> None:
    """Until the host accepts: its socket file exists from bind(), a moment before listen(), and a
    connection in between is refused (seen in a CI run under load); `answers` takes a refusal for
    "no host" and passes."""
    from tests.support.polling import wait_until

    wait_until(lambda: host_stats(address) is not None, timeout_s=10, what="the host listening")
