"""Engine hosts: one long-lived process per state partition and Python worker daemon that keeps
the partition's key engines between micro-batches.

Why: Spark hands a micro-batch's tasks whichever Python worker went idle first, so a state
partition's task often runs in another worker than its last one, where every key of it would
rebuild its engine from the state store: the slow tail of live detection latency (figures:
bench/RESULTS.md, Live detection latency). So the processor sends each key's step (its packs and
meta, and its stored state when the host asks for it) to its partition's host over a Unix socket
and writes back what the step returns (streaming.spark.key_steps).

The state store stays the only truth: a host's engines are a cache checked against the
generation stored with each key, so a host that died, a retried micro-batch or a partition that
moved to another executor costs a rebuild, nothing else. If a host cannot be reached the task
steps its keys in its own Python worker.

Lifecycle: a partition's first task starts its host (a lock file keeps it to one per address);
the host exits when the worker daemon it belongs to is gone, or after ``IDLE_EXIT_S`` without a
request. Engines not stepped for ``key_steps.IDLE_DROP_MS`` are dropped at a task's end (a
finished query's, a key that went quiet).
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from streaming.spark import host_starter
from streaming.spark.key_steps import KeySteps, StepOutput, StepRequest, StoredState

log = logging.getLogger(__name__)

IDLE_EXIT_S = 300
START_TIMEOUT_S = 60
# A hung host (stopped, deadlocked, swapped out for good) must not stall the query: a step in
# flight for PING_AFTER_S gets its host asked on a connection of its own, and a host that does not
# answer within PING_TIMEOUT_S (it answers from another thread than its steps'), or a step still
# in flight after STEP_MAX_S, is killed: the step's send or receive fails, the worker steps the
# key itself, and the partition's next task starts a new host.
CONNECT_TIMEOUT_S = 10
PING_AFTER_S = 5
PING_TIMEOUT_S = 10
STEP_MAX_S = 600
_MAX_SOCKET_PATH = 100  # AF_UNIX paths stop at 107 bytes


class EngineHostError(RuntimeError):
    """A key's step failed inside the engine host (the host's traceback is the message)."""


# steps in this Python worker: tests without Spark, the driver, a host that is unreachable
IN_PROCESS = KeySteps()


def new_token() -> str:
    """Names one query's engines in the hosts: two queries never share a cached engine."""
    return uuid.uuid4().hex[:12]


def steps_for_task():
    """What the processor steps its keys with in the current Spark task: its partition's host, or
    this worker without a task (Spark's driver-side worker for the processor's schema)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return IN_PROCESS
    try:
        address = host_address(os.getppid(), context.partitionId())
    except OSError as exc:
        log.warning("no engine host (%s); stepping in the Python worker", exc)
        return IN_PROCESS
    return HostedSteps(address, owner=os.getppid())


def host_address(owner: int, partition: int) -> str:
    """The socket of ``partition``'s host, in a folder only this user can use: hosts and workers
    exchange pickles, so whoever could put a socket there could run code in them."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) > _MAX_SOCKET_PATH - 40:
        base = Path("/tmp")
    folder = base / f"epochwatch-engines-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{folder} is not a folder of this user's alone (mode {stat.filemode(info.st_mode)}, "
                      f"uid {info.st_uid}); remove it")
    return str(folder / f"{owner}-p{partition}")


def starter_address(owner: int) -> str:
    """The socket of the daemon ``owner``'s host starter (streaming.spark.host_starter)."""
    return host_starter.address_beside(host_address(owner, 0), owner)


