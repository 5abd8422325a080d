"""What the Alertmanager sink must send at ``now``: pure bookkeeping of alert states, no I/O.

The detection engine emits alert records (the ``alert`` event): one ``firing`` record when an
incident starts, one ``resolved`` record when it ends; info alerts are one-shot ``firing`` records
that are never resolved by a record. :class:`AlertBook` keeps the latest state per fingerprint
until Alertmanager has accepted it, re-sends active alerts every resend interval (Alertmanager
forgets an alert at its ``endsAt``), and backs off after failed deliveries. The clock is always
passed in (integer UTC milliseconds); the HTTP side lives in ``streaming.sinks.alertmanager``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from streaming.times import utc_text

FIRING = "firing"
RESOLVED = "resolved"
ONE_SHOT_SEVERITY = "info"
# Prometheus sets endsAt of a firing alert to 4 x its resend delay, so a dead sender's alerts expire.
ENDS_AT_RESEND_FACTOR = 4
TOMBSTONE_LIMIT = 100_000


class AlertRecordError(ValueError):
    """An alert record the sink cannot deliver; the message names the field."""


@dataclass(frozen=True)
class BookSettings:
    resend_interval_ms: int = 60_000
    info_ttl_ms: int = 300_000                 # endsAt of a one-shot (info) alert = starts_at + this
    backoff_initial_ms: int = 500
    backoff_max_ms: int = 60_000
    tombstone_ttl_ms: int = 3_600_000          # how long a delivered resolution keeps replays away
    generator_url: str = "http://127.0.0.1:9464/metrics"

    def __post_init__(self):
        if self.resend_interval_ms <= 0:
            raise ValueError(f"resend_interval_ms={self.resend_interval_ms}: must be > 0 (Alertmanager expects 30 s - 3 min)")
        if not self.generator_url.startswith(("http://", "https://")):
            raise ValueError(f"generator_url={self.generator_url!r}: Alertmanager needs an absolute http(s) URL")


@dataclass
class Entry:
    record: dict
    revision: int
    delivered_revision: int = -1
    last_sent_ms: int | None = None

    @property
    def pending(self) -> bool:
        return self.delivered_revision != self.revision

    @property
    def one_shot(self) -> bool:
        return self.record["status"] == FIRING and self.record["severity"] == ONE_SHOT_SEVERITY


@dataclass(frozen=True)
class Delivery:
    """One alert state to POST: which revision of which fingerprint, and the API v2 body.

    The body is built on access, so the sink builds it outside its lock (records are never
    mutated, only replaced)."""

    fingerprint: str
    revision: int
    record: dict
    now_ms: int
    settings: "BookSettings"

    @property
    def payload(self) -> dict:
        return alertmanager_payload(self.record, self.now_ms, self.settings)


@dataclass(frozen=True)
class Rejected:
    record: object
    reason: str


def check_record(record: object) -> dict:
    """The record if it is a deliverable alert record, else AlertRecordError naming the field."""
    if not isinstance(record, Mapping):
        raise AlertRecordError(f"expected an alert record (dict), got {type(record).__name__}")
    for name in ("fingerprint", "alertname", "severity", "status", "starts_at"):
        if record.get(name) in (None, ""):
            raise AlertRecordError(f"alert record without '{name}'")
    if record["status"] not in (FIRING, RESOLVED):
        raise AlertRecordError(f"status {record['status']!r} is not firing or resolved")
    if record["status"] == RESOLVED and record.get("ends_at") is None:
        raise AlertRecordError(f"resolved alert {record['fingerprint']} without 'ends_at'")
    if not isinstance(record.get("labels") or {}, Mapping) or not isinstance(record.get("annotations") or {}, Mapping):
        raise AlertRecordError(f"alert {record['fingerprint']}: labels and annotations must be string maps")
    return dict(record)


def alertmanager_payload(record: dict, now_ms: int, settings: BookSettings) -> dict:
    """The Alertmanager API v2 body (postableAlert) of an alert record at ``now_ms``, with the
    record's labels as they are (the sink labelled it: streaming.sinks.labels)."""
    labels = {str(k): str(v) for k, v in (record.get("labels") or {}).items() if v not in (None, "")}
    labels.setdefault("alertname", record["alertname"])
    labels.setdefault("severity", record["severity"])
    annotations = {str(k): str(v) for k, v in (record.get("annotations") or {}).items() if v not in (None, "")}
    starts_at = int(record["starts_at"])
    if record["status"] == RESOLVED:
        ends_at = int(record["ends_at"])
    elif record["severity"] == ONE_SHOT_SEVERITY:
        ends_at = starts_at + settings.info_ttl_ms
    else:
        ends_at = now_ms + ENDS_AT_RESEND_FACTOR * settings.resend_interval_ms
    # Alertmanager rejects endsAt before startsAt (event time may run ahead of this clock).
    ends_at = max(ends_at, starts_at + 1)
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": utc_text(starts_at),
        "endsAt": utc_text(ends_at),
        "generatorURL": settings.generator_url,
    }


