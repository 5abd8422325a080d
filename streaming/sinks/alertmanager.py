"""Deliver alert records to Alertmanager (API v2) without ever blocking the streaming job.

The job calls :meth:`AlertmanagerSink.add` and :meth:`AlertmanagerSink.flush` from foreachBatch
on the driver; both only touch in-memory state under a lock. Every URL is an
:class:`AlertmanagerInstance` with its own :class:`~streaming.sinks.alert_book.AlertBook` and
delivery thread: the instances of an HA Alertmanager do not pass alerts on to each other, so each
needs every alert (Prometheus sends to each too), and one that is down or hanging must neither
hold back the others nor miss what was sent meanwhile. A thread POSTs what its book says is due,
retries with exponential backoff and jitter while its Alertmanager is down or slow, and re-sends
active alerts every resend interval. Nothing is dropped while an Alertmanager is away: the latest
state per fingerprint waits in its book.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Sequence

from streaming.sinks.alert_book import AlertBook, BookSettings, Delivery, Rejected
from streaming.sinks.alertmanager_http import INVALID, OK, AlertmanagerClient, HttpOptions

from streaming.sinks.labels import DEFAULT_LABELS, presented

if TYPE_CHECKING:
    from streaming.config import AlertLabelSettings, SinkSettings

log = logging.getLogger(__name__)

DEFAULT_GENERATOR_URL = BookSettings.generator_url   # the driver's /metrics (streaming.sinks.metrics.DEFAULT_PORT)
MAX_IDLE_S = 1.0          # a delivery thread re-checks its book at least this often
POST_BATCH_SIZE = 500


class DeliveryMetrics(Protocol):
    """What the sink reports, per Alertmanager URL (``streaming.sinks.metrics.Metrics`` implements it)."""

    def set_alertmanager_backlog(self, alertmanager: str, backlog: int) -> None: ...

    def count_alertmanager_failures(self, alertmanager: str, count: int = 1) -> None: ...


class AlertmanagerSink:
    """``add(records)`` / ``flush()`` / ``close()``; deliveries happen on one daemon thread per URL.

    ``urls`` are Alertmanager base URLs (``http://127.0.0.1:9093``), a sequence or comma-separated;
    every one gets every alert. ``http`` holds the credentials and TLS they share. ``clock`` returns
    seconds since the epoch (``time.time``); ``generator_url`` is the link Alertmanager shows as the
    alert's source (the job's metrics endpoint by default). ``labels`` (``sinks.labels``) says how the
    rules' records are labelled on their way out (streaming.sinks.labels), as in the alerts topic.
    """

    def __init__(self, urls: str | Sequence[str], resend_interval_s: float = 60.0, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time, *, generator_url: str = DEFAULT_GENERATOR_URL,
                 metrics: DeliveryMetrics | None = None, info_ttl_s: float = 300.0,
                 backoff_initial_s: float = 0.5, backoff_max_s: float = 60.0,
                 rng: random.Random | None = None, http: HttpOptions = HttpOptions(),
                 labels: AlertLabelSettings = DEFAULT_LABELS):
        url_list = [u.strip() for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not url_list:
            raise ValueError("no Alertmanager URL: give at least one, e.g. http://127.0.0.1:9093")
        clients = [AlertmanagerClient(url, http, timeout_s) for url in url_list]
        book = BookSettings(resend_interval_ms=int(resend_interval_s * 1000), info_ttl_ms=int(info_ttl_s * 1000),
                            backoff_initial_ms=int(backoff_initial_s * 1000),
                            backoff_max_ms=int(backoff_max_s * 1000), generator_url=generator_url)
        rng = rng or random.Random()
        self.instances = [AlertmanagerInstance(c, book, clock, metrics, rng) for c in clients]
        self.timeout_s = timeout_s
        self._clock = clock
        self._labels = labels

    @classmethod
    def from_settings(cls, sinks: SinkSettings, metrics: DeliveryMetrics | None = None, **options) -> AlertmanagerSink:
        """The sink ``sinks.alertmanager.*`` and ``sinks.external.url`` describe; ``options``: what
        the settings leave to the constructor's defaults (timeouts, backoff)."""
        return cls(sinks.alertmanager_urls(), resend_interval_s=sinks.alertmanager_resend_interval_s,
                   generator_url=sinks.generator_url(), metrics=metrics, http=HttpOptions.from_settings(sinks),
                   labels=sinks.labels, **options)

    # --- called by the job (must return in milliseconds) ---------------------------------

    def add(self, alert_records: Iterable[dict]) -> int:
        """Queue a micro-batch's alert records (as the rules emit them); returns how many were
        refused as malformed."""
        records, now_ms = [self._present(r) for r in alert_records], self._now_ms()
        rejected = [instance.add(records, now_ms) for instance in self.instances][0]   # the same for every book
        for r in rejected:
            log.error("alert record not deliverable to Alertmanager (kept in the alerts topic): %s", r.reason)
        return len(rejected)

    def seed(self, alert_records: Iterable[dict]) -> int:
        """After a driver restart: rebuild the active set from the alerts topic's records (in the
        rules' form: streaming.sinks.alert_history reads them back so)."""
        records, now_ms = [self._present(r) for r in alert_records], self._now_ms()
        return len([instance.seed(records, now_ms) for instance in self.instances][0])

    def flush(self, now: float | None = None) -> int:
        """Wake the delivery threads; returns the backlog. Never waits for Alertmanager.

        ``now`` is accepted so the job can call every sink alike; the sink's clock decides.
        """
        for instance in self.instances:
            instance.wake()
        return self.backlog

    def write(self, batch) -> None:
        """Dispatcher sink (``streaming.sinks.base``): the batch's alerts to deliver (its pages: per-client
        alerts rolled up), then wake the threads."""
        self.add(batch.pages)
        self.flush()

    def close(self, timeout_s: float | None = None) -> int:
        """One last delivery attempt per URL (backoff ignored), then stop. Returns what is left undelivered."""
        for instance in self.instances:
            instance.stop()
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 2 * self.timeout_s + 1)
        for instance in self.instances:
            instance.join(max(0.0, deadline - time.monotonic()))
        return self.backlog

    @property
    def backlog(self) -> int:
        """Alert states not yet accepted, summed over the URLs."""
        return sum(self.backlogs.values())

    @property
    def backlogs(self) -> dict[str, int]:
        """Alert states each URL (credentials hidden) has not accepted yet."""
        return {instance.client.name: instance.backlog for instance in self.instances}

    def _present(self, record):
        if (isinstance(record, Mapping) and isinstance(record.get("labels") or {}, Mapping)
                and isinstance(record.get("annotations") or {}, Mapping)):
            return presented(record, self._labels)
        return record   # the book refuses it, naming the field

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


