"""Alert catalog and lifecycle, pure (no Spark): conditions in, alert records out.

Rules report the *conditions* that hold at ``now`` (alertname + identity labels + since).
:class:`AlertTracker` turns them into Alertmanager-style records: a condition is pending until it
has held for the rule's pending period, then one ``firing`` record is emitted for the incident;
when the condition stops holding one ``resolved`` record follows. One-shot (info) alerts are
emitted once and never resolved by a record.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from streaming.config import RuleSettings

RUNBOOK_BASE = "https://github.com/epochwatch/epochwatch/blob/main/docs/alerts.md"


class Severity(enum.IntEnum):
    """Ordered, as in Burrow: a higher value is worse."""

    info = 0
    warning = 1
    critical = 2


@dataclass(frozen=True)
class Rule:
    name: str
    severity: Severity
    summary: str
    one_shot: bool = False
    pending_setting: str | None = None  # RuleSettings attribute holding the pending period

    def pending_ms(self, settings: RuleSettings) -> int:
        return getattr(settings, self.pending_setting) if self.pending_setting else 0


_RULES = [
    Rule("BrokerHeartbeatTimeout", Severity.warning, "Broker {broker_id} stopped heartbeating to the controller",
         pending_setting="heartbeat_timeout_pending_ms"),
    Rule("BrokerIncarnationRegression", Severity.warning, "Broker {broker_id}: heartbeat from an old incarnation"),
    Rule("DuplicateBrokerId", Severity.critical, "Two live processes claim broker id {broker_id}"),
    Rule("BrokerRestarted", Severity.info, "Broker {broker_id} restarted (incarnation {incarnation_id})", one_shot=True),
    Rule("BrokerStuckStopping", Severity.warning, "Broker {broker_id} is stuck in controlled shutdown"),
    Rule("BrokerNotReturned", Severity.warning, "Broker {broker_id} shut down and has not come back"),
    Rule("BrokerFlapping", Severity.warning, "Broker {broker_id} keeps flapping between ACTIVE and INACTIVE"),
    Rule("ClusterSilent", Severity.critical, "No broker heartbeat from cluster {cluster}"),
    Rule("ControllerFailover", Severity.info, "Controller moved to {controller_id} (epoch {controller_epoch})", one_shot=True),
    Rule("MetadataEpochRegression", Severity.critical, "Controller {controller_id} issued a metadata epoch that did not increase"),
    Rule("BrokerMetadataLag", Severity.critical, "Broker {broker_id} serves metadata behind the controller"),
    Rule("StaleMetadataResponse", Severity.warning, "Client {client_id} got stale metadata from broker {broker_id}"),
    Rule("OffsetCommitEpochRegression", Severity.warning, "Group {group_id} committed {topic}-{partition} with an older metadata epoch"),
    Rule("ClientRebootstrapOverdue", Severity.warning, "Client {client_id} has had no metadata past the rebootstrap trigger"),
    Rule("RebootstrapRequired", Severity.warning, "Node {node_id} answers REBOOTSTRAP_REQUIRED"),
    Rule("ClusterIdMismatch", Severity.critical, "Client {client_id} rebootstrapped into another cluster"),
    Rule("ConnectionSetupTimeoutStorm", Severity.warning, "Connection setup timeouts to node {node_id} from many clients"),
]
RULES: Mapping[str, Rule] = {r.name: r for r in _RULES}


@dataclass(frozen=True)
class Condition:
    """A rule's finding at one moment: it holds for these labels since ``since_ms``."""

    alertname: str
    labels: tuple[tuple[str, str], ...]
    since_ms: int
    description: str = ""

    @property
    def identity(self) -> tuple:
        return (self.alertname, self.labels)


def condition(alertname: str, since_ms: int, description: str = "", **labels) -> Condition:
    return Condition(alertname, tuple(sorted((k, str(v)) for k, v in labels.items())), int(since_ms), description)


@dataclass
class OpenAlert:
    alertname: str
    labels: tuple[tuple[str, str], ...]
    since_ms: int
    firing: bool = False
    description: str = ""

    @property
    def identity(self) -> tuple:
        return (self.alertname, self.labels)


def fingerprint(alertname: str, labels: Iterable[tuple[str, str]], starts_at: int) -> str:
    text = alertname + "|" + "|".join(f"{k}={v}" for k, v in sorted(labels)) + f"|{starts_at}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def alert_record(rule: Rule, cluster_id: str, labels: tuple[tuple[str, str], ...], status: str,
                 starts_at: int, event_time: int, description: str, ends_at: int | None = None) -> dict:
    label_map = {"alertname": rule.name, "cluster": cluster_id, "severity": rule.severity.name, **dict(labels)}
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
            "runbook_url": f"{RUNBOOK_BASE}#{rule.name.lower()}",
        },
        "starts_at": int(starts_at),
        "ends_at": None if ends_at is None else int(ends_at),
        "fingerprint": fp,
    }


@dataclass
class AlertTracker:
    """Lifecycle of one state key's alerts. ``open`` is the persisted part."""

    cluster_id: str
    settings: RuleSettings
    open: dict[tuple, OpenAlert] = field(default_factory=dict)

    def update(self, conditions: Iterable[Condition], now: int) -> list[dict]:
        """Diff the conditions holding at ``now`` against the open alerts; return new records."""
        records: list[dict] = []
        seen = set()
        for cond in conditions:
            rule = RULES[cond.alertname]
            if rule.one_shot:
                records.append(alert_record(rule, self.cluster_id, cond.labels, "firing", cond.since_ms,
                                            max(now, cond.since_ms), cond.description))
                continue
            seen.add(cond.identity)
            alert = self.open.get(cond.identity)
            if alert is None:
                alert = self.open[cond.identity] = OpenAlert(cond.alertname, cond.labels, cond.since_ms)
            alert.description = cond.description or alert.description
            fire_at = alert.since_ms + rule.pending_ms(self.settings)
            if not alert.firing and now >= fire_at:
                alert.firing = True
                records.append(alert_record(rule, self.cluster_id, alert.labels, "firing", alert.since_ms,
                                            max(now, fire_at), alert.description))
        for identity in [i for i in self.open if i not in seen]:
            alert = self.open.pop(identity)
            if alert.firing:
                rule = RULES[alert.alertname]
                records.append(alert_record(rule, self.cluster_id, alert.labels, "resolved", alert.since_ms,
                                            now, alert.description, ends_at=now))
        return records

    def next_deadline(self) -> int | None:
        """When a pending alert becomes due (None if nothing is pending)."""
        due = [a.since_ms + RULES[a.alertname].pending_ms(self.settings) for a in self.open.values() if not a.firing]
        return min(due) if due else None

    # persistence as plain tuples (the processor stores them in a ListState)
    def to_rows(self) -> list[tuple]:
        return [(a.alertname, json.dumps(a.labels), a.since_ms, a.firing, a.description) for a in self.open.values()]

    @classmethod
    def from_rows(cls, cluster_id: str, settings: RuleSettings, rows: Iterable[tuple]) -> "AlertTracker":
        tracker = cls(cluster_id, settings)
        for name, labels_json, since, firing, description in rows:
            labels = tuple(tuple(p) for p in json.loads(labels_json))
            alert = OpenAlert(name, labels, int(since), bool(firing), description or "")
            tracker.open[alert.identity] = alert
        return tracker
