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
    """One kafka-python admin client to the watched cluster, kept across rounds."""

    def __init__(self, bootstrap_servers: str, client_id: str, timeout_ms: int, client: Mapping[str, str] | None = None):
        self._config = dict(bootstrap_servers=bootstrap_servers, client_id=client_id, request_timeout_ms=timeout_ms,
                            reconnect_backoff_max_ms=1000, **client_options(client or {}))
        self._timeout_ms = timeout_ms
        self._admin = None

    def _client(self):
        if self._admin is None:
            from kafka import KafkaAdminClient

            logging.getLogger("kafka").setLevel(logging.CRITICAL)  # failures are reported as events
            try:
                self._admin = KafkaAdminClient(**self._config)
            except Exception as exc:  # noqa: BLE001 - any failure to bootstrap is "no node"
                raise ProbeError("NO_NODE_AVAILABLE", f"{type(exc).__name__}: {exc}") from None
        return self._admin

    def _call(self, what: str, fn):
        try:
            return fn(self._client())
        except ProbeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the collector must outlive every answer
            raise ProbeError(_reason(exc), f"{what}: {type(exc).__name__}: {exc}") from None

    def quorum(self) -> QuorumState:
        result = self._call("DescribeQuorum", lambda a: a.describe_metadata_quorum())
        part = result["topics"][0]["partitions"][0]
        if part.get("error"):
            raise ProbeError("REQUEST_TIMEOUT", f"DescribeQuorum: {part['error']}")
        observers = {o["replica_id"]: (o["log_end_offset"], o["last_fetch_timestamp"])
                     for o in part.get("observers", [])}
        return QuorumState(part["leader_id"], part["leader_epoch"], part["high_watermark"], observers)

    def cluster(self) -> ClusterState:
        result = self._call("DescribeCluster", lambda a: a.describe_cluster())
        brokers = {b["broker_id"]: BrokerRegistration(b["broker_id"], b["host"], b["port"], bool(b.get("is_fenced")))
                   for b in result["brokers"]}
        return ClusterState(result["cluster_id"], brokers)

    def close(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            finally:
                self._admin = None


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

