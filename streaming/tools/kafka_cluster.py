"""A real Apache Kafka KRaft cluster on loopback for the tests and the demo, from the jars that
`deploy/local/dev setup` fetched. Controllers (ids 3000-3002) and brokers (1..N) are separate JVMs,
each with its own log and JMX exporter; every broker reaches every controller through a Relay this
process owns, so that a test can cut it off the controllers while clients still reach it.
Options: a SASL_PLAINTEXT/PLAIN listener next to the plaintext one (sasl_users), and brokers
advertised at relays of their own (client_relays), so that a port can stop answering."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from streaming.tools.embedded import LOOPBACK, _dies_with_this_process
from streaming.tools.kafka_config import node_properties
from streaming.tools.relay import Relay, free_port

KAFKA_VERSION = "4.1.2"
REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kafka"
CONTROLLER_IDS = (3000, 3001, 3002)
AGENT_JAR = "jmx_prometheus_javaagent-1.0.1.jar"
# Up to six JVMs share two cores in CI: C1 alone starts a node faster (a test cluster never runs
# long enough for C2 to pay off) and the serial collector keeps the RSS small.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Djava.awt.headless=true")


class KafkaClusterError(RuntimeError):
    pass


def kafka_lib() -> Path:
    """The folder of Kafka's jars: $EPOCHWATCH_KAFKA_LIB, else the set-up's cache."""
    lib = Path(os.environ.get("EPOCHWATCH_KAFKA_LIB") or REPO / ".cache" / "kafka" / KAFKA_VERSION)
    if not (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file() or not (lib / AGENT_JAR).is_file():
        raise KafkaClusterError(
            f"no Apache Kafka {KAFKA_VERSION} jars in {lib}: run `deploy/local/dev setup` (it fetches "
            f"them from Maven Central once), or point EPOCHWATCH_KAFKA_LIB at a folder holding them")
    return lib


def kafka_classpath() -> str:
    # the exporter is a shaded agent jar: loaded with -javaagent, kept off the classpath
    return os.pathsep.join(str(p) for p in sorted(kafka_lib().glob("*.jar")) if p.name != AGENT_JAR)


Sample = NamedTuple("Sample", [("name", str), ("labels", dict), ("value", float)])


def scrape(url: str, timeout_s: float = 3.0) -> list[Sample]:
    """The samples of one Prometheus text exposition (an exporter's /metrics), read by
    prometheus-client's parser (as the collector reads them)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    return [Sample(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


@dataclass
class KafkaNode:
    """One JVM: a broker or a controller (or a duplicate claiming a broker's id)."""

    node_id: int
    role: str                   # "broker" | "controller"
    dir: Path                   # its config, data and logs
    port: int                   # a broker's client listener; a controller's quorum listener
    metrics_port: int
    relays: dict[int, Relay] = field(default_factory=dict)    # broker: controller id -> relay
    link_ports: dict[int, int] = field(default_factory=dict)  # controller: broker id -> its listener
    sasl_port: int | None = None  # a broker's SASL_PLAINTEXT listener (KafkaCluster(sasl_users=...))
    client_relay: Relay | None = None  # in front of a broker's client listener (client_relays=True)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:  # a node keeps its ports and dir across restarts
        self.address = f"{LOOPBACK}:{self.port}"
        self.sasl_address = None if self.sasl_port is None else f"{LOOPBACK}:{self.sasl_port}"
        self.metrics_url = f"http://{LOOPBACK}:{self.metrics_port}/metrics"
        self.log_path = self.dir / "server.log"
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def advertised_address(self) -> str:
        """Where clients and other brokers reach a broker: its relay's address, if it has one."""
        return self.client_relay.address if self.client_relay is not None else self.address

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self, sig: int = signal.SIGKILL, timeout_s: float = 60.0) -> int | None:
        """Signal the JVM, wait (SIGKILL after timeout_s): its exit code, None if not running."""
        if self.proc is None:
            return None
        if self.pid is not None:
            os.kill(self.pid, sig)
            if sig != signal.SIGKILL:
                os.kill(self.pid, signal.SIGCONT)  # a paused JVM acts on SIGTERM once resumed
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def close(self) -> None:
        self.stop()
        for relay in [*self.relays.values(), *([self.client_relay] if self.client_relay else [])]:
            relay.close()

    def log_tail(self, lines: int = 40) -> str:
        # console.log holds the JVM's own output: what goes wrong before log4j runs
        parts = [f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
                 for path in (self.log_path, self.dir / "console.log") if path.exists()]
        return "\n".join(parts) or f"(node {self.node_id} wrote no log in {self.dir})"