class HostedSteps:
    """A task's connection to its partition's host, with the worker's own steps as the fallback."""

    _connections: dict[str, Connection] = {}  # per worker process, reused by its later tasks

    def __init__(self, address: str, owner: int):
        self.address, self.owner = address, owner
        self.fallback = False

    def step(self, request: StepRequest, stored: StoredState | None = None) -> StepOutput | None:
        if self.fallback:
            return IN_PROCESS.step(request, stored)
        try:
            conn = self._connection()
            with WATCH.in_flight(self.address):
                conn.send(("step", request, stored))
                status, value = conn.recv()
        except (OSError, EOFError) as exc:
            # The host's engines are only a cache: what the store holds is stepped here instead.
            hung = WATCH.killed.pop(self.address, None) or (isinstance(exc, TimeoutError) and kill_host(self.address))
            log.warning("engine host %s %s (%s); stepping in the Python worker", self.address,
                        f"hung: {hung}" if hung else "unreachable", exc)
            self._drop()
            self.fallback = True
            return IN_PROCESS.step(request, stored)
        if status == "error":
            key = (request.cluster_id, request.kind, request.shard)
            raise EngineHostError(f"state step of key {key} failed in the engine host {self.address}:\n{value}")
        return value

    def task_done(self) -> None:
        if self.fallback:
            IN_PROCESS.task_done()
            return
        conn = self._connections.get(self.address)
        if conn is not None:
            try:
                conn.send(("task_done",))  # no reply: the host tidies up while the task ends
            except OSError:
                self._drop()

    def _connection(self) -> Connection:
        conn = self._connections.get(self.address)
        if conn is None:
            conn = _connect(self.address) or start_host(self.address, self.owner)
            self._connections[self.address] = conn
        return conn

    def _drop(self) -> None:
        conn = self._connections.pop(self.address, None)
        if conn is not None:
            conn.close()


