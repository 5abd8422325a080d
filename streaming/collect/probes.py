"""The Kafka protocol calls of the collector, through kafka-python (its message types are
generated from Kafka's own JSON schemas): DescribeQuorum and DescribeCluster with fenced brokers
(KIP-836, KIP-1073), and a Metadata request sent to one chosen broker, which neither
confluent-kafka nor the Java Admin client can do.

Results are plain frozen dataclasses so that ``derive`` stays pure and testable without Kafka.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping

# librdkafka's names (the config's ``client:`` section, shared with the job) -> kafka-python's
_CLIENT_OPTIONS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


class ProbeError(RuntimeError):
    """A call did not complete; ``reason`` is a metadata_request_failed reason of the contract."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class QuorumState:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    # observers are the brokers: node id -> (log end offset fetched, last fetch time ms)
    observers: Mapping[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    fenced: bool


@dataclass(frozen=True)
class ClusterState:
    cluster_id: str
    brokers: Mapping[int, BrokerRegistration]


@dataclass(frozen=True)
class MetadataAnswer:
    """What one broker answered to ``Metadata(all topics)``."""

    broker_id: int
    cluster_id: str | None
    error_code: int
    broker_ids: tuple[int, ...]
    leader_epochs: Mapping[tuple[str, int], int]  # (topic id or name, partition) -> leader epoch


def client_options(client: Mapping[str, str]) -> dict:
    """kafka-python settings for the librdkafka-named ``client`` section; unknown names are
    refused here so that a SASL setting is never silently ignored."""
    out = {}
    for name, value in client.items():
        if name not in _CLIENT_OPTIONS:
            from streaming.config import ConfigError
            raise ConfigError(f"collect.client.{name}", "is not a setting the collector's protocol client knows",
                              f"use one of {', '.join(sorted(_CLIENT_OPTIONS))}")
        out[_CLIENT_OPTIONS[name]] = value
    if "security_protocol" in out:
        out["security_protocol"] = out["security_protocol"].upper()
    return out


def _answer(broker_id: int, response) -> MetadataAnswer:
    epochs = {(_topic_key(t), p.partition_index): p.leader_epoch
              for t in response.topics if t.error_code == 0 for p in t.partitions if p.error_code == 0}
    return MetadataAnswer(broker_id, response.cluster_id, getattr(response, "error_code", 0),
                          tuple(sorted(b.node_id for b in response.brokers)), epochs)


def _topic_key(topic) -> str:
    """The topic id (Metadata v10+), so that a deleted and re-created topic is another topic."""
    topic_id = getattr(topic, "topic_id", None)
    return str(topic_id) if topic_id is not None and topic_id.int != 0 else topic.name


def _reason(exc: Exception) -> str:
    import kafka.errors as errors

    if isinstance(exc, errors.KafkaConnectionError):
        return "DISCONNECTED"
    if isinstance(exc, (errors.KafkaTimeoutError, errors.RequestTimedOutError, TimeoutError)):
        return "REQUEST_TIMEOUT"
    if isinstance(exc, (errors.NodeNotReadyError, errors.UnknownBrokerIdError)):
        return "NO_NODE_AVAILABLE"
    return "DISCONNECTED"


class ClusterProbe:
    """One kafka-python admin client to the watched cluster, kept across rounds while it answers.

    kafka-python bootstraps from one server picked at random and waits for it up to the whole
    bootstrap timeout (30 s by default): a paused broker on the list would hold a fresh collector at
    "unreachable" for rounds on end while the other brokers answer. So each server is tried in
    turn, one request timeout each, the brokers learned from earlier answers after the configured
    ones; and a client that failed ``rebuild_after`` calls in a row is dropped and bootstrapped
    anew (its connections may all lead to processes that are gone or stopped)."""

    def __init__(self, bootstrap_servers: str, client_id: str, timeout_ms: int, client: Mapping[str, str] | None = None,
                 rebuild_after: int = 3, admin_factory=None):
        self._servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
        self._learned: list[str] = []
        self._config = dict(client_id=client_id, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms,
                            reconnect_backoff_max_ms=1000, **client_options(client or {}))
        self._timeout_ms = timeout_ms
        self._rebuild_after = rebuild_after
        self._admin_factory = admin_factory
        self._admin = None
        self._next_server = 0
        self._answered_by: int | None = None
        self.failures_in_a_row = 0
        self.bootstraps = 0

    def _candidates(self) -> list[str]:
        servers = self._servers + [s for s in self._learned if s not in self._servers]
        first = self._next_server % len(servers)
        return servers[first:] + servers[:first]

    def _client(self):
        if self._admin is not None:
            return self._admin
        factory = self._admin_factory
        if factory is None:
            from kafka import KafkaAdminClient as factory

            logging.getLogger("kafka").setLevel(logging.CRITICAL)  # failures are reported as events
        tried = []
        for server in self._candidates():
            self._next_server += 1  # the next bootstrap starts after this one, whatever happens
            try:
                self._admin = factory(bootstrap_servers=server, **self._config)
            except Exception as exc:  # noqa: BLE001 - any failure to bootstrap is "no node"
                tried.append(f"{server}: {type(exc).__name__}: {exc}")
                continue
            self.bootstraps += 1
            manager_config = getattr(getattr(self._admin, "_manager", None), "config", None)
            if manager_config is not None:
                # a connection's setup (its ApiVersions answer) may take 10 s by default, and the
                # admin client takes no setting for it: a paused broker would cost that per call
                manager_config["socket_connection_setup_timeout_ms"] = self._timeout_ms
                manager_config["socket_connection_setup_timeout_max_ms"] = self._timeout_ms
            return self._admin
        raise ProbeError("NO_NODE_AVAILABLE", "; ".join(tried))

    def _call(self, what: str, fn):
        try:
            result = fn(self._client())
        except Exception as exc:  # noqa: BLE001 - the collector must outlive every answer
            self.failures_in_a_row += 1
            if self._admin is not None and self.failures_in_a_row >= self._rebuild_after:
                self.close()
            if isinstance(exc, ProbeError):
                raise
            raise ProbeError(_reason(exc), f"{what}: {type(exc).__name__}: {exc}") from None
        self.failures_in_a_row = 0
        return result

    def _ask(self, what: str, request):
        """``request``'s response from one broker: the one that answered last, else each known
        broker in turn, one request timeout each. (kafka-python's own admin calls go to a random
        broker without a request in flight and wait for it 10 s: a paused broker on the list
        would fail DescribeCluster round after round while the others could answer.)"""
        async def ask(admin):
            manager = admin._manager
            known = sorted(b.node_id for b in manager.cluster.brokers()) or [
                b.node_id for b in manager.cluster.bootstrap_brokers()]
            order = sorted(known, key=lambda n: n != self._answered_by)
            failed = None
            for node in order:
                try:
                    response = await manager.send(request, node_id=node, request_timeout_ms=self._timeout_ms)
                except Exception as exc:  # noqa: BLE001 - the next broker may answer
                    failed = failed or exc
                    continue
                self._answered_by = node
                return response
            raise failed or RuntimeError("no broker known")

        return self._call(what, lambda a: a._manager.run(ask, a))

    def quorum(self) -> QuorumState:
        from kafka.protocol.admin import DescribeQuorumRequest

        topic = DescribeQuorumRequest.TopicData
        request = DescribeQuorumRequest(topics=[topic(topic_name="__cluster_metadata",
                                                      partitions=[topic.PartitionData(partition_index=0)])])
        response = self._ask("DescribeQuorum", request)
        part = response.topics[0].partitions[0]
        if response.error_code or part.error_code:
            raise ProbeError("REQUEST_TIMEOUT", f"DescribeQuorum: error {response.error_code or part.error_code}")
        observers = {o.replica_id: (o.log_end_offset, o.last_fetch_timestamp) for o in part.observers}
        return QuorumState(part.leader_id, part.leader_epoch, part.high_watermark, observers)

    def cluster(self) -> ClusterState:
        from kafka.protocol.admin import DescribeClusterRequest

        response = self._ask("DescribeCluster", DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                      include_fenced_brokers=True))
        if response.error_code:
            raise ProbeError("REQUEST_TIMEOUT", f"DescribeCluster: error {response.error_code}: {response.error_message}")
        brokers = {b.broker_id: BrokerRegistration(b.broker_id, b.host, b.port, bool(getattr(b, "is_fenced", False)))
                   for b in response.brokers}
        self._learned = [f"{b.host}:{b.port}" for b in brokers.values()]
        return ClusterState(response.cluster_id, brokers)

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # noqa: BLE001 - a client that cannot close is dropped all the same
                pass


class BrokerProbe(ClusterProbe):
    """A client of one broker alone, for the Metadata question asked of that broker itself.

    kafka-python sends to the node ids it learned from Metadata answers, and healthy brokers leave
    a fenced broker out of those: the broker cut off from the controller, whose answers matter
    most, would be unreachable. A client bootstrapped from that broker's address alone reaches it
    as its bootstrap node, whatever the others say about it."""

    def metadata(self, broker_id: int) -> MetadataAnswer:
        from kafka.protocol.metadata import MetadataRequest

        request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)

        async def ask(admin):
            # kafka-python's own per-broker calls (describe_log_dirs) go through the same manager
            node = admin._manager.cluster.bootstrap_brokers()[0].node_id
            return await admin._manager.send(request, node_id=node, request_timeout_ms=self._timeout_ms)

        return _answer(broker_id, self._call(f"Metadata from broker {broker_id}", lambda a: a._manager.run(ask, a)))