class AlertmanagerInstance:
    """One Alertmanager URL: its book (what it has accepted, its backoff) and its delivery thread."""

    def __init__(self, client: AlertmanagerClient, settings: BookSettings, clock: Callable[[], float],
                 metrics: DeliveryMetrics | None, rng: random.Random):
        self.client = client
        self._book = AlertBook(settings)
        self._clock = clock
        self._metrics = metrics
        self._rng = rng
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if metrics is not None:   # the series exist from the start: rate() and "> 0" see the first failure
            metrics.set_alertmanager_backlog(client.name, 0)
            metrics.count_alertmanager_failures(client.name, 0)

    def add(self, records: list[dict], now_ms: int) -> list[Rejected]:
        with self._lock:
            rejected = self._book.add(records, now_ms)
        self._report_backlog()
        return rejected

    def seed(self, records: list[dict], now_ms: int) -> list[Rejected]:
        with self._lock:
            rejected = self._book.seed(records, now_ms)
        self._report_backlog()
        return rejected

    def wake(self) -> None:
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._run, name=f"alertmanager-sink {self.client.name}",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.client.close()

    @property
    def backlog(self) -> int:
        with self._lock:
            return self._book.backlog

    # --- the delivery thread -------------------------------------------------------------

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
        self._report_backlog()

    def _post_chunk(self, chunk: list[Delivery]) -> bool:
        """POST one chunk; False when this Alertmanager is unavailable (stop, back off)."""
        outcome, detail = self.client.post([d.payload for d in chunk])
        if outcome == OK:
            with self._lock:
                self._book.delivered(chunk, self._now_ms())
            return True
        if outcome == INVALID and len(chunk) > 1:
            # One bad alert must not hold back the others: isolate it.
            return all(self._post_chunk([d]) for d in chunk)
        if outcome == INVALID:
            log.error("Alertmanager %s refused alert %s (%s); it stays in the alerts topic: %s", self.client.name,
                      chunk[0].fingerprint, chunk[0].payload["labels"].get("alertname"), detail)
            with self._lock:
                self._book.rejected(chunk[0], self._now_ms())
            self._count_failure()
            return True
        with self._lock:
            delay_ms = self._book.failed(self._now_ms(), self._rng.random())
        log.warning("Alertmanager delivery failed (%s: %s); retrying in %.1f s", self.client.name, detail,
                    delay_ms / 1000)
        self._count_failure()
        return False

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _report_backlog(self) -> None:
        if self._metrics is not None:
            self._metrics.set_alertmanager_backlog(self.client.name, self.backlog)

    def _count_failure(self) -> None:
        if self._metrics is not None:
            self._metrics.count_alertmanager_failures(self.client.name, 1)