def _connect(address: str, timeout_s: float | None = None) -> Connection | None:
    """A connection to the host at ``address``; None when no host listens there. Raises
    TimeoutError when one does but does not accept (hung: Client would wait for ever)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s or CONNECT_TIMEOUT_S)
    try:
        sock.connect(address)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError:
        sock.close()
        raise
    sock.settimeout(None)
    return Connection(sock.detach())


def answers(address: str, timeout_s: float) -> bool:
    """Whether the host at ``address`` answers a ping within ``timeout_s`` (no host: True, there
    is nothing hung to kill)."""
    try:
        conn = _connect(address, timeout_s)
        if conn is None:
            return True
        with conn:
            conn.send(("ping",))
            return conn.poll(timeout_s) and conn.recv()[0] == "ok"
    except (OSError, EOFError):
        return False


def kill_host(address: str) -> str | None:
    """SIGKILL the host serving ``address`` (its pid file names it and when it started: a pid may
    have been reused); what was done, or None."""
    try:
        pid, started = (int(field) for field in Path(address + ".pid").read_text().split())
        if _start_time(pid) != started:
            return None
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        return None
    return f"killed pid {pid}"


def _start_time(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (/proc/<pid>/stat's 22nd field; the name
    before it, in parentheses, may hold spaces)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


class HostWatch:
    """The steps in flight in this Python worker, watched from a thread of its own (started in
    the process that steps: Spark forks workers from a daemon, and threads do not survive a fork)."""

    def __init__(self, check_every_s: float = 1.0):
        self.check_every_s = check_every_s
        self.steps: dict[str, float] = {}   # address -> when its step was sent
        self.killed: dict[str, str] = {}    # address -> what was done, for the step's warning
        self._pid = None

    @contextmanager
    def in_flight(self, address: str):
        if self._pid != os.getpid():
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="engine-host-watch", daemon=True).start()
        self.steps[address] = time.monotonic()
        try:
            yield
        finally:
            self.steps.pop(address, None)

    def _run(self) -> None:
        while True:
            time.sleep(self.check_every_s)
            for address, sent in list(self.steps.items()):
                waited = time.monotonic() - sent
                if waited >= STEP_MAX_S or waited >= PING_AFTER_S and not answers(address, PING_TIMEOUT_S):
                    if self.steps.get(address) == sent:   # not answered meanwhile
                        done = kill_host(address)
                        if done:
                            self.killed[address] = f"{done} after {waited:.0f} s without an answer"


WATCH = HostWatch()


def start_host(address: str, owner: int) -> Connection:
    """Start the host for ``address`` unless another task just did; its connection."""
    with open(address + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(address)
        if conn is not None:
            return conn
        Path(address).unlink(missing_ok=True)  # a dead host's socket
        exited, stop = _launch(address, owner)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = _connect(address)
            if conn is not None:
                return conn
            if exited():
                raise OSError(f"engine host exited: see {address}.log")
            time.sleep(0.02)
        stop()
        raise OSError(f"engine host did not listen on {address} within {START_TIMEOUT_S} s")


def _launch(address: str, owner: int):
    """Start the host: forked by the daemon's starter (streaming.spark.host_starter), else as a
    new interpreter, which imports the job's modules before it listens. Whether it has exited, and
    how to kill it."""
    forked = host_starter.ask(address, owner)
    if forked is not None:
        return (lambda: not _alive(forked)), (lambda: os.kill(forked, signal.SIGKILL))
    path = os.pathsep.join(p for p in sys.path if p)
    with open(address + ".log", "ab") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "streaming.spark.engine_host", address, str(owner)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
            env={**os.environ, "PYTHONPATH": path}, start_new_session=True)
    return (lambda: process.poll() is not None), process.kill


# --- the host process -----------------------------------------------------------------------

class Host:
    """Serves steps for any number of connections, one step at a time."""

    def __init__(self, address: str, owner: int, idle_exit_s: float = IDLE_EXIT_S):
        from udfs.worker_daemon import collector_for_frozen

        self.address, self.owner, self.idle_exit_s = address, owner, idle_exit_s
        self.steps = KeySteps()
        self.lock = threading.Lock()
        self.collector = collector_for_frozen()  # a forked host starts with the daemon's frozen imports
        self.last_request = time.monotonic()

    def serve(self) -> None:
        host_starter.name_process(host_starter.HOST_TITLE.format(owner=self.owner, address=self.address))
        listener = Listener(self.address, family="AF_UNIX")
        Path(self.address + ".pid").write_text(f"{os.getpid()} {_start_time(os.getpid())}")   # for kill_host
        threading.Thread(target=self._watch, args=(listener,), daemon=True).start()
        while True:
            conn = listener.accept()
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _serve_connection(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                self.last_request = time.monotonic()
                if message[0] == "ping":   # without the lock: a long step must not look hung
                    reply = ("ok", os.getpid())
                else:
                    with self.lock:
                        reply = self.handle(message)
                if reply is not None:
                    try:
                        conn.send(reply)
                    except OSError:  # the worker is gone (its task was killed): so is the reply
                        return

    def handle(self, message: tuple):
        if message[0] == "step":
            try:
                return "ok", self.steps.step(*message[1:])
            except Exception:  # the task fails with it; the host keeps serving the others
                return "error", traceback.format_exc()
        if message[0] == "task_done":
            self.steps.task_done()
            self.collector.collect()  # between tasks, as udfs.worker_daemon does in the workers
            return None
        if message[0] == "stats":
            return "ok", {**self.steps.counts, "engines": len(self.steps.engines), "pid": os.getpid()}
        return "error", f"unknown message {message[0]!r}"

    def _watch(self, listener: Listener) -> None:
        while _alive(self.owner) and time.monotonic() - self.last_request < self.idle_exit_s:
            time.sleep(1)
        listener.close()  # removes the socket file
        if not _alive(self.owner):  # nobody will start this address's host again
            for leftover in (self.address + ".lock", self.address + ".log", self.address + ".pid"):
                path = Path(leftover)
                if path.exists() and (path.suffix != ".log" or path.stat().st_size == 0):
                    path.unlink(missing_ok=True)
        os._exit(0)


def local_host_stats(spark) -> dict[int, dict]:
    """Steps served by each state partition's host of a local session, by partition: ``kept``
    (the engine was kept), ``loaded`` (built from the stored state), ``engines`` kept now."""
    (owner,) = spark.sparkContext.parallelize([0], 1).map(lambda _: os.getppid()).collect()
    stats = {}
    for address in Path(host_address(owner, 0)).parent.glob(f"{owner}-p*"):
        if address.suffix:  # .lock, .log, .pid
            continue
        conn = _connect(str(address))
        if conn is not None:
            with conn:
                conn.send(("stats",))
                stats[int(address.name.rsplit("-p", 1)[1])] = conn.recv()[1]
    return stats


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> None:
    address, owner = argv[0], int(argv[1])
    Host(address, owner).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
