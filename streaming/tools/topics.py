"""The Kafka topics epochwatch uses and the ACLs its principals need, from the settings.

Pure: ``topic_plan`` and ``acl_plan`` describe what a cluster needs, and the ``*_commands``
functions spell it in Kafka's own tools (kafka-topics.sh, kafka-acls.sh), so that an operator
can read, review and run them. ``epochwatch topics`` prints them, or creates the topics itself
(streaming.commands.topics).

- events: read by the job; written by the collector and the instrumented applications. Any
  number of partitions works (the producers key by entity, docs/events.md).
- alerts: written and, at start-up, read back by the job (the alert history that re-seeds
  Alertmanager); key = the incident's fingerprint, so compaction keeps each incident's latest
  record (docs/operations.md, Restarts).
- dlq: written by the job (malformed records, raw bytes and reason headers): kept long enough
  to look at them after a weekend.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Mapping

from streaming.config import Settings

DEFAULT_EVENTS_PARTITIONS = 12
OUTPUT_PARTITIONS = 3          # alerts and dead letters: a few records a minute at most
DEFAULT_REPLICATION = 3
DEFAULT_DLQ_RETENTION_MS = 14 * 24 * 3600 * 1000
JOB_GROUP_PREFIX = "epochwatch-"   # the source's epochwatch-kafka-source-*, the history's epochwatch-alert-history


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class AclSpec:
    principal: str
    operation: str                 # READ | WRITE | DESCRIBE (Kafka's AclOperation names)
    resource_type: str             # TOPIC | GROUP | CLUSTER
    resource_name: str
    pattern: str = "LITERAL"       # LITERAL | PREFIXED
    why: str = ""


def topic_plan(settings: Settings, events_partitions: int = DEFAULT_EVENTS_PARTITIONS,
               replication_factor: int = DEFAULT_REPLICATION,
               dlq_retention_ms: int = DEFAULT_DLQ_RETENTION_MS) -> list[TopicSpec]:
    """The three topics of ``settings.kafka``; min.insync.replicas 2 where there are 3+ replicas,
    as the job's producers ask for acks=all."""
    if events_partitions < 1 or replication_factor < 1 or dlq_retention_ms < 1:
        raise ValueError("partitions, replication factor and retention must be at least 1")
    durable = {"min.insync.replicas": "2"} if replication_factor >= 3 else {}
    k = settings.kafka
    return [
        TopicSpec(k.events_topic, events_partitions, replication_factor, dict(durable),
                  "telemetry events in (the job reads, the collector and instrumented clients write)"),
        TopicSpec(k.alerts_topic, OUTPUT_PARTITIONS, replication_factor, {"cleanup.policy": "compact", **durable},
                  "alert records out, key = incident fingerprint; compacted: the latest record per incident"),
        TopicSpec(k.dlq_topic, OUTPUT_PARTITIONS, replication_factor,
                  {"cleanup.policy": "delete", "retention.ms": str(dlq_retention_ms), **durable},
                  "malformed input records (raw bytes, reason headers)"),
    ]


def default_principal(client: Mapping[str, str], fallback: str) -> str:
    """User:<sasl.username> when the client logs in with SASL, else ``fallback``."""
    user = client.get("sasl.username")
    return f"User:{user}" if user and "${" not in user else fallback


def acl_plan(settings: Settings, job: str, collector: str) -> dict[str, list[AclSpec]]:
    """Bootstrap servers -> the ACLs to add on that cluster: the events cluster (job, collector's
    producer) and the watched cluster (the collector's probes), which may be the same."""
    k, c = settings.kafka, settings.collect
    group = k.client.get("group.id")
    events_cluster = [
        AclSpec(job, "READ", "TOPIC", k.events_topic, why="the job reads the events"),
        AclSpec(job, "DESCRIBE", "TOPIC", k.events_topic, why="... and lists their partitions and offsets"),
        AclSpec(job, "WRITE", "TOPIC", k.alerts_topic, why="alert records"),
        AclSpec(job, "READ", "TOPIC", k.alerts_topic, why="the alert history read at start-up"),
        AclSpec(job, "DESCRIBE", "TOPIC", k.alerts_topic),
        AclSpec(job, "WRITE", "TOPIC", k.dlq_topic, why="dead letters"),
        AclSpec(job, "DESCRIBE", "TOPIC", k.dlq_topic),
        AclSpec(job, "READ", "GROUP", JOB_GROUP_PREFIX, "PREFIXED",
                why="the job's consumers' group ids (it assigns partitions itself and commits nothing)"),
        *([AclSpec(job, "READ", "GROUP", group, why="kafka.client group.id")] if group else []),
        AclSpec(collector, "WRITE", "TOPIC", k.events_topic, why="the collector produces the events"),
        AclSpec(collector, "DESCRIBE", "TOPIC", k.events_topic),
    ]
    watched = [
        AclSpec(collector, "DESCRIBE", "CLUSTER", "kafka-cluster", why="DescribeCluster, DescribeQuorum"),
        AclSpec(collector, "DESCRIBE", "TOPIC", "*", why="Metadata of every topic, from every broker"),
    ]
    if c.offset_commits == "on":
        watched += [
            AclSpec(collector, "READ", "TOPIC", "__consumer_offsets", why="collect.offset.commits: on"),
            AclSpec(collector, "READ", "GROUP", f"{c.client_id}-commits-", "PREFIXED",
                    why="the commit reader's own group"),
        ]
    watched_servers = c.bootstrap_servers or k.bootstrap_servers
    if watched_servers == k.bootstrap_servers:
        return {k.bootstrap_servers: events_cluster + watched}
    return {k.bootstrap_servers: events_cluster, watched_servers: watched}


def _admin_args(bootstrap: str, command_config: str | None) -> list[str]:
    return ["--bootstrap-server", bootstrap, *(["--command-config", command_config] if command_config else [])]


def kafka_topics_commands(topics: list[TopicSpec], bootstrap: str, command_config: str | None = None) -> list[str]:
    """One ``kafka-topics.sh --create --if-not-exists`` line per topic."""
    lines = []
    for t in topics:
        configs = [arg for name, value in sorted(t.configs.items()) for arg in ("--config", f"{name}={value}")]
        lines.append(shlex.join(["kafka-topics.sh", *_admin_args(bootstrap, command_config), "--create",
                                 "--if-not-exists", "--topic", t.name, "--partitions", str(t.partitions),
                                 "--replication-factor", str(t.replication_factor), *configs]))
    return lines


_RESOURCE_FLAGS = {"TOPIC": "--topic", "GROUP": "--group"}


def kafka_acls_commands(acls: list[AclSpec], bootstrap: str, command_config: str | None = None) -> list[str]:
    """``kafka-acls.sh --add`` lines, one per principal, resource and pattern (its operations together)."""
    grouped: dict[tuple, list[str]] = {}
    for a in acls:
        grouped.setdefault((a.principal, a.resource_type, a.resource_name, a.pattern), []).append(a.operation)
    lines = []
    for (principal, kind, name, pattern), operations in grouped.items():
        resource = ["--cluster"] if kind == "CLUSTER" else [_RESOURCE_FLAGS[kind], name]
        ops = [arg for op in operations for arg in ("--operation", op.capitalize())]
        pattern_args = ["--resource-pattern-type", pattern.lower()] if pattern != "LITERAL" else []
        lines.append(shlex.join(["kafka-acls.sh", *_admin_args(bootstrap, command_config), "--add",
                                 "--allow-principal", principal, *ops, *resource, *pattern_args]))
    return lines