def latest_alert_states(records: Iterable[dict], latest: dict[str, dict] | None = None) -> dict[str, dict]:
    """Latest record per fingerprint, as read back from the alerts topic after a restart
    (folded into ``latest`` when given: a history read chunk by chunk).

    A resolved record beats a firing one (an incident never fires again under the same
    fingerprint); otherwise the later ``event_time`` wins, then the later record in the input.
    """
    latest = {} if latest is None else latest
    for record in records:
        fp = record.get("fingerprint")
        if not fp:
            continue
        old = latest.get(fp)
        if old is None or _rank(record) >= _rank(old):
            latest[fp] = record
    return latest


def _rank(record: dict) -> tuple:
    return (record.get("status") == RESOLVED, record.get("event_time") or 0)


@dataclass
class AlertBook:
    settings: BookSettings = field(default_factory=BookSettings)
    entries: dict[str, Entry] = field(default_factory=dict)
    # fingerprint -> when its resolution (or one-shot) was delivered: replays of it are ignored
    tombstones: OrderedDict = field(default_factory=OrderedDict)
    consecutive_failures: int = 0
    next_attempt_ms: int = 0
    _revisions: int = 0

    # --- input ---------------------------------------------------------------------------

    def add(self, records: Iterable[object], now_ms: int) -> list[Rejected]:
        """Take a batch of alert records; returns the ones that cannot be delivered (and why)."""
        rejected = []
        for raw in records:
            try:
                self._add_one(check_record(raw), now_ms)
            except AlertRecordError as exc:
                rejected.append(Rejected(raw, str(exc)))
        self._prune_tombstones(now_ms)
        return rejected

    def _add_one(self, record: dict, now_ms: int) -> None:
        fp = record["fingerprint"]
        if fp in self.tombstones:
            return  # already delivered as resolved / one-shot: a replay
        old = self.entries.get(fp)
        if old is not None:
            if old.record["status"] == RESOLVED:
                return  # the resolution supersedes any later copy of the incident
            if _same_state(old.record, record):
                return  # a replayed batch: nothing new to tell Alertmanager
        self.entries[fp] = Entry(record, self._next_revision(),
                                 last_sent_ms=old.last_sent_ms if old is not None else None)

    def seed(self, records: Iterable[dict], now_ms: int) -> list[Rejected]:
        """Rebuild the active set after a driver restart from the alerts topic's records.

        Firing alerts are re-sent at once (Alertmanager may have lost or expired them). A
        resolution is re-delivered only while Alertmanager could still hold the firing copy
        (its endsAt is at most 4 resend intervals after the last send); older ones and expired
        one-shot alerts are only remembered so that replays stay quiet.
        """
        horizon = ENDS_AT_RESEND_FACTOR * self.settings.resend_interval_ms
        fresh = []
        for fp, record in latest_alert_states(r for r in records if isinstance(r, Mapping)).items():
            if record.get("status") == RESOLVED and (record.get("ends_at") or 0) < now_ms - horizon:
                self._tombstone(fp, now_ms)
            elif (record.get("status") == FIRING and record.get("severity") == ONE_SHOT_SEVERITY
                  and (record.get("starts_at") or 0) + self.settings.info_ttl_ms <= now_ms):
                self._tombstone(fp, now_ms)
            else:
                fresh.append(record)
        return self.add(fresh, now_ms)

    # --- decisions -----------------------------------------------------------------------

    def due(self, now_ms: int, *, ignore_backoff: bool = False) -> list[Delivery]:
        """The alert states to POST now: undelivered ones, plus firing ones whose resend is due.

        While deliveries are failing nothing is due before the backoff ends; the first attempt
        after a failure re-sends every active alert, since Alertmanager may have restarted.
        """
        if self.consecutive_failures and now_ms < self.next_attempt_ms and not ignore_backoff:
            return []
        resend_all = self.consecutive_failures > 0
        out = []
        for fp, entry in self.entries.items():
            resend_due = (entry.last_sent_ms is None
                          or now_ms - entry.last_sent_ms >= self.settings.resend_interval_ms)
            if entry.pending or (not entry.one_shot and (resend_all or resend_due)):
                out.append(Delivery(fp, entry.revision, entry.record, now_ms, self.settings))
        return out

    def next_due_ms(self, now_ms: int) -> int | None:
        """When ``due`` will next return something (None: nothing to do until new records)."""
        if not self.entries:
            return None
        if self.consecutive_failures:
            return max(now_ms, self.next_attempt_ms)
        times = []
        for entry in self.entries.values():
            if entry.pending or entry.last_sent_ms is None:
                return now_ms
            if not entry.one_shot:
                times.append(entry.last_sent_ms + self.settings.resend_interval_ms)
        return min(times) if times else None

    # --- outcomes ------------------------------------------------------------------------

    def delivered(self, deliveries: Iterable[Delivery], now_ms: int) -> None:
        """Alertmanager accepted these (HTTP 200)."""
        self.consecutive_failures = 0
        self.next_attempt_ms = 0
        for d in deliveries:
            entry = self.entries.get(d.fingerprint)
            if entry is None or entry.revision != d.revision:
                continue  # superseded while in flight: the newer state is still pending
            entry.delivered_revision = d.revision
            entry.last_sent_ms = now_ms
            if entry.record["status"] == RESOLVED or entry.one_shot:
                del self.entries[d.fingerprint]
                self._tombstone(d.fingerprint, now_ms)

    def rejected(self, delivery: Delivery, now_ms: int) -> None:
        """Alertmanager refused this alert as invalid (HTTP 400): retrying cannot help.

        The record stays in the Kafka alerts topic; only this sink gives up on it.
        """
        entry = self.entries.get(delivery.fingerprint)
        if entry is not None and entry.revision == delivery.revision:
            del self.entries[delivery.fingerprint]
            self._tombstone(delivery.fingerprint, now_ms)

    def failed(self, now_ms: int, jitter: float) -> int:
        """Alertmanager unreachable / slow / 5xx. ``jitter`` in [0, 1). Returns the backoff in ms.

        Exponential backoff with "equal jitter": half the step is fixed, half random, so
        many senders restarting together spread out but none retries immediately.
        """
        self.consecutive_failures += 1
        step = min(self.settings.backoff_max_ms,
                   self.settings.backoff_initial_ms * 2 ** min(self.consecutive_failures - 1, 30))
        delay = int(step / 2 + step / 2 * jitter)
        self.next_attempt_ms = now_ms + delay
        return delay

    # --- views ---------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Alert states Alertmanager has not accepted yet."""
        return sum(1 for e in self.entries.values() if e.pending)

    def active_fingerprints(self) -> set[str]:
        return {fp for fp, e in self.entries.items() if e.record["status"] == FIRING}

    # --- internals -----------------------------------------------------------------------

    def _next_revision(self) -> int:
        self._revisions += 1
        return self._revisions

    def _tombstone(self, fp: str, now_ms: int) -> None:
        self.tombstones[fp] = now_ms
        self.tombstones.move_to_end(fp)
        while len(self.tombstones) > TOMBSTONE_LIMIT:
            self.tombstones.popitem(last=False)

    def _prune_tombstones(self, now_ms: int) -> None:
        limit = now_ms - self.settings.tombstone_ttl_ms
        while self.tombstones:
            fp, at = next(iter(self.tombstones.items()))
            if at >= limit:
                break
            self.tombstones.popitem(last=False)


def _same_state(a: dict, b: dict) -> bool:
    keys = ("status", "severity", "labels", "annotations", "starts_at", "ends_at")
    return all(a.get(k) == b.get(k) for k in keys)

