"""Engine hosts: one long-lived process per state partition and Python worker daemon that keeps
the partition's key engines between micro-batches.

Why: Spark hands a micro-batch's tasks whichever Python worker went idle first, so in about half
of the live micro-batches a state partition's task ran in the other worker and every key of it
rebuilt its engine from the state store: 300-640 ms per task, the slow tail of live detection
latency (bench/RESULTS.md, live, sessions 9-12). The processor now sends each key's step (its
packs and meta, and its stored state when the host asks for it) to its partition's host over a
Unix socket and writes back what the step returns (streaming.key_steps).

The state store stays the only truth: a host's engines are a cache checked against the
generation stored with each key, so a host that died, a retried micro-batch or a partition that
moved to another executor costs a rebuild, nothing else. If a host cannot be reached the task
steps its keys in the Python worker, as before hosts existed.

Lifecycle: a partition's first task starts its host (a lock file keeps it to one per address);
the host exits when the worker daemon it belongs to is gone, or after ``IDLE_EXIT_S`` without a
request. Engines not stepped for ``key_steps.IDLE_DROP_MS`` are dropped at a task's end (a
finished query's, a key that went quiet).
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from streaming.key_steps import KeySteps, StepOutput, StepRequest, StoredState

log = logging.getLogger(__name__)

IDLE_EXIT_S = 300
START_TIMEOUT_S = 60
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
            conn.send(("step", request, stored))
            status, value = conn.recv()
        except (OSError, EOFError) as exc:
            # The host's engines are only a cache: what the store holds is stepped here instead.
            log.warning("engine host %s unreachable (%s); stepping in the Python worker", self.address, exc)
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


def _connect(address: str) -> Connection | None:
    try:
        return Client(address, family="AF_UNIX")
    except (FileNotFoundError, ConnectionRefusedError):
        return None


def start_host(address: str, owner: int) -> Connection:
    """Start the host for ``address`` unless another task just did; its connection."""
    with open(address + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(address)
        if conn is not None:
            return conn
        Path(address).unlink(missing_ok=True)  # a dead host's socket
        path = os.pathsep.join(p for p in sys.path if p)
        with open(address + ".log", "ab") as errors:
            process = subprocess.Popen(
                [sys.executable, "-m", "streaming.engine_host", address, str(owner)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                env={**os.environ, "PYTHONPATH": path}, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = _connect(address)
            if conn is not None:
                return conn
            if process.poll() is not None:
                raise OSError(f"engine host exited with {process.returncode}: see {address}.log")
            time.sleep(0.02)
        process.kill()
        raise OSError(f"engine host did not listen on {address} within {START_TIMEOUT_S} s")


# --- the host process -----------------------------------------------------------------------

class Host:
    """Serves steps for any number of connections, one step at a time."""

    def __init__(self, address: str, owner: int, idle_exit_s: float = IDLE_EXIT_S):
        from udfs.worker_daemon import FreezeBetweenTasks

        self.address, self.owner, self.idle_exit_s = address, owner, idle_exit_s
        self.steps = KeySteps()
        self.lock = threading.Lock()
        self.collector = FreezeBetweenTasks()
        self.last_request = time.monotonic()

    def serve(self) -> None:
        listener = Listener(self.address, family="AF_UNIX")
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
            for leftover in (self.address + ".lock", self.address + ".log"):
                path = Path(leftover)
                if path.exists() and (path.suffix == ".lock" or path.stat().st_size == 0):
                    path.unlink(missing_ok=True)
        os._exit(0)


def local_host_stats(spark) -> dict[int, dict]:
    """Steps served by each state partition's host of a local session, by partition: ``kept``
    (the engine was kept), ``loaded`` (built from the stored state), ``engines`` kept now."""
    (owner,) = spark.sparkContext.parallelize([0], 1).map(lambda _: os.getppid()).collect()
    stats = {}
    for socket in Path(host_address(owner, 0)).parent.glob(f"{owner}-p*"):
        if socket.suffix:  # .lock, .log
            continue
        conn = _connect(str(socket))
        if conn is not None:
            with conn:
                conn.send(("stats",))
                stats[int(socket.name.rsplit("-p", 1)[1])] = conn.recv()[1]
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
