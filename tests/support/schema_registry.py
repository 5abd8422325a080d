"""A real Schema Registry for tests (registered in tests/conftest.py through pytest_plugins):
Apicurio Registry, in memory, serving the Confluent Schema Registry API at /apis/ccompat/v7 — the
API confluent_kafka.schema_registry speaks, and so epochwatch. ``deploy/local/dev setup`` fetches
it from Maven Central once into .cache/apicurio-registry/<version>/ (or point
EPOCHWATCH_SCHEMA_REGISTRY_HOME at an unpacked distribution). Basic auth is required: USER and
PASSWORD may register and read.

- schema_registry: one registry per run, for tests that use subjects of their own topics.
- schema_registry_factory(): a registry of the test's own, stopped at teardown, for tests that
  pause it (SIGSTOP: requests time out) or stop it (connections refused).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streaming.tools.embedded import LOOPBACK, _dies_with_this_process
from streaming.tools.relay import free_port

REGISTRY_VERSION = "3.0.9"   # the version deploy/local/dev fetches
REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "epochwatch", "registry-pw-7f3a"
START_TIMEOUT_S = 120.0
JVM_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")


def registry_home() -> Path:
    home = Path(os.environ.get("EPOCHWATCH_SCHEMA_REGISTRY_HOME")
                or REPO / ".cache" / "apicurio-registry" / REGISTRY_VERSION)
    if not (home / f"apicurio-registry-app-{REGISTRY_VERSION}-runner.jar").is_file():
        raise RuntimeError(f"no Apicurio Registry {REGISTRY_VERSION} in {home}: run `deploy/local/dev setup` (it "
                           "fetches it from Maven Central once), or point EPOCHWATCH_SCHEMA_REGISTRY_HOME at it")
    return home


class SchemaRegistry:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}/apis/ccompat/v7"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "SchemaRegistry":
        home = registry_home()
        settings = {
            "quarkus.http.host": LOOPBACK, "quarkus.http.port": self.port,
            "apicurio.authn.enabled": "true", "quarkus.http.auth.basic": "true",
            "quarkus.security.users.embedded.enabled": "true", "quarkus.security.users.embedded.plain-text": "true",
            f"quarkus.security.users.embedded.users.{USER}": PASSWORD,
            f"quarkus.security.users.embedded.roles.{USER}": "sr-admin",
        }
        command = [*_dies_with_this_process(), "java", *JVM_FLAGS, *(f"-D{k}={v}" for k, v in settings.items()),
                   "-jar", str(home / f"apicurio-registry-app-{REGISTRY_VERSION}-runner.jar")]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"the Schema Registry did not start on port {self.port}:\n{tail}")
            time.sleep(0.2)
        return self

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/subjects", timeout=2).close()
        except urllib.error.HTTPError as exc:
            return exc.code == 401   # up, and asking for credentials
        except OSError:
            return False
        return True

    def pause(self) -> None:
        """The process stops (SIGSTOP): connections are accepted, no request is answered."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    registry = SchemaRegistry(tmp_path_factory.mktemp("schema-registry")).start()
    yield registry
    registry.stop()


@pytest.fixture
def schema_registry_factory(tmp_path_factory):
    """make() -> a started registry of the test's own, stopped at teardown."""
    made: list[SchemaRegistry] = []

    def make() -> SchemaRegistry:
        made.append(SchemaRegistry(tmp_path_factory.mktemp("schema-registry")))
        return made[-1].start()

    yield make
    for registry in made:
        registry.stop()
