"""Per-client alerts rolled up, pure: the engine's alert records in, the records to deliver out.

A partitioned broker with 100,000 clients must not mean 100,000 alerts. The per-client rules (the
catalog entries with a ``clients_summary``: StaleMetadataResponse, ClientRebootstrapOverdue,
ClusterIdMismatch) find one incident per client. ``rules.client.alerts`` says how they are delivered:

- ``per_broker`` (the default): one alert per cluster, alert name and broker (per cluster and alert
  name for the alerts without a broker). It fires when the first client's incident fires, resolves
  when the last one resolves (telling the most clients it counted at once), and carries
  ``client_count`` and ``example_clients`` (the first ``client.alerts.examples`` client ids, sorted)
  as annotations: a client coming or going re-sends the same labels with new annotations, which
  Alertmanager takes as an update of the alert it holds, not as a new alert to page for.
- ``per_cluster``: one alert per cluster and alert name.
- ``per_client``: each client's incident alone, while fewer than ``client.alerts.max.per.cluster``
  of the cluster's incidents of that alert name are alerted alone; the ones beyond roll up per
  broker (an incident stays where it started: alone, or counted, until it resolves).

Where it runs, and why there. Client state is sharded by client id (rules.state.client.shards), so
one broker's clients are spread over every shard key: a roll-up in a key's AlertTracker would be one
alert per shard, told apart by a shard label that means nothing to the on-call. The roll-up runs on
the driver instead, where the records of every key meet (streaming.sinks.rollup_stage, the first of
the sinks); the engine's per-client incidents (pending periods, fingerprints, state) stay as they are.

What survives a restart. The driver keeps nothing of its own: after a restart its state is what the
alerts topic holds (streaming.sinks.alert_history). So the topic keeps both kinds of record: every
per-client one, with the ``rolled_up`` annotation (the roll-up's scope) when a roll-up stands for it
(the audit trail, and how a restarted driver knows which roll-up each open incident counts in and
which were alerted alone), and every roll-up record (its fingerprint and start, so that a restart
continues the alert Alertmanager holds instead of paging anew). The Kafka sink writes a batch's
per-client records before its roll-ups and Alertmanager is written after the Kafka sink, so a crash
between the two loses only roll-up records nobody has seen: :meth:`ClientRollup.seed` resolves a
roll-up whose clients all resolved meanwhile, and opens one that was never written from its clients.
A sink that fails fails the query and with it the driver, whose successor seeds from the topic
again: the state never has to take a batch back.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from streaming.config import RuleSettings
from streaming.rules.catalog import RULES, RUNBOOK_BASE, fingerprint

PER_CLIENT, PER_BROKER, PER_CLUSTER = "per_client", "per_broker", "per_cluster"
FIRING, RESOLVED = "firing", "resolved"
# the annotation of a per-client record that a roll-up stands for: the roll-up's scope
ROLLED_UP = "rolled_up"
# a roll-up's own annotations
CLIENT_COUNT = "client_count"
PEAK_CLIENT_COUNT = "client_count_peak"   # the most clients it counted at once
EXAMPLE_CLIENTS = "example_clients"


@dataclass(frozen=True)
class RollupPolicy:
    mode: str = PER_BROKER
    examples: int = 5
    max_per_cluster: int = 20   # per_client: incidents of one alert name per cluster alerted alone

    @classmethod
    def from_settings(cls, rules: RuleSettings) -> "RollupPolicy":
        return cls(rules.client_alerts, rules.client_alerts_examples, rules.client_alerts_max_per_cluster)


def per_client(record: Mapping) -> bool:
    """One client's incident of a per-client rule (a record of the engine)."""
    rule = RULES.get(record.get("alertname"))
    return rule is not None and rule.per_client and "client_id" in (record.get("labels") or {})


def is_rollup(record: Mapping) -> bool:
    """A roll-up record: a per-client rule's alert without a client."""
    rule = RULES.get(record.get("alertname"))
    return rule is not None and rule.per_client and "client_id" not in (record.get("labels") or {})