class KafkaCluster:
    """Controllers and brokers as separate JVMs; a context manager, or start() / stop()."""

    def __init__(self, workdir: Path | str, controllers: int = 1, brokers: int = 3,
                 broker_overrides: dict[str, object] | None = None, heap: str = "256m",
                 sasl_users: dict[str, str] | None = None, client_relays: bool = False,
                 controller_overrides: dict[str, object] | None = None):
        """sasl_users (user -> password): every broker also listens with SASL_PLAINTEXT and the
        PLAIN mechanism (sasl_bootstrap_servers), next to its plaintext listener.
        client_relays: every broker is advertised at a relay in front of its plaintext listener,
        so that a test can make its port stop completing connections (silence_client_port).
        broker_overrides / controller_overrides: server.properties entries added to every broker /
        controller (an authorizer needs both: brokers forward ACL changes to the controllers)."""
        if not 1 <= controllers <= len(CONTROLLER_IDS) or brokers < 1:
            raise ValueError(f"1..3 controllers and at least one broker, not {controllers} and {brokers}")
        self.workdir = Path(workdir)
        self.heap = heap
        self.broker_overrides = dict(broker_overrides or {})
        self.controller_overrides = dict(controller_overrides or {})
        self.sasl_users = dict(sasl_users or {})
        self.client_relays = client_relays
        self.controller_ids = list(CONTROLLER_IDS[:controllers])
        self.broker_ids = list(range(1, brokers + 1))
        self.cluster_id = _random_cluster_id()
        self._nodes: dict[int, KafkaNode] = {}
        self._duplicates: list[KafkaNode] = []
        self._admin = None

    def start(self, timeout_s: float = 120.0) -> KafkaCluster:
        classpath = kafka_classpath()  # fails before any port or process
        try:
            for c in self.controller_ids:  # first: the brokers' relays lead to their listeners
                node = self._nodes[c] = self._new_node(c, "controller", c)
                node.link_ports = {b: free_port() for b in self.broker_ids}
            for b in self.broker_ids:
                node = self._nodes[b] = self._new_node(b, "broker", b)
                node.relays = {c: Relay((LOOPBACK, self._nodes[c].link_ports[b]), name=f"relay-{b}-{c}")
                               for c in self.controller_ids}
                if self.client_relays:
                    node.client_relay = Relay((LOOPBACK, node.port), name=f"client-relay-{b}")
            for node in self._nodes.values():
                self._write_config(node)
            self._format(self._nodes.values(), classpath)
            for node in self._nodes.values():
                self._spawn(node, classpath)
            self.wait_for_brokers(self.broker_ids, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every JVM (duplicates too) and close the relays: nothing is left running."""
        self._admin = None  # first: its reconnects to stopped brokers would log FAIL lines
        for node in [*self._duplicates, *self._nodes.values()]:
            node.close()
        self._duplicates.clear()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self._nodes[b].advertised_address for b in self.broker_ids)

    @property
    def sasl_bootstrap_servers(self) -> str:
        if not self.sasl_users:
            raise KafkaClusterError("no SASL listener: start the cluster with sasl_users={user: password}")
        return ",".join(self._nodes[b].sasl_address for b in self.broker_ids)

    @property
    def metrics_urls(self) -> dict[int, str]:
        return {node_id: node.metrics_url for node_id, node in self._nodes.items()}

    def client_address(self, broker_id: int) -> str:
        return self._broker(broker_id).advertised_address

    def log_path(self, node_id: int) -> Path:
        return self.node(node_id).log_path

    def pid(self, node_id: int) -> int | None:
        return self.node(node_id).pid

    def node(self, node_id: int) -> KafkaNode:
        if node_id not in self._nodes:
            raise KeyError(f"no node {node_id} (controllers {self.controller_ids}, brokers {self.broker_ids})")
        return self._nodes[node_id]

    def _running(self, node_id: int) -> KafkaNode:
        if self.node(node_id).pid is None:
            raise KafkaClusterError(f"node {node_id} is not running")
        return self._nodes[node_id]

    def _broker(self, broker_id: int) -> KafkaNode:
        if self.node(broker_id).role != "broker":
            raise KeyError(f"node {broker_id} is a controller")
        return self._nodes[broker_id]

    def pause(self, node_id: int) -> None:
        os.kill(self._running(node_id).pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self._running(node_id).pid, signal.SIGCONT)

    def kill(self, node_id: int) -> None:
        self.node(node_id).stop(signal.SIGKILL)

    def shutdown(self, node_id: int, timeout_s: float = 60.0) -> int | None:
        """SIGTERM: a broker shuts down under the controller's control. Returns the exit code."""
        return self.node(node_id).stop(signal.SIGTERM, timeout_s)

    def restart(self, node_id: int, wait: bool = True, timeout_s: float = 60.0) -> None:
        """Start the node again (shut down first if running): same id, log dir and ports. With wait,
        a broker runs again: after a kill, once the old registration's session expired."""
        node = self.node(node_id)
        node.stop(signal.SIGTERM)
        self._spawn(node, kafka_classpath())
        if wait and node.role == "broker":
            self.wait_for_brokers([node_id], timeout_s)

    def start_duplicate(self, broker_id: int) -> KafkaNode:
        """A second JVM claiming broker_id with its own dir, ports and exporter, through the
        original's relays (controllers advertise one per broker id); stop() stops it too."""
        self._broker(broker_id)
        node = self._new_node(broker_id, "broker", f"{broker_id}-duplicate-{len(self._duplicates) + 1}")
        self._duplicates.append(node)
        self._write_config(node)
        classpath = kafka_classpath()
        self._format([node], classpath)
        self._spawn(node, classpath)
        return node

    def cut_controller_link(self, broker_id: int) -> None:
        for relay in self._broker(broker_id).relays.values():
            relay.cut()

    def heal_controller_link(self, broker_id: int) -> None:
        for relay in self._broker(broker_id).relays.values():
            relay.heal()

    def silence_client_port(self, broker_id: int) -> None:
        """The broker's advertised port accepts TCP and never answers (a hung broker, a
        black-holing load balancer); open connections are closed. Needs client_relays=True."""
        self._client_relay(broker_id).cut(drop_connections=True)

    def restore_client_port(self, broker_id: int) -> None:
        self._client_relay(broker_id).heal()

    def _client_relay(self, broker_id: int) -> Relay:
        relay = self._broker(broker_id).client_relay
        if relay is None:
            raise KafkaClusterError("no client relays: start the cluster with client_relays=True")
        return relay

    def active_controller_id(self) -> int | None:
        """The raft leader as the running controllers' exporters report it (the highest epoch
        wins: a deposed leader may not know yet); None while no controller knows one."""
        best = (-1, None)
        for node in (self._nodes[c] for c in self.controller_ids if self._nodes[c].pid):
            raft = _gauges(node, "kafka_server_raftmetrics_current_")
            leader = int(raft.get("kafka_server_raftmetrics_current_leader", -1))
            epoch = int(raft.get("kafka_server_raftmetrics_current_epoch", -1))
            if leader >= 0 and epoch > best[0]:
                best = (epoch, leader)
        return best[1]

    def stop_active_controller(self, timeout_s: float = 60.0) -> int:
        """Shut the active controller down (SIGTERM); its id."""
        leader = self.active_controller_id()
        if leader is None:
            raise KafkaClusterError("no active controller to stop")
        self.shutdown(leader, timeout_s)
        return leader

    def unfenced_broker_ids(self, timeout_s: float = 5.0) -> set[int]:
        """The brokers the cluster's metadata lists (fenced ones are left out); empty on error.
        list_topics, not describe_cluster: librdkafka 2.16's describe_cluster aborts the process
        (assertion `rko_result`) on an answer listing no broker, as a lone fenced broker gives."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        try:
            return set(self._admin.list_topics(timeout=timeout_s).brokers)
        except Exception:  # KafkaException while no broker answers
            return set()

    def wait_for_brokers(self, broker_ids: list[int], timeout_s: float) -> None:
        """Until each broker's own BrokerState is 3 (running: a restarted broker's old registration
        may still be listed; no client FAIL lines) and the cluster's metadata lists them all."""
        deadline, wanted, state = time.monotonic() + timeout_s, set(broker_ids), "kafka_server_kafkaserver_brokerstate"
        while missing := {b for b in wanted if _gauges(self._nodes[b], state).get(state) != 3}:
            self._check_progress(deadline, missing)
            time.sleep(0.2)
        while missing := wanted - self.unfenced_broker_ids():
            self._check_progress(deadline, missing)
            time.sleep(0.2)

    def _check_progress(self, deadline: float, missing: set[int]) -> None:
        for node in self._nodes.values():
            if node.proc is not None and node.proc.poll() is not None:
                raise KafkaClusterError(f"{node.role} {node.node_id} exited with {node.proc.returncode}\n"
                                        + node.log_tail())
        if time.monotonic() > deadline:
            raise KafkaClusterError(f"brokers {sorted(missing)} not ready in time\n"
                                    + "\n".join(self._nodes[b].log_tail() for b in sorted(missing)))

    def _new_node(self, node_id: int, role: str, dirname: object) -> KafkaNode:
        sasl_port = free_port() if role == "broker" and self.sasl_users else None
        return KafkaNode(node_id, role, self.workdir / str(dirname), free_port(), free_port(), sasl_port=sasl_port)

    def _write_config(self, node: KafkaNode) -> None:
        (node.dir / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in node_properties(self, node).items()))

    def _java(self, node: KafkaNode, classpath: str, main: list[str], log: Path, agent: bool) -> list[str]:
        agent_flag = [f"-javaagent:{kafka_lib() / AGENT_JAR}={LOOPBACK}:{node.metrics_port}:"
                      f"{DEPLOY / 'jmx-exporter.yaml'}"] if agent else []
        return [*_dies_with_this_process(), "java", f"-Xmx{self.heap}", *JVM_FLAGS, *agent_flag,
                f"-Dlog4j2.configurationFile={DEPLOY / 'log4j2.yaml'}", f"-Depochwatch.kafka.log={log}",
                "-cp", classpath, *main]

    def _format(self, nodes, classpath: str) -> None:
        """kafka-storage format (static voters, so no --initial-controllers), all nodes at once."""
        procs = [(node, subprocess.Popen(
            self._java(node, classpath, ["kafka.tools.StorageTool", "format", "--cluster-id", self.cluster_id,
                                         "--config", str(node.dir / "server.properties")],
                       node.dir / "format.log", agent=False),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True))
            for node in nodes]
        for node, proc in procs:
            output = proc.communicate(timeout=120)[0]
            if proc.returncode != 0:
                raise KafkaClusterError(f"formatting node {node.node_id}'s storage failed:\n{output}")

    def _spawn(self, node: KafkaNode, classpath: str) -> None:
        # Popen in the caller's thread: setpriv's parent-death signal fires when the *thread*
        # that started the JVM ends, so nodes must never be started from a short-lived thread.
        with open(node.dir / "console.log", "ab") as console:
            node.proc = subprocess.Popen(
                self._java(node, classpath, ["kafka.Kafka", str(node.dir / "server.properties")],
                           node.log_path, agent=True),
                stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _random_cluster_id() -> str:
    """A Kafka Uuid in its base64 form; one starting with '-' would read as a CLI flag."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _gauges(node: KafkaNode, prefix: str) -> dict[str, float]:
    """A node's samples named prefix*; none while its exporter does not answer (paused, starting)."""
    try:
        return {s.name: s.value for s in scrape(node.metrics_url, timeout_s=2) if s.name.startswith(prefix)}
    except OSError:
        return {}
