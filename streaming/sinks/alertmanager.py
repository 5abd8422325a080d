"""Deliver alert records to Alertmanager (API v2) without ever blocking the streaming job.

The job calls :meth:`AlertmanagerSink.add` and :meth:`AlertmanagerSink.flush` from foreachBatch
on the driver; both only touch in-memory state under a lock. A background thread POSTs what
:class:`~streaming.sinks.alert_book.AlertBook` says is due, retries with exponential backoff and
jitter while Alertmanager is down or slow, and re-sends active alerts every resend interval.
Nothing is dropped while Alertmanager is away: the latest state per fingerprint waits in the book.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable, Iterable, Protocol

import requests

from streaming.sinks.alert_book import AlertBook, BookSettings, Delivery
from udfs.redact import redact

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"
DEFAULT_GENERATOR_URL = BookSettings.generator_url   # the driver's /metrics (streaming.sinks.metrics.DEFAULT_PORT)
MAX_IDLE_S = 1.0          # the thread re-checks the book at least this often
POST_BATCH_SIZE = 500


class DeliveryMetrics(Protocol):
    """What the sink reports (``streaming.sinks.metrics.Metrics`` implements it)."""

    def set_alertmanager_backlog(self, backlog: int) -> None: ...

    def count_alertmanager_failures(self, count: int = 1) -> None: ...


class AlertmanagerSink:
    """``add(records)`` / ``flush()`` / ``close()``; deliveries happen on a daemon thread.

    ``url`` is Alertmanager's base URL (``http://127.0.0.1:9093``). ``clock`` returns seconds
    since the epoch (``time.time``); ``generator_url`` is the link Alertmanager shows as the
    alert's source (the job's metrics endpoint by default).
    """

    def __init__(self, url: str, resend_interval_s: float = 60.0, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time, *, generator_url: str = DEFAULT_GENERATOR_URL,
                 metrics: DeliveryMetrics | None = None, info_ttl_s: float = 300.0,
                 backoff_initial_s: float = 0.5, backoff_max_s: float = 60.0,
                 rng: random.Random | None = None, session: requests.Session | None = None):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager url {redact(url)!r}: give the base URL, e.g. http://127.0.0.1:9093")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s}: must be > 0 (a few seconds)")
        self.endpoint = url.rstrip("/") + ALERTS_PATH
        self.timeout_s = timeout_s
        self._clock = clock
        self._metrics = metrics
        self._rng = rng or random.Random()
        self._http = session or requests.Session()
        self._book = AlertBook(BookSettings(
            resend_interval_ms=int(resend_interval_s * 1000), info_ttl_ms=int(info_ttl_s * 1000),
            backoff_initial_ms=int(backoff_initial_s * 1000), backoff_max_ms=int(backoff_max_s * 1000),
            generator_url=generator_url,
        ))
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # --- called by the job (must return in milliseconds) ---------------------------------

    def add(self, alert_records: Iterable[dict]) -> int:
        """Queue a micro-batch's alert records; returns how many were refused as malformed."""
        with self._lock:
            rejected = self._book.add(list(alert_records), self._now_ms())
            backlog = self._book.backlog
        for r in rejected:
            log.error("alert record not deliverable to Alertmanager (kept in the alerts topic): %s", r.reason)
        self._report_backlog(backlog)
        return len(rejected)

    def seed(self, alert_records: Iterable[dict]) -> int:
        """After a driver restart: rebuild the active set from the alerts topic's records."""
        with self._lock:
            rejected = self._book.seed(list(alert_records), self._now_ms())
            backlog = self._book.backlog
        self._report_backlog(backlog)
        return len(rejected)

    def flush(self, now: float | None = None) -> int:
        """Wake the delivery thread; returns the backlog. Never waits for Alertmanager.

        ``now`` is accepted so the job can call every sink alike; the sink's clock decides.
        """
        self._ensure_thread()
        self._wake.set()
        return self.backlog

    def write(self, batch) -> None:
        """Dispatcher sink (``streaming.sinks.base``): the batch's alert records, then wake the thread."""
        self.add(batch.alerts)
        self.flush()

    def close(self, timeout_s: float | None = None) -> int:
        """One last delivery attempt (backoff ignored), then stop. Returns what is left undelivered."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s if timeout_s is not None else 2 * self.timeout_s + 1)
        self._http.close()
        return self.backlog

    @property
    def backlog(self) -> int:
        with self._lock:
            return self._book.backlog

    # --- delivery thread -----------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._run, name="alertmanager-sink", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.clear()
            stopping = self._stopping.is_set()
            with self._lock:
                plan = self._book.due(self._now_ms(), ignore_backoff=stopping)
            if plan:
                self._deliver(plan)
            if stopping:
                return
            with self._lock:
                next_ms = self._book.next_due_ms(self._now_ms())
            wait_s = MAX_IDLE_S if next_ms is None else (next_ms - self._now_ms()) / 1000
            self._wake.wait(min(MAX_IDLE_S, max(0.01, wait_s)))

    def _deliver(self, plan: list[Delivery]) -> None:
        for start in range(0, len(plan), POST_BATCH_SIZE):
            if not self._post_chunk(plan[start:start + POST_BATCH_SIZE]):
                break
        self._report_backlog(self.backlog)

    def _post_chunk(self, chunk: list[Delivery]) -> bool:
        """POST one chunk; False when Alertmanager is unavailable (stop, back off)."""
        outcome, detail = self._post([d.payload for d in chunk])
        if outcome == "ok":
            with self._lock:
                self._book.delivered(chunk, self._now_ms())
            return True
        if outcome == "invalid" and len(chunk) > 1:
            # One bad alert must not hold back the others: isolate it.
            return all(self._post_chunk([d]) for d in chunk)
        if outcome == "invalid":
            log.error("Alertmanager refused alert %s (%s); it stays in the alerts topic: %s",
                      chunk[0].fingerprint, chunk[0].payload["labels"].get("alertname"), detail)
            with self._lock:
                self._book.rejected(chunk[0], self._now_ms())
            self._count_failure()
            return True
        with self._lock:
            delay_ms = self._book.failed(self._now_ms(), self._rng.random())
        log.warning("Alertmanager delivery failed (%s); retrying in %.1f s", detail, delay_ms / 1000)
        self._count_failure()
        return False

    def _post(self, body: list[dict]) -> tuple[str, str]:
        try:
            response = self._http.post(self.endpoint, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:  # its text may quote the URL, credentials and all
            return "unavailable", redact(f"{type(exc).__name__}: {exc}")
        if response.status_code == 200:
            return "ok", ""
        detail = f"HTTP {response.status_code}: {response.text[:300]}"
        if response.status_code in (400, 422):
            return "invalid", detail
        return "unavailable", detail

    # --- helpers -------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _report_backlog(self, backlog: int) -> None:
        if self._metrics is not None:
            self._metrics.set_alertmanager_backlog(backlog)

    def _count_failure(self) -> None:
        if self._metrics is not None:
            self._metrics.count_alertmanager_failures(1)