def rolled_up(record: Mapping) -> bool:
    """A per-client record that a roll-up stands for: kept in the alerts topic, never delivered."""
    return ROLLED_UP in (record.get("annotations") or {})


def rollup_labels(record: Mapping, scope: str) -> tuple[tuple[str, str], ...]:
    """The labels of the roll-up that counts ``record`` under ``scope`` (its identity in Alertmanager)."""
    keep = ("alertname", "cluster", "severity") + (("broker_id",) if scope == PER_BROKER else ())
    labels = record["labels"]
    return tuple(sorted((k, str(labels[k])) for k in keep if k in labels))


@dataclass
class Rollup:
    """One open roll-up alert and the open client incidents it counts."""

    labels: tuple[tuple[str, str], ...]
    scope: str
    fingerprint: str
    starts_at: int
    event_time: int
    members: dict[str, str] = field(default_factory=dict)   # incident fingerprint -> client id
    clients: Counter = field(default_factory=Counter)        # client id -> its incidents counted here
    peak: int = 0                                            # the most clients it counted at once
    announced: bool = False                                  # a firing record of it has been emitted

    @classmethod
    def opened_by(cls, record: Mapping, labels: tuple, scope: str) -> "Rollup":
        """Started at the first client's start. The fingerprint names the opening incident too: a
        later roll-up of the same broker may start at the same moment, and must not take the
        fingerprint of one that resolved (the Alertmanager sink ignores a resolved fingerprint)."""
        starts_at = int(record["starts_at"])
        fp = fingerprint(dict(labels)["alertname"], [*labels, ("opened_by", record["fingerprint"])], starts_at)
        return cls(labels, scope, fp, starts_at, int(record["event_time"]))

    def add(self, record: Mapping) -> None:
        client = record["labels"]["client_id"]
        self.members[record["fingerprint"]] = client
        self.clients[client] += 1
        self.peak = max(self.peak, len(self.clients))

    def remove(self, fp: str) -> None:
        client = self.members.pop(fp)
        self.clients[client] -= 1
        if not self.clients[client]:
            del self.clients[client]


