"""Alert lifecycle, pure (no Spark): conditions in, alert records out.

Rules report the *conditions* that hold at ``now`` (alertname + identity labels + since).
:class:`AlertTracker` turns them into Alertmanager-style records (rules/catalog.py): a condition is
pending until it has held for the rule's pending period, then one ``firing`` record is emitted for
the incident; when the condition stops holding one ``resolved`` record follows. One-shot (info)
alerts are emitted once and never resolved by a record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from streaming.config import RuleSettings
from streaming.rules.catalog import RULES, alert_record


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
    # its place in the tracker's ``open`` (the order alerts resolve in), not stored: rebuilt from
    # the stored rows' order
    opened: int = field(default=0, compare=False, repr=False)

    @property
    def identity(self) -> tuple:
        return (self.alertname, self.labels)


@dataclass
class AlertTracker:
    """Lifecycle of one state key's alerts. ``open`` is the persisted part."""

    cluster_id: str
    settings: RuleSettings
    open: dict[tuple, OpenAlert] = field(default_factory=dict)
    opened: int = field(default=0, compare=False, repr=False)  # alerts opened so far: the next one's place

    def update(self, conditions: Iterable[Condition], now: int, among: Iterable[tuple] | None = None) -> list[dict]:
        """Diff the conditions holding at ``now`` against the open alerts; return new records.
        ``among``: the open alerts these conditions decide (None: every one); one of them that no
        condition holds resolves, the others stay as they are (the conditions of some entities
        alone: streaming.fastpath.changed_entities)."""
        records: list[dict] = []
        seen = set()
        base = self.settings.runbook_base_url
        for cond in conditions:
            rule = RULES[cond.alertname]
            if rule.one_shot:
                records.append(alert_record(rule, self.cluster_id, cond.labels, "firing", cond.since_ms,
                                            max(now, cond.since_ms), cond.description, runbook_base=base))
                continue
            seen.add(cond.identity)
            alert = self.open.get(cond.identity)
            if alert is None:
                alert = self.open[cond.identity] = OpenAlert(cond.alertname, cond.labels, cond.since_ms,
                                                             opened=self.opened)
                self.opened += 1
            alert.description = cond.description or alert.description
            fire_at = alert.since_ms + rule.pending_ms(self.settings)
            if not alert.firing and now >= fire_at:
                alert.firing = True
                records.append(alert_record(rule, self.cluster_id, alert.labels, "firing", alert.since_ms,
                                            max(now, fire_at), alert.description, runbook_base=base))
        # in the order they opened, whether all or some of them are asked about
        candidates = self.open if among is None else sorted(among, key=lambda i: self.open[i].opened)
        for identity in [i for i in candidates if i not in seen]:
            alert = self.open.pop(identity)
            if alert.firing:
                rule = RULES[alert.alertname]
                records.append(alert_record(rule, self.cluster_id, alert.labels, "resolved", alert.since_ms,
                                            now, alert.description, ends_at=now, runbook_base=base))
        return records

    def next_deadline(self) -> int | None:
        """When a pending alert becomes due (None if nothing is pending)."""
        due = [self._fire_time(a) for a in self.open.values() if not a.firing]
        return min(due) if due else None

    def fire_time(self, identity: tuple) -> int | None:
        """When the open alert ``identity`` fires; None once it has."""
        alert = self.open[identity]
        return None if alert.firing else self._fire_time(alert)

    def _fire_time(self, alert: OpenAlert) -> int:
        return alert.since_ms + RULES[alert.alertname].pending_ms(self.settings)

    # persistence as plain tuples (the processor stores them in a ListState)
    def to_rows(self) -> list[tuple]:
        return [(a.alertname, json.dumps(a.labels), a.since_ms, a.firing, a.description) for a in self.open.values()]

    @classmethod
    def from_rows(cls, cluster_id: str, settings: RuleSettings, rows: Iterable[tuple]) -> "AlertTracker":
        tracker = cls(cluster_id, settings)
        for name, labels_json, since, firing, description in rows:
            labels = tuple(tuple(p) for p in json.loads(labels_json))
            alert = OpenAlert(name, labels, int(since), bool(firing), description or "", opened=tracker.opened)
            tracker.open[alert.identity] = alert
            tracker.opened += 1
        return tracker
