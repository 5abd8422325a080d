"""The alert catalog, pure: every alert's name, entity labels, severity, summary and pending period,
and the Alertmanager-style record an alert becomes (labels, annotations, a stable fingerprint).

A record's labels are its identity: ``alertname``, ``cluster`` (the cluster id), ``severity`` and
the rule's entity labels. How a deployment names and adds to them (``kafka_cluster``, an alias,
team labels) is presentation, applied where alerts leave the job (streaming.sinks.labels); the
fingerprint is computed here, from the identity, so it never changes with that configuration.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping

from streaming.config import RUNBOOK_BASE_URL, RuleSettings

RUNBOOK_BASE = RUNBOOK_BASE_URL   # rules.runbook.base.url's default: the runbooks in this repository


class Severity(enum.IntEnum):
    """Ordered, as in Burrow: a higher value is worse."""

    info = 0
    warning = 1
    critical = 2


@dataclass(frozen=True)
class Rule:
    name: str
    labels: tuple[str, ...]   # the entity labels its alerts carry besides alertname, cluster, severity
    severity: Severity
    summary: str
    one_shot: bool = False
    pending_setting: str | None = None  # RuleSettings attribute holding the pending period
    # a per-client rule's summary when its clients' incidents are rolled up (streaming.rules.rollup):
    # {client_count}, and {scope}: "broker 3" or "cluster c1"
    clients_summary: str | None = None

    @property
    def per_client(self) -> bool:
        return self.clients_summary is not None

    def pending_ms(self, settings: RuleSettings) -> int:
        return getattr(settings, self.pending_setting) if self.pending_setting else 0


_BROKER, _CLIENT, _NODE = ("broker_id",), ("client_id",), ("node_id",)
_RULES = [
    Rule("BrokerHeartbeatTimeout", _BROKER, Severity.warning,
         "Broker {broker_id} stopped heartbeating to the controller", pending_setting="heartbeat_timeout_pending_ms"),
    Rule("BrokerIncarnationRegression", _BROKER, Severity.warning,
         "Broker {broker_id}: heartbeat from an old incarnation"),
    Rule("DuplicateBrokerId", _BROKER, Severity.critical, "Two live processes claim broker id {broker_id}"),
    Rule("BrokerRestarted", ("broker_id", "incarnation_id"), Severity.info,
         "Broker {broker_id} restarted (incarnation {incarnation_id})", one_shot=True),
    Rule("BrokerStuckStopping", _BROKER, Severity.warning, "Broker {broker_id} is stuck in controlled shutdown"),
    Rule("BrokerNotReturned", _BROKER, Severity.warning, "Broker {broker_id} shut down and has not come back"),
    Rule("BrokerFlapping", _BROKER, Severity.warning, "Broker {broker_id} keeps flapping between ACTIVE and INACTIVE"),
    Rule("ClusterSilent", (), Severity.critical, "No broker heartbeat from cluster {cluster}"),
    Rule("ControllerFailover", ("controller_id", "controller_epoch"), Severity.info,
         "Controller moved to {controller_id} (epoch {controller_epoch})", one_shot=True),
    Rule("MetadataEpochRegression", ("controller_id",), Severity.critical,
         "Controller {controller_id} issued a metadata epoch that did not increase"),
    Rule("BrokerMetadataLag", _BROKER, Severity.critical, "Broker {broker_id} serves metadata behind the controller"),
    Rule("StaleMetadataResponse", ("client_id", "broker_id"), Severity.warning,
         "Client {client_id} got stale metadata from broker {broker_id}",
         clients_summary="{client_count} client(s) got stale metadata from {scope}"),
    Rule("OffsetCommitEpochRegression", ("group_id", "topic", "partition"), Severity.warning,
         "Group {group_id} committed {topic}-{partition} with an older metadata epoch"),
    Rule("ClientRebootstrapOverdue", _CLIENT, Severity.warning,
         "Client {client_id} has had no metadata past the rebootstrap trigger",
         clients_summary="{client_count} client(s) of {scope} have had no metadata past the rebootstrap trigger"),
    Rule("RebootstrapRequired", _NODE, Severity.warning, "Node {node_id} answers REBOOTSTRAP_REQUIRED"),
    Rule("ClusterIdMismatch", _CLIENT, Severity.critical, "Client {client_id} rebootstrapped into another cluster",
         clients_summary="{client_count} client(s) of {scope} rebootstrapped into another cluster"),
    Rule("ConnectionSetupTimeoutStorm", _NODE, Severity.warning,
         "Connection setup timeouts to node {node_id} from many clients"),
]
RULES: Mapping[str, Rule] = {r.name: r for r in _RULES}
# The label that carries the cluster id in the records the rules emit. It is part of the identity
# the fingerprint is computed from, so it keeps this name whatever the deployment calls the
# label: streaming.sinks.labels renames it where alerts leave the job.
CLUSTER_LABEL = "cluster"
# Every label name a rule sets: a deployment's own labels must not take one of these
RULE_LABELS = frozenset({"alertname", "severity", CLUSTER_LABEL, *(name for r in _RULES for name in r.labels)})


def fingerprint(alertname: str, labels: Iterable[tuple[str, str]], starts_at: int) -> str:
    text = alertname + "|" + "|".join(f"{k}={v}" for k, v in sorted(labels)) + f"|{starts_at}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def runbook_url(alertname: str, base: str = RUNBOOK_BASE) -> str:
    """The alert's section of the runbook page (docs/alerts.md: one heading per alert)."""
    return f"{base}#{alertname.lower()}"


def alert_record(rule: Rule, cluster_id: str, labels: tuple[tuple[str, str], ...], status: str,
                 starts_at: int, event_time: int, description: str, ends_at: int | None = None,
                 runbook_base: str = RUNBOOK_BASE) -> dict:
    label_map = {"alertname": rule.name, CLUSTER_LABEL: cluster_id, "severity": rule.severity.name, **dict(labels)}
    fp = fingerprint(rule.name, label_map.items(), starts_at)
    return {
        "event_type": "alert",
        "event_id": f"{fp}:{status}",
        "cluster_id": cluster_id,
        "event_time": int(event_time),
        "alertname": rule.name,
        "severity": rule.severity.name,
        "status": status,
        "labels": label_map,
        "annotations": {
            "summary": rule.summary.format(**label_map),
            "description": description or rule.summary.format(**label_map),
            "runbook_url": runbook_url(rule.name, runbook_base),
        },
        "starts_at": int(starts_at),
        "ends_at": None if ends_at is None else int(ends_at),
        "fingerprint": fp,
    }