@dataclass
class ClientRollup:
    """The roll-up's state: the open roll-ups and the open per-client incidents."""

    policy: RollupPolicy = field(default_factory=RollupPolicy)
    open: dict[tuple, Rollup] = field(default_factory=dict)             # by labels
    members: dict[str, Rollup | None] = field(default_factory=dict)     # open incident -> its roll-up (None: alone)
    alone: Counter = field(default_factory=Counter)                     # (cluster, alertname) -> incidents alone
    repairs: list[dict] = field(default_factory=list)   # roll-up records the seed owes the alerts topic

    def step(self, records: Iterable[dict]) -> tuple[list[dict], list[dict]]:
        """A micro-batch's records (in order) -> (the same records, each per-client one marked with
        ``rolled_up`` when a roll-up stands for it; the roll-up records to write and deliver)."""
        out, rollups, self.repairs = [], self.repairs, []
        touched: dict[tuple, Rollup] = {}
        for record in records:
            if not per_client(record):
                out.append(record)
                continue
            scope = self._join(record, touched) if record["status"] == FIRING else self._leave(record, touched, rollups)
            out.append(record if scope is None else _marked(record, scope))
        rollups.extend(self._record(r, FIRING) for r in touched.values())
        return out, rollups

    def _join(self, record: dict, touched: dict) -> str | None:
        fp = record["fingerprint"]
        if fp in self.members:
            rollup = self.members[fp]   # a replayed record: the incident keeps its place
        else:
            scope = self._scope(record)
            if scope is None:
                self.alone[_kind(record)] += 1
                rollup = None
            else:
                rollup = self._count_in(record, scope)
            self.members[fp] = rollup
        if rollup is None:
            return None
        rollup.event_time = max(rollup.event_time, int(record["event_time"]))
        touched[rollup.labels] = rollup
        return rollup.scope

    def _leave(self, record: dict, touched: dict, rollups: list[dict]) -> str | None:
        fp = record["fingerprint"]
        if fp not in self.members:
            # not open here: a replayed resolution; marked as this policy would have placed it
            return None if self.policy.mode == PER_CLIENT else self.policy.mode
        rollup = self.members.pop(fp)
        if rollup is None:
            kind = _kind(record)
            self.alone[kind] -= 1
            if not self.alone[kind]:
                del self.alone[kind]
            return None
        if not rollup.announced:
            # opened in this batch and a client already goes: on record as it stands before, so that
            # a roll-up opened and closed within one batch still fired, with the clients it counted
            rollups.append(self._record(rollup, FIRING))
        rollup.event_time = max(rollup.event_time, int(record["event_time"]))
        rollup.remove(fp)
        if rollup.members:
            touched[rollup.labels] = rollup
            return rollup.scope
        del self.open[rollup.labels]
        touched.pop(rollup.labels, None)
        rollups.append(self._record(rollup, RESOLVED, ends_at=int(record.get("ends_at") or record["event_time"])))
        return rollup.scope

    def _count_in(self, record: dict, scope: str) -> "Rollup":
        """The open roll-up of ``record``'s scope (opened by it if none is), with the record counted."""
        labels = rollup_labels(record, scope)
        rollup = self.open.get(labels)
        if rollup is None:
            rollup = self.open[labels] = Rollup.opened_by(record, labels, scope)
        rollup.add(record)
        return rollup

    def _scope(self, record: dict) -> str | None:
        """Where a new incident goes: a roll-up's scope, or None (alerted alone)."""
        mode = self.policy.mode
        if mode != PER_CLIENT:
            return mode
        return None if self.alone[_kind(record)] < self.policy.max_per_cluster else PER_BROKER

    def _record(self, rollup: Rollup, status: str, ends_at: int | None = None) -> dict:
        """The roll-up's alert record: as it stands, or its resolution (which tells the peak: the
        count when the last client left is an accident of where the micro-batches were cut)."""
        if status == FIRING:
            rollup.announced = True
            annotations = self._annotations(rollup)
        else:
            annotations = _resolved_annotations(rollup.labels, rollup.peak)
        labels = dict(rollup.labels)
        fp = rollup.fingerprint
        # an update's id says what it holds: a replayed batch gives the same ids, a new count a new one
        event_id = f"{fp}:{status}" if status == RESOLVED else \
            f"{fp}:{status}:{annotations[CLIENT_COUNT]}:{rollup.event_time}"
        return {"event_type": "alert", "event_id": event_id, "cluster_id": labels["cluster"],
                "event_time": rollup.event_time, "alertname": labels["alertname"], "severity": labels["severity"],
                "status": status, "labels": labels, "annotations": annotations,
                "starts_at": rollup.starts_at, "ends_at": ends_at, "fingerprint": fp}

    def _annotations(self, rollup: Rollup) -> dict[str, str]:
        labels = dict(rollup.labels)
        count = len(rollup.clients)
        examples = heapq.nsmallest(self.policy.examples, rollup.clients)
        description = f"{count} client(s)" + (f", e.g. {', '.join(examples)}" if examples else "")
        if self.policy.mode == PER_CLIENT:
            description += (f"; beyond the {self.policy.max_per_cluster} of cluster {labels['cluster']} "
                            f"alerted one by one")
        return {**_common_annotations(rollup.labels, count), "description": description,
                CLIENT_COUNT: str(count), PEAK_CLIENT_COUNT: str(rollup.peak), EXAMPLE_CLIENTS: ",".join(examples)}

    # --- after a restart ---------------------------------------------------------------------

    def seed(self, latest: Iterable[dict]) -> list[dict]:
        """Rebuild from the alerts topic's latest record per fingerprint; returns what Alertmanager
        is to be seeded with (the records it gets alone, and the roll-ups as they stand now). What
        the topic lacks (a crash between a batch's per-client records and its roll-ups) is repaired
        and written with the next step's roll-ups."""
        latest = [r for r in latest if isinstance(r, Mapping)]
        last_end: dict[tuple, int] = {}   # roll-up labels -> the latest resolution of a client it counted
        for record in sorted(filter(per_client, latest), key=_order):
            scope = (record.get("annotations") or {}).get(ROLLED_UP)
            if record["status"] == RESOLVED:
                if scope:
                    labels = rollup_labels(record, scope)
                    last_end[labels] = max(last_end.get(labels, 0), int(record.get("ends_at") or record["event_time"]))
            elif scope is None:
                self.members[record["fingerprint"]] = None
                self.alone[_kind(record)] += 1
            else:
                rollup = self._count_in(record, scope)
                rollup.event_time = max(rollup.event_time, int(record["event_time"]))
                self.members[record["fingerprint"]] = rollup
        written: dict[tuple, dict] = {}   # labels -> the annotations the topic holds for an open roll-up
        resolutions = []
        firing = [r for r in latest if is_rollup(r) and r["status"] == FIRING]
        for record in sorted(firing, key=_order, reverse=True):   # the newest of a broker's goes on
            labels = tuple(sorted((k, str(v)) for k, v in record["labels"].items()))
            rollup = self.open.get(labels)
            if rollup is not None and labels not in written:
                rollup.fingerprint, rollup.starts_at = record["fingerprint"], int(record["starts_at"])
                rollup.event_time = max(rollup.event_time, int(record["event_time"]))
                rollup.peak, rollup.announced = max(rollup.peak, _peak(record)), True
                written[labels] = dict(record.get("annotations") or {})
                continue
            ends_at = max(last_end.get(labels, 0), int(record["event_time"]))   # its clients all resolved
            resolutions.append({**record, "status": RESOLVED, "event_id": f"{record['fingerprint']}:{RESOLVED}",
                                "event_time": ends_at, "ends_at": ends_at,
                                "annotations": _resolved_annotations(labels, _peak(record))})
        current = {labels: self._record(rollup, FIRING) for labels, rollup in self.open.items()}
        self.repairs = resolutions + [r for labels, r in current.items() if written.get(labels) != r["annotations"]]
        delivered_alone = [r for r in latest if not rolled_up(r) and not (is_rollup(r) and r["status"] == FIRING)]
        return delivered_alone + resolutions + list(current.values())


