"""Ground truth of a simulated scenario and a pure checker of an engine's alert records.

A :class:`GroundTruth` says which alerts a correct engine MUST fire (with the event-time window
of the firing record, computed from the RuleSettings thresholds) and which it MAY fire; every
other firing record is unexpected. ``check(alert_records, truth)`` compares alert records (the
dicts of the ``alert`` event, docs/CONTRACTS.md) with it and returns a :class:`TruthReport`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Iterable, Mapping

from streaming.config import RuleSettings

SEVERITIES: Mapping[str, str] = {
    "BrokerRestarted": "info", "ControllerFailover": "info",
    "ClusterSilent": "critical", "DuplicateBrokerId": "critical", "ClusterIdMismatch": "critical",
    "MetadataEpochRegression": "critical", "BrokerMetadataLag": "critical",
    "BrokerHeartbeatTimeout": "warning", "BrokerIncarnationRegression": "warning",
    "BrokerStuckStopping": "warning", "BrokerNotReturned": "warning", "BrokerFlapping": "warning",
    "StaleMetadataResponse": "warning", "OffsetCommitEpochRegression": "warning",
    "ClientRebootstrapOverdue": "warning", "RebootstrapRequired": "warning",
    "ConnectionSetupTimeoutStorm": "warning",
}


@dataclass(frozen=True)
class ExpectedAlert:
    """A firing record a correct engine must emit: ``event_time`` in [not_before, not_after]."""

    alertname: str
    labels: Mapping[str, str]          # a subset of the record's labels, values as strings
    severity: str
    not_before_ms: int                 # when the cause happened: no correct engine fires earlier
    not_after_ms: int                  # threshold-derived deadline plus slack
    resolves_by_ms: int | None = None  # a resolved record is due by then (None: not checked)
    min_count: int = 1
    max_count: int | None = None       # most firing records with these labels (None: no limit)
    why: str = ""


@dataclass(frozen=True)
class AllowedAlert:
    """A firing record a correct engine may emit (labels are a subset to match)."""

    alertname: str
    labels: Mapping[str, str]
    why: str = ""


def settings_dict(settings: RuleSettings) -> dict[str, int]:
    """RuleSettings under their YAML names (the ``rules:`` section of an epochwatch config)."""
    return {f.metadata.get("yaml", f.name): getattr(settings, f.name) for f in fields(RuleSettings)}


@dataclass(frozen=True)
class GroundTruth:
    scenario: str
    seed: int
    cluster_id: str
    settings: Mapping[str, int]
    start_ms: int
    end_ms: int
    incident_at_ms: int | None
    expected: tuple[ExpectedAlert, ...] = ()
    allowed: tuple[AllowedAlert, ...] = ()
    description: str = ""

    def rule_settings(self) -> RuleSettings:
        by_yaml = {f.metadata.get("yaml", f.name): f.name for f in fields(RuleSettings)}
        return RuleSettings(**{by_yaml[k]: v for k, v in self.settings.items() if k in by_yaml})

    def to_dict(self) -> dict:
        out = asdict(self)
        out["expected"] = [asdict(e) for e in self.expected]
        out["allowed"] = [asdict(a) for a in self.allowed]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping) -> "GroundTruth":
        values = dict(data)
        values["expected"] = tuple(ExpectedAlert(**e) for e in data.get("expected", ()))
        values["allowed"] = tuple(AllowedAlert(**a) for a in data.get("allowed", ()))
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "GroundTruth":
        return cls.from_dict(json.loads(text))


# --- the checker -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    kind: str        # missing | early | late | too_many | wrong_severity | not_resolved | unexpected
    alertname: str
    labels: Mapping[str, str]
    detail: str

    def line(self) -> str:
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if k not in ("alertname", "severity"))
        return f"{self.kind.upper():14} {self.alertname}{{{labels}}}: {self.detail}"


@dataclass
class TruthReport:
    scenario: str
    findings: list[Finding] = field(default_factory=list)
    met: int = 0              # expected alerts found in their window
    allowed_seen: int = 0     # firing records matching only an allowance
    ignored_other_clusters: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def by_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def summary(self) -> str:
        head = (f"{self.scenario}: {'OK' if self.ok else 'FAILED'} ({self.met} expected met, "
                f"{self.allowed_seen} allowed, {len(self.by_kind('unexpected'))} unexpected)")
        if self.ignored_other_clusters:
            head += f"; ignored {self.ignored_other_clusters} record(s) of other clusters"
        return "\n".join([head] + ["  " + f.line() for f in self.findings])


def _labels(record: Mapping) -> Mapping[str, str]:
    return record.get("labels") or {}


def _matches(alertname: str, labels: Mapping[str, str], record: Mapping) -> bool:
    if record.get("alertname") != alertname:
        return False
    have = _labels(record)
    return all(str(have.get(k)) == str(v) for k, v in labels.items())


def _cluster_of(record: Mapping) -> str | None:
    return _labels(record).get("cluster") or record.get("cluster_id")


def _dedupe(records: Iterable[Mapping]) -> list[Mapping]:
    """A replayed batch rewrites the same record (same event_id): count it once."""
    seen, out = set(), []
    for r in records:
        key = r.get("event_id") or (r.get("fingerprint"), r.get("status"), r.get("event_time"))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _resolved_by(firing: Mapping, resolved: list[Mapping], deadline: int) -> bool:
    fp = firing.get("fingerprint")
    for r in resolved:
        same = r.get("fingerprint") == fp if fp else dict(_labels(r)) == dict(_labels(firing))
        if same and r["event_time"] <= deadline:
            return True
    return False


def check(alert_records: Iterable[Mapping], truth: GroundTruth) -> TruthReport:
    """Compare alert records with the ground truth; records of other clusters are ignored."""
    report = TruthReport(truth.scenario)
    records = []
    for r in _dedupe(alert_records):
        if _cluster_of(r) == truth.cluster_id:
            records.append(r)
        else:
            report.ignored_other_clusters += 1
    firing = [r for r in records if r.get("status") == "firing"]
    resolved = [r for r in records if r.get("status") == "resolved"]
    accounted: set[int] = set()  # ids of firing records explained by an expectation

    for exp in truth.expected:
        matching = [r for r in firing if _matches(exp.alertname, exp.labels, r)]
        in_window = [r for r in matching if exp.not_before_ms <= r["event_time"] <= exp.not_after_ms]
        accounted.update(id(r) for r in in_window)
        if len(in_window) >= exp.min_count:
            report.met += 1
        else:
            late = [r for r in matching if r["event_time"] > exp.not_after_ms]
            early = [r for r in matching if r["event_time"] < exp.not_before_ms]
            want = f"{exp.min_count} firing in [{exp.not_before_ms}, {exp.not_after_ms}], got {len(in_window)}"
            if late:
                accounted.update(id(r) for r in late)
                detail = f"{want}; fired at {late[0]['event_time']}, {late[0]['event_time'] - exp.not_after_ms} ms late"
                report.findings.append(Finding("late", exp.alertname, exp.labels, detail))
            elif early:
                accounted.update(id(r) for r in early)
                detail = f"{want}; fired at {early[0]['event_time']}, {exp.not_before_ms - early[0]['event_time']} ms early"
                report.findings.append(Finding("early", exp.alertname, exp.labels, detail))
            else:
                report.findings.append(Finding("missing", exp.alertname, exp.labels, f"{want}. {exp.why}".strip()))
        if exp.max_count is not None and len(matching) > exp.max_count:
            report.findings.append(Finding("too_many", exp.alertname, exp.labels,
                                           f"{len(matching)} firing records, at most {exp.max_count} expected"))
        for r in in_window:
            if r.get("severity") != exp.severity:
                report.findings.append(Finding("wrong_severity", exp.alertname, _labels(r),
                                               f"severity {r.get('severity')}, expected {exp.severity}"))
            if exp.resolves_by_ms is not None and not _resolved_by(r, resolved, exp.resolves_by_ms):
                report.findings.append(Finding("not_resolved", exp.alertname, _labels(r),
                                               f"no resolved record by {exp.resolves_by_ms}"))

    for r in firing:
        if id(r) in accounted:
            continue
        if any(_matches(a.alertname, a.labels, r) for a in truth.allowed):
            report.allowed_seen += 1
            continue
        report.findings.append(Finding("unexpected", r.get("alertname", "?"), _labels(r),
                                       f"fired at {r.get('event_time')} (starts_at {r.get('starts_at')})"))
    return report
