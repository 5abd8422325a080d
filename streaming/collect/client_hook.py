"""The client hook: one line in a confluent-kafka application, and its producers, consumers and
admin clients report metadata responses, rebootstraps, connection-setup timeouts and failed
metadata requests (and, if asked, their commits) to epochwatch's events topic (docs/client-hook.md).

    from streaming.collect.client_hook import ClientHook

    hook = ClientHook(events_bootstrap="kafka-monitoring:9092")
    consumer = Consumer(hook.instrument({"bootstrap.servers": "...", "group.id": "orders"}))
    ...
    hook.close()   # at exit: delivers what is queued

It never slows or fails the application: the client's callbacks only append to a bounded queue
(a full queue drops, counted); a background thread reads the lines (client_logs.py) and publishes
through a producer of its own that never blocks (collect/publish.py); an exception of the hook
never reaches the application's callbacks.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
from typing import Callable, Mapping

from streaming.collect.client_logs import ClientLogReader
from streaming.collect.publish import EventPublisher

log = logging.getLogger("epochwatch.client_hook")
FACILITIES = ("METADATA ", "REBOOTSTRAP ", "FAIL ")   # the only log lines the hook reads
DRAIN_INTERVAL_S = 0.2
WARN_EVERY_S = 60.0
_client_numbers = itertools.count(1)


class ClientHook:
    def __init__(self, events_bootstrap: str, cluster_id: str | None = None, *, events_topic: str = "epochwatch.events",
                 encoding: str = "confluent", events_client: Mapping[str, str] | None = None,
                 max_queued: int = 10_000, clock: Callable[[], float] = time.time):
        self.cluster_id = cluster_id
        self.dropped = 0          # lines and errors the full queue refused
        self.published = 0
        self.published_by_type: collections.Counter = collections.Counter()
        self._clock = clock
        self._queue: collections.deque = collections.deque()
        self._max_queued = max_queued
        self._readers: list[ClientLogReader] = []
        self._epochs_seen: dict = {}   # every client's newest leader epochs, per cluster (client_logs.py)
        self._publisher = EventPublisher(events_bootstrap, events_topic, encoding=encoding, client=events_client,
                                         max_queued=max_queued)
        self._stop = threading.Event()
        self._warned_at = 0.0
        self._thread = threading.Thread(target=self._run, name="epochwatch-client-hook", daemon=True)
        self._thread.start()

    def instrument(self, conf: Mapping[str, object], *, commits: bool = False) -> dict:
        """The application's client configuration with the hook's channels added: debug=metadata
        (one line per partition per metadata response, nothing per message), a logger and an
        error_cb that first call the application's own, if it had them.

        ``commits=True`` (a consumer's configuration, with its ``group.id``) also reports each
        successful commit with the leader epoch the client sent (``offset_commit``): for groups
        the commit log collector does not read. Not both for one group: the two see a commit at
        different times, and a commit reported late by one after a newer one by the other would
        look like an epoch going back."""
        conf = dict(conf)
        if commits and not conf.get("group.id"):
            raise ValueError("ClientHook.instrument(conf, commits=True) needs the consumer's 'group.id' in conf: "
                             "commits belong to a group")
        client_id = str(conf.setdefault("client.id", f"{os.path.basename(_program())}-{os.getpid()}-"
                                                     f"{next(_client_numbers)}"))
        reader = ClientLogReader(self.cluster_id, client_id,
                                 int(conf.get("socket.connection.setup.timeout.ms", 30_000)), shared=self._epochs_seen)
        self._readers.append(reader)
        app_debug = {c.strip() for c in str(conf.get("debug", "")).split(",") if c.strip()}
        conf["debug"] = ",".join(sorted(app_debug | {"metadata"}))
        conf["logger"] = _HookLogger(self._offer, reader, conf.get("logger"), app_debug=bool(app_debug))
        app_error_cb = conf.get("error_cb")

        def error_cb(error) -> None:
            try:
                self._offer(reader, "error", (error.name(), error.str()))
            except Exception:   # never into the application's callback
                log.exception("epochwatch client hook: could not read an error")
            finally:
                if app_error_cb is not None:
                    app_error_cb(error)

        conf["error_cb"] = error_cb
        if commits:
            conf["on_commit"] = self._on_commit(reader, str(conf["group.id"]), conf.get("on_commit"))
        return conf

    def _on_commit(self, reader: ClientLogReader, group_id: str, app_on_commit):
        def on_commit(error, partitions) -> None:
            try:
                if error is None:
                    self._offer(reader, "commit", (group_id, [
                        (tp.topic, tp.partition, tp.offset, getattr(tp, "leader_epoch", None))
                        for tp in partitions if tp.error is None]))
            except Exception:   # never into the application's callback
                log.exception("epochwatch client hook: could not read a commit")
            finally:
                if app_on_commit is not None:
                    app_on_commit(error, partitions)

        return on_commit

    def answered_by(self) -> dict[str, int | None]:
        """client.id -> the node of its latest metadata response (librdkafka asks one broker)."""
        return {reader.client_id: reader.last_answered_by for reader in list(self._readers)}

    def _offer(self, reader: ClientLogReader, kind: str, payload) -> None:
        """From the client's callbacks: as cheap as an append."""
        if len(self._queue) >= self._max_queued:
            self.dropped += 1
            return
        self._queue.append((int(self._clock() * 1000), reader, kind, payload))

    def _run(self) -> None:
        while not self._stop.wait(DRAIN_INTERVAL_S):
            self._drain()

    def _drain(self) -> None:
        events: list[dict] = []
        try:
            while self._queue:
                now_ms, reader, kind, payload = self._queue.popleft()
                events += _READ[kind](reader, now_ms, payload)
            now_ms = int(self._clock() * 1000)
            for reader in list(self._readers):
                events += reader.idle(now_ms)
            if events:
                self._publisher.publish(events)
                self.published += len(events)
                self.published_by_type.update(e["event_type"] for e in events)
            else:
                self._publisher.publish([])   # serves delivery reports
        except Exception:   # the hook's own bug must not end its thread, nor touch the application
            log.exception("epochwatch client hook: could not read or publish client events")
        self._warn_about_drops()

    def _warn_about_drops(self) -> None:
        dropped = self.dropped + self._publisher.dropped
        now = time.monotonic()
        if dropped and now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("epochwatch client hook: %d client lines or events dropped so far (queue full: the events "
                        "cluster is slow or away)", dropped)

    def close(self, timeout_s: float = 10.0) -> int:
        """Stop, publish what was read, deliver it; returns what was left undelivered."""
        self._stop.set()
        self._thread.join(timeout_s)
        self._drain()
        return self._publisher.close(timeout_s)


_READ = {"line": lambda reader, now_ms, text: reader.line(now_ms, text),
         "error": lambda reader, now_ms, error: reader.error(now_ms, *error),
         "commit": lambda reader, now_ms, commit: reader.committed(now_ms, *commit)}


class _HookLogger(logging.Logger):
    """The ``logger`` librdkafka's lines go to (confluent-kafka calls ``.log(level, msg, *args)``):
    the hook's facilities go to the hook, and every line on to where it went before (the
    application's logger, or the "librdkafka" logger, which prints warnings to stderr as librdkafka
    itself did), except the debug lines the application did not ask for."""

    def __init__(self, offer, reader: ClientLogReader, app_logger: logging.Logger | None, app_debug: bool):
        super().__init__("epochwatch.client_hook.librdkafka")
        self._offer, self._reader = offer, reader
        self._next = app_logger if app_logger is not None else logging.getLogger("librdkafka")
        self._app_debug = app_debug

    def log(self, level, msg, *args, **kwargs) -> None:
        text = msg % args if args else str(msg)
        if text.startswith(FACILITIES):
            self._offer(self._reader, "line", text)
        if level > logging.DEBUG or self._app_debug:
            self._next.log(level, msg, *args, **kwargs)


def _program() -> str:
    import sys

    return sys.argv[0] or "python"