def _common_annotations(labels: tuple, count: int) -> dict[str, str]:
    named = dict(labels)
    name = named["alertname"]
    where = f"broker {named['broker_id']}" if "broker_id" in named else f"cluster {named['cluster']}"
    return {"summary": RULES[name].clients_summary.format(client_count=count, scope=where),
            "runbook_url": f"{RUNBOOK_BASE}#{name.lower()}"}


def _resolved_annotations(labels: tuple, peak: int) -> dict[str, str]:
    return {**_common_annotations(labels, peak), "description": f"resolved: at most {peak} client(s) at once",
            CLIENT_COUNT: "0", PEAK_CLIENT_COUNT: str(peak), EXAMPLE_CLIENTS: ""}


def _marked(record: dict, scope: str) -> dict:
    return {**record, "annotations": {**record["annotations"], ROLLED_UP: scope}}


def _peak(record: Mapping) -> int:
    """The peak a roll-up record tells."""
    annotations = record.get("annotations") or {}
    return int(annotations.get(PEAK_CLIENT_COUNT) or annotations.get(CLIENT_COUNT) or 0)


def _kind(record: Mapping) -> tuple[str, str]:
    return record["labels"]["cluster"], record["alertname"]


def _order(record: Mapping) -> tuple:
    return int(record["event_time"]), record["fingerprint"]
