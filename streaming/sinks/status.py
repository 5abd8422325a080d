"""The status view: what is wrong now, per cluster, from the job's live state (no Spark read of the
checkpoint). A Dispatcher sink (streaming.sinks.base) keeps what every micro-batch's output says:
the brokers' latest status rows, each client shard's counts, the incidents firing; the progress
listener (streaming.spark.listeners) adds the job's own progress. The views are plain dicts, the
``status`` part of a Burrow-style answer (streaming.sinks.endpoint serves them as /status).

Status levels are ordered as Burrow's are: OK < WARN < ERR. A cluster is ERR while a critical
incident fires, WARN while a warning one does; the broker and client lists show what the state
holds now, including what is still inside a rule's pending period, and do not change the level.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Iterable, Mapping, NamedTuple

from streaming.config import RuleSettings
from streaming.rules.table import EXPIRED_SUMMARY, RESET_SUMMARY
from streaming.sinks.metrics import epoch_lag, input_records, source_lag
from streaming.times import utc_text

OK, WARN, ERR = "OK", "WARN", "ERR"
LEVELS = (OK, WARN, ERR)
SEVERITY_LEVEL = {"critical": ERR, "warning": WARN}   # info alerts are one-shot: never firing for long
# the job's states; STALLED matches EpochwatchStalled (deploy/prometheus/rules/epochwatch-meta.yml)
STARTING, RUNNING, STALLED, STOPPED = "STARTING", "RUNNING", "STALLED", "STOPPED"
JOB_LEVEL = {STARTING: WARN, RUNNING: OK, STALLED: ERR, STOPPED: ERR}
STALLED_AFTER_MS = 120_000
INCIDENTS_SHOWN = 100      # a cluster's view lists at most this many incidents (all are counted)
CLIENT_EXAMPLES = 5        # client ids named per cluster, of each kind
DEFAULT_LAG_GRACE_MS = RuleSettings().metadata_lag_grace_ms
RESOLVED_MEMORY = 100_000  # resolved fingerprints remembered, so a replayed firing record stays out
FENCED, STOPPING = "INACTIVE", "STOPPING"   # KIP-631: the controller fences a broker into INACTIVE


def wall_ms() -> int:
    return int(time.time() * 1000)


def worst(levels: Iterable[str]) -> str:
    return max(levels, key=LEVELS.index, default=OK)


class StatusBoard:
    """Thread-safe: written by the micro-batches and the progress listener, read by the HTTP
    server's threads. A view copies what it needs under the lock and builds its answer outside it,
    so a request never holds a batch up for longer than a copy."""

    def __init__(self, clock: Callable[[], int] = wall_ms, lag_grace_ms: int = DEFAULT_LAG_GRACE_MS):
        self.clock = clock
        self.lag_grace_ms = lag_grace_ms
        self._lock = threading.Lock()
        self._brokers: dict[str, dict[int, dict]] = {}            # cluster -> broker id -> latest status row
        self._epochs: dict[str, int] = {}                          # cluster -> controller metadata epoch
        self._client_shards: dict[str, dict[int, dict]] = {}       # cluster -> shard -> its clients summary
        self._firing: dict[str, dict[str, dict]] = {}              # cluster -> fingerprint -> firing record
        self._firing_in: dict[str, str] = {}                       # fingerprint -> its cluster
        self._resolved: OrderedDict[str, None] = OrderedDict()
        self._heard: dict[str, int] = {}                           # cluster -> wall ms of its latest output
        self._behind: dict[str, dict[int, int]] = {}               # cluster -> broker id -> wall ms seen behind since
        self._job: dict = {"status": STARTING, "started_ms": clock()}

    # --- input: a Dispatcher sink, plus the progress listener --------------------------------

    def write(self, batch) -> None:
        now = self.clock()
        with self._lock:
            self._take_alerts(batch.pages)   # first: a reset's resolutions come in the same batch
            for summary in batch.summaries:
                if summary.get("kind") == RESET_SUMMARY:
                    self._forget(summary["cluster_id"])
            for row in batch.broker_status:
                fleet = self._brokers.setdefault(str(row["cluster_id"]), {})
                old = fleet.get(int(row["broker_id"]), {})
                fleet[int(row["broker_id"])] = {**old, **{k: v for k, v in row.items() if v is not None}}
            for summary in batch.summaries:
                self._take_summary(summary)
            for cluster in _clusters_of(batch):
                self._heard[cluster] = now
                self._track_lag(cluster, now)

    def close(self) -> None:
        """Dispatcher sink end: the job is stopping."""
        self.job_stopped()

    def seed(self, latest_records: Iterable[Mapping]) -> None:
        """After a restart: the incidents still firing, from the alerts topic's latest records."""
        with self._lock:
            self._take_alerts(latest_records)

    def observe_progress(self, progress: Mapping) -> None:
        """One micro-batch's StreamingQueryProgress as a dict (streaming.spark.listeners)."""
        records, in_rate, done_rate = input_records(progress)
        lags = [lag for lag in (source_lag(s) for s in progress.get("sources") or []) if lag is not None]
        job = {"status": RUNNING, "query": progress.get("name"), "batch_id": progress.get("batchId"),
               "progress_ms": self.clock(), "input_records": records, "input_records_per_second": in_rate,
               "processed_records_per_second": done_rate,
               "batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
               "source_lag_records": sum(lags) if lags else None,
               "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in progress.get("stateOperators") or [])}
        with self._lock:
            self._job = {**self._job, **job}

    def observe_idle(self) -> None:
        """The query is up with nothing to read: alive, progress as of now."""
        with self._lock:
            self._job = {**self._job, "status": RUNNING, "progress_ms": self.clock()}

    def job_stopped(self, error: str | None = None) -> None:
        with self._lock:
            self._job = {**self._job, "status": STOPPED, "stopped_ms": self.clock(),
                         **({"error": error} if error else {})}

    # --- views ---------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        with self._lock:
            return sorted(self._known())

    def overview(self) -> dict:
        """Every cluster in a line (counts), the job, and the worst level of them all."""
        now = self.clock()
        with self._lock:
            snapshot = [self._copy(c) for c in sorted(self._known())]
            job = dict(self._job)
        clusters = [_summary_line(parts, now) for parts in snapshot]
        job = _job_view(job, now)
        return {"status": worst([JOB_LEVEL[job["status"]], *(c["status"] for c in clusters)]),
                "generated_at": utc_text(now), "job": job, "clusters": clusters}

    def cluster(self, cluster_id: str) -> dict | None:
        """One cluster in full (None: the job knows no such cluster)."""
        now = self.clock()
        with self._lock:
            if cluster_id not in self._known():
                return None
            parts = self._copy(cluster_id)
        return {**_cluster_view(parts, now), "generated_at": utc_text(now)}

    # --- internals (called with the lock held) -------------------------------------------

    def _take_alerts(self, records: Iterable[Mapping]) -> None:
        for record in records:
            fp, status = record.get("fingerprint"), record.get("status")
            if (not fp or fp in self._resolved or record.get("severity") not in SEVERITY_LEVEL
                    or record.get("starts_at") is None):
                continue
            if status == "firing" and fp not in self._firing_in:
                cluster = self._firing_in[fp] = _cluster_of(record)
                self._firing.setdefault(cluster, {})[fp] = dict(record)
            elif status == "resolved":
                cluster = self._firing_in.pop(fp, None)
                if cluster is not None:
                    del self._firing[cluster][fp]
                    if not self._firing[cluster]:
                        del self._firing[cluster]
                self._resolved[fp] = None
                while len(self._resolved) > RESOLVED_MEMORY:
                    self._resolved.popitem(last=False)

    def _take_summary(self, summary: Mapping) -> None:
        cluster, kind = str(summary.get("cluster_id")), summary.get("kind")
        if kind == "cluster" and summary.get("metadata_epoch") is not None:
            self._epochs[cluster] = int(summary["metadata_epoch"])
        elif kind == "clients":
            self._client_shards.setdefault(cluster, {})[int(summary.get("shard") or 0)] = dict(summary)
        elif kind == EXPIRED_SUMMARY:
            fleet = self._brokers.get(cluster, {})
            for broker_id in summary.get("broker_ids") or []:
                fleet.pop(int(broker_id), None)
            if summary.get("fleet_empty"):
                self._brokers.pop(cluster, None)
                self._epochs.pop(cluster, None)

    def _track_lag(self, cluster: str, now: int) -> None:
        """When each broker was first seen behind the cluster's epoch. A broker applies a new epoch
        a little after the controller writes it, so a lag shows only once it outlasts the grace."""
        fleet, epoch = self._brokers.get(cluster, {}), self._epochs.get(cluster)
        behind = self._behind.setdefault(cluster, {})
        for broker_id in [b for b in behind if b not in fleet]:
            del behind[broker_id]
        for broker_id, row in fleet.items():
            if epoch_lag(row, epoch) > 0:
                behind.setdefault(broker_id, now)
            else:
                behind.pop(broker_id, None)

    def _forget(self, cluster: str) -> None:
        """epochwatch reset-cluster: the job forgot the cluster; what it sends afterwards shows afresh."""
        for table in (self._brokers, self._epochs, self._client_shards, self._heard, self._behind):
            table.pop(cluster, None)

    def _known(self) -> set[str]:
        return ({c for c, fleet in self._brokers.items() if fleet} | set(self._epochs) | set(self._client_shards)
                | set(self._firing))

    def _copy(self, cluster: str) -> ClusterParts:
        return ClusterParts(cluster, dict(self._brokers.get(cluster, {})), self._epochs.get(cluster),
                            dict(self._behind.get(cluster, {})), self.lag_grace_ms,
                            list(self._client_shards.get(cluster, {}).values()),
                            list(self._firing.get(cluster, {}).values()), self._heard.get(cluster))


# --- pure views --------------------------------------------------------------------------------

class ClusterParts(NamedTuple):
    """What the board holds of one cluster, copied under its lock."""

    cluster: str
    brokers: dict[int, dict]      # broker id -> latest status row
    epoch: int | None             # the cluster's newest metadata epoch
    behind: dict[int, int]        # broker id -> wall ms it was first seen behind the epoch
    lag_grace_ms: int
    shards: list[dict]            # each client shard's latest summary
    firing: list[dict]            # alert records
    heard_ms: int | None


def _cluster_view(p: ClusterParts, now: int) -> dict:
    """One cluster in full: its lists, each entry with its age."""
    incidents = sorted(p.firing, key=lambda r: (-LEVELS.index(SEVERITY_LEVEL[r["severity"]]), int(r["starts_at"]),
                                                r["alertname"], r["fingerprint"]))
    fenced, stopping, lagging = _unwell_brokers(p, now)
    return {**_headline(p, now),
            "metadata_epoch": p.epoch,
            "incidents": [_incident(r, now) for r in incidents[:INCIDENTS_SHOWN]],
            "brokers": {"total": len(p.brokers), "by_state": _by_state(p.brokers),
                        "fenced": [_fenced(p, b, now) for b in fenced],
                        "stopping": [{"broker_id": b, **_held(p.brokers[b], now)} for b in stopping],
                        "lagging": [{"broker_id": b, "metadata_epoch": p.brokers[b].get("metadata_epoch"),
                                     "lag": epoch_lag(p.brokers[b], p.epoch), "for_s": _seconds(now - p.behind[b])}
                                    for b in lagging]},
            "clients": {**_client_counts(p.shards), "stale_examples": _examples(p.shards, "stale_examples"),
                        "overdue_examples": _examples(p.shards, "overdue_examples")}}


def _summary_line(p: ClusterParts, now: int) -> dict:
    """One cluster of the overview: its counts, not its lists (cheap for thousands of clusters)."""
    fenced, stopping, lagging = _unwell_brokers(p, now)
    oldest = min((int(r["starts_at"]) for r in p.firing), default=None)
    return {**_headline(p, now),
            "oldest_incident_age_s": _seconds(now - oldest) if oldest is not None else None,
            "brokers": {"total": len(p.brokers), "by_state": _by_state(p.brokers), "fenced": len(fenced),
                        "stopping": len(stopping), "lagging": len(lagging)},
            "clients": _client_counts(p.shards)}


def _headline(p: ClusterParts, now: int) -> dict:
    severities = [r["severity"] for r in p.firing]
    return {"cluster": p.cluster, "status": worst(SEVERITY_LEVEL[s] for s in severities),
            "updated_at": utc_text(p.heard_ms) if p.heard_ms is not None else None,
            "incidents_firing": {"total": len(severities), **{s: severities.count(s) for s in SEVERITY_LEVEL}}}


def _incident(record: Mapping, now: int) -> dict:
    starts = int(record["starts_at"])
    return {"alertname": record["alertname"], "severity": record["severity"],
            "labels": dict(record.get("labels") or {}), "starts_at": utc_text(starts),
            "age_s": _seconds(now - starts), "fingerprint": record["fingerprint"],
            "summary": (record.get("annotations") or {}).get("summary")}


def _unwell_brokers(p: ClusterParts, now: int) -> tuple[list[int], list[int], list[int]]:
    """Ids of the fenced, the stopping and the lagging brokers. A fenced broker is not expected to
    keep up: its epoch lag is shown with it, not as lagging."""
    fenced, stopping, lagging = [], [], []
    for broker_id in sorted(p.brokers):
        state = p.brokers[broker_id].get("state")
        if state == FENCED:
            fenced.append(broker_id)
            continue
        if state == STOPPING:
            stopping.append(broker_id)
        since = p.behind.get(broker_id)
        if since is not None and now - since >= p.lag_grace_ms:
            lagging.append(broker_id)
    return fenced, stopping, lagging


def _by_state(brokers: dict[int, dict]) -> dict[str, int]:
    by_state: dict[str, int] = {}
    for row in brokers.values():
        by_state[row.get("state")] = by_state.get(row.get("state"), 0) + 1
    return dict(sorted(by_state.items()))


def _fenced(p: ClusterParts, broker_id: int, now: int) -> dict:
    row = p.brokers[broker_id]
    return {"broker_id": broker_id, "reason": row.get("inactive_reason") or None, **_held(row, now),
            "metadata_epoch": row.get("metadata_epoch"), "lag": epoch_lag(row, p.epoch)}


def _held(row: Mapping, now: int) -> dict:
    """Since when the broker is in its state (event time), and for how long by the clock."""
    since = row.get("state_since_ms")
    if not isinstance(since, int) or since < 0:
        return {"since": None, "for_s": None}
    return {"since": utc_text(since), "for_s": _seconds(now - since)}


def _client_counts(shards: list[dict]) -> dict:
    return {"stale": sum(int(s.get("stale_clients") or 0) for s in shards),
            "rebootstrap_overdue": sum(int(s.get("overdue_clients") or 0) for s in shards)}


def _examples(shards: list[dict], key: str) -> list[str]:
    return sorted({c for s in shards for c in s.get(key) or []})[:CLIENT_EXAMPLES]


def _job_view(job: dict, now: int) -> dict:
    status = job["status"]
    seen = job.get("progress_ms")
    if status == RUNNING and seen is not None and now - seen > STALLED_AFTER_MS:
        status = STALLED
    out = {"status": status, "started_at": utc_text(job["started_ms"]),
           "last_progress_at": utc_text(seen) if seen is not None else None,
           "last_progress_age_s": _seconds(now - seen) if seen is not None else None}
    for key in ("query", "batch_id", "input_records", "input_records_per_second", "processed_records_per_second",
                "batch_duration_ms", "source_lag_records", "state_rows", "error"):
        if key in job:
            out[key] = job[key]
    if "stopped_ms" in job:
        out["stopped_at"] = utc_text(job["stopped_ms"])
    return out


def _seconds(ms: int) -> float:
    """A duration in seconds, never negative (event time may run ahead of the wall clock)."""
    return round(max(0, ms) / 1000, 3)


def _cluster_of(record: Mapping) -> str:
    return str(record.get("cluster_id") or (record.get("labels") or {}).get("cluster") or "")


def _clusters_of(batch) -> set[str]:
    return ({str(r["cluster_id"]) for r in batch.broker_status}
            | {str(s["cluster_id"]) for s in batch.summaries if s.get("kind") != RESET_SUMMARY}
            | {_cluster_of(a) for a in batch.pages})
