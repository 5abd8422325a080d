"""The collect loop: every ``collect.interval.ms`` ask the cluster (probes), read the exporters,
derive the events (pure), hand them to the publisher, print one status line.

Nothing the cluster does may stop it or hold a round up: every call runs in a pool with at most
one call per target in flight, and a round waits ``collect.request.timeout.ms`` for them. A call
still running then (a paused broker's connection, an exporter rendering a large page on a busy
machine) is late, not lost: its answer is taken by the next round, and its target gets no new
call meanwhile. A target that failed or was late last time is not waited for once the others have
answered (Calls): a paused broker would otherwise hold every round's evidence, its own silence
included, back by a request timeout. A failed Kafka request becomes a ``metadata_request_failed``
event; an exporter that does not answer is a count in the status line and the metrics.

With ``collect.offset.commits: on`` a round also takes the commits read from ``__consumer_offsets``
since the last round (streaming/collect/commit_log.py) and sends them as ``offset_commit`` events.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import IO, Callable, Hashable

from streaming.collect import exporter
from streaming.collect.commit_log import CommitLogReader, kafka_libs
from streaming.collect.commits import Commit, offset_commit_event
from streaming.collect.derive import BrokerObservation, DeriveSettings, EventDeriver, Round
from streaming.collect.metrics import CollectorMetrics
from streaming.collect.probes import BrokerProbe, ClusterProbe, ClusterState, ProbeError, QuorumState
from streaming.config import Settings


@dataclass
class RoundReport:
    reachable: bool            # the Admin API answered this round
    cluster_id: str | None
    controller_id: int | None
    controller_epoch: int | None
    brokers: int
    fenced: int
    stopping: int
    probes_ok: int
    probes: int
    scrapes_ok: int
    scrapes: int
    events: int
    seconds: float
    commits: str = ""          # the commit log source's part of the line; empty when it is off

    def line(self, publisher) -> str:
        cluster = self.cluster_id or "unreachable"
        controller = "?" if self.controller_id is None else f"{self.controller_id} (epoch {self.controller_epoch})"
        sent = "" if publisher is None else (f", sent {publisher.sent}, queued {publisher.queued}, "
                                             f"failed {publisher.failed}, dropped {publisher.dropped}")
        return (f"epochwatch collect: cluster {cluster} controller {controller} brokers {self.brokers} "
                f"(fenced {self.fenced}, stopping {self.stopping}) probes {self.probes_ok}/{self.probes} "
                f"exporters {self.scrapes_ok}/{self.scrapes}{self.commits} events +{self.events} in {self.seconds:.1f} s{sent}")


class Calls:
    """At most one call per key in flight; a round starts what is not running and takes what has
    finished by its deadline (a call that finishes later is taken by the next round).

    A key whose last call failed or took longer than ``timeout_s`` (whichever round took it) is
    *unanswered*: a round waits for it only while other calls are still running, and what it has
    not answered by then is *deferred*, taken by a later round. Every round would otherwise publish
    a request timeout late while a broker is paused, and the job's horizon trails the events by
    how late they arrive. A call that answers within ``timeout_s`` makes the key answered again."""

    def __init__(self, timeout_s: float, workers: int = 16):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="epochwatch-collect")
        self._timeout_s = timeout_s
        self._running: dict[Hashable, Future] = {}
        self._seconds: dict[Hashable, float] = {}  # how long each finished call took
        self._unanswered: set[Hashable] = set()
        self.deferred: set[Hashable] = set()  # the last take's keys left running before its deadline

    def start(self, key: Hashable, fn: Callable[[], object]) -> None:
        if key not in self._running:
            self._running[key] = self._pool.submit(self._timed, key, fn)

    def _timed(self, key: Hashable, fn: Callable[[], object]):
        began = time.monotonic()
        try:
            return fn()
        finally:
            self._seconds[key] = time.monotonic() - began

    def take(self, keys, deadline: float) -> dict:
        """Results (or the exceptions raised) of the calls of ``keys`` done by ``deadline``, or
        for the unanswered keys, done when the others are."""
        running = [k for k in keys if k in self._running]
        awaited = [self._running[k] for k in running if k not in self._unanswered]
        wait(awaited or [self._running[k] for k in running], timeout=max(0.0, deadline - time.monotonic()))
        early = time.monotonic() < deadline
        done, self.deferred = {}, set()
        for k in running:
            f = self._running[k]
            if not f.done():
                self._unanswered.add(k)
                if early:
                    self.deferred.add(k)
                continue
            del self._running[k]
            failure, took = f.exception(), self._seconds.pop(k, 0.0)
            done[k] = failure or f.result()
            if failure is None and took <= self._timeout_s:
                self._unanswered.discard(k)
            else:
                self._unanswered.add(k)
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Collector:
    def __init__(self, settings: Settings, publisher, probe: ClusterProbe | None = None,
                 scrape: Callable[[str, float], exporter.NodeMetrics] = exporter.scrape,
                 clock: Callable[[], float] = time.time, metrics: CollectorMetrics | None = None,
                 broker_probe: Callable[[str], ClusterProbe] | None = None,
                 commit_log: CommitLogReader | None = None):
        c, r = settings.collect, settings.rules
        self.settings, self.publisher, self.scrape, self.clock = settings, publisher, scrape, clock
        self.metrics = metrics
        self.probe = probe or ClusterProbe(c.bootstrap_servers or settings.kafka.bootstrap_servers, c.client_id,
                                           c.request_timeout_ms, c.client)
        self._new_broker_probe = broker_probe or (
            lambda address: BrokerProbe(address, c.client_id, c.request_timeout_ms, c.client))
        self._broker_probes: dict[int, tuple[str, ClusterProbe]] = {}
        self.deriver = EventDeriver(DeriveSettings(client_id=c.client_id,
                                                   session_timeout_ms=r.controller_heartbeat_timeout_ms,
                                                   heartbeat_interval_ms=r.broker_heartbeat_interval_ms,
                                                   stale_after_ms=c.metadata_stale_after_ms))
        self.calls = Calls(c.request_timeout_ms / 1000)
        if commit_log is None and c.offset_commits == "on":
            commit_log = CommitLogReader(c.bootstrap_servers or settings.kafka.bootstrap_servers, c.client,
                                         kafka_libs(c.kafka_libs), c.client_id)
        self.commit_log = commit_log
        self._unsent_commits: list[Commit] = []  # read before the cluster id was known
        self.cluster: ClusterState | None = None
        self.controller: tuple[int, int] | None = None
        self._reachable = False  # the last round's that knew (a deferred DescribeCluster does not)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _broker_probe(self, bid: int, address: str) -> ClusterProbe:
        known = self._broker_probes.get(bid)
        if known is None or known[0] != address:  # new, or moved: a broker restarted elsewhere
            if known is not None:
                known[1].close()
            known = self._broker_probes[bid] = (address, self._new_broker_probe(address))
        return known[1]

    def _describe(self) -> tuple[ClusterState, QuorumState | None]:
        cluster = self.probe.cluster()
        try:
            return cluster, self.probe.quorum()
        except ProbeError:
            return cluster, None  # the controller's view then comes from the exporters, or the last round

    def _scrape(self, url: str):
        """(metrics, when the page arrived): the controller's gauges are relative to that moment."""
        return self.scrape(url, self.settings.collect.exporter_timeout_ms / 1000), self._now_ms()

    def run_round(self) -> tuple[list[dict], RoundReport]:
        # The round's events are stamped with its start: what the probes and scrapes saw is at
        # least that recent, and the job's processing-time horizon trails a key's newest events by
        # how late they arrived (streaming.spark.key_steps), so stamping the end would make the
        # heartbeats (up to an interval old) look late.
        started, started_ms = time.monotonic(), self._now_ms()
        c = self.settings.collect
        urls = c.urls()
        brokers = {} if self.cluster is None else {
            bid: self._broker_probe(bid, f"{b.host}:{b.port}") for bid, b in self.cluster.brokers.items()}
        self.calls.start("cluster", self._describe)
        for url in urls:
            self.calls.start(url, lambda u=url: self._scrape(u))
        for bid, probe in brokers.items():
            self.calls.start(("metadata", bid), lambda b=bid, p=probe: p.metadata(b))
        keys = ["cluster", *urls, *(("metadata", bid) for bid in brokers)]
        results = self.calls.take(keys, started + c.request_timeout_ms / 1000)

        failures: dict[int | None, str] = {}
        answers, quorum = {}, None
        reachable = "cluster" in self.calls.deferred and self._reachable
        for bid in brokers:
            result = results.get(("metadata", bid))
            if result is None:
                if ("metadata", bid) not in self.calls.deferred:  # deferred: not a timeout (yet)
                    failures[bid] = "REQUEST_TIMEOUT"  # still waiting: a later round takes the answer
            elif isinstance(result, ProbeError):
                failures[bid] = result.reason
            elif not isinstance(result, Exception):
                answers[bid] = result
        outcome = results.get("cluster")
        if isinstance(outcome, ProbeError):
            if not answers:
                failures[None] = outcome.reason  # no broker answered anything: the cluster is unreachable
        elif outcome is not None and not isinstance(outcome, Exception):
            (self.cluster, quorum), reachable = outcome, True
            if quorum is not None:
                self.controller = (quorum.leader_id, quorum.leader_epoch)
        self._reachable = reachable
        nodes, others, registration, heartbeats = self._pages([results[u] for u in urls if u in results],
                                                               self.settings.rules.controller_heartbeat_timeout_ms)
        if quorum is None:
            active = next((m for m in nodes.values() if m.is_active_controller), None)
            if active is not None and active.raft_leader is not None and active.raft_epoch is not None:
                self.controller = (active.raft_leader, active.raft_epoch)
        broker_ids = set(brokers) | set(self.cluster.brokers if self.cluster else ()) | set(registration) | {
            n for n, m in nodes.items() if m.broker_state is not None}
        observations = {bid: self._observe(bid, quorum, nodes.get(bid), registration, heartbeats,
                                           others.get(bid, ()))
                        for bid in broker_ids}
        events = []
        if self.cluster is not None and self.controller is not None:
            events = self.deriver.derive(Round(started_ms, self.cluster.cluster_id, *self.controller, observations,
                                               answers, failures))
        commits = self._commit_events()
        events += commits
        if self.publisher is not None and (commits or (self.cluster is not None and self.controller is not None)):
            self.publisher.publish(events)
        states = [o.controller_state for o in observations.values()]
        scrapes_ok = sum(1 for u in urls if u in results and not isinstance(results[u], Exception))
        report = RoundReport(reachable, self.cluster.cluster_id if self.cluster else None,
                             *(self.controller or (None, None)), len(observations), states.count("INACTIVE"),
                             states.count("STOPPING"), len(answers), len(brokers), scrapes_ok, len(urls), len(events),
                             time.monotonic() - started, self._commit_summary(len(commits)))
        return events, report

    def _commit_events(self) -> list[dict]:
        """The commits read from the commit log since the last round, as offset_commit events
        (held, up to a bound, until a round has learned the cluster id they belong to)."""
        log = self.commit_log
        if log is None:
            return []
        log.ensure_running()
        self._unsent_commits += [o.commit for o in log.take() if o.kind == "commit"]
        if self.cluster is None:
            del self._unsent_commits[:-100_000]
            return []
        cluster_id, client_id = self.cluster.cluster_id, self.settings.collect.client_id
        events = [offset_commit_event(c, cluster_id, client_id) for c in self._unsent_commits]
        self._unsent_commits = []
        return events

    def _commit_summary(self, sent: int) -> str:
        log = self.commit_log
        if log is None:
            return ""
        n = log.counts
        problem = f", last: {n.last_problem}" if n.last_problem else ""
        exit_ = f", last exit: {log.last_exit}" if log.last_exit else ""
        return (f" commits +{sent} ({log.state}; tombstones {n['tombstone']}, "
                f"other records {n['ignored_type']}, "
                f"undecodable {n['unknown_version'] + n['malformed'] + n['id_too_long']}, dropped {log.dropped}, "
                f"restarts {log.restarts}{exit_}{problem})")

    @staticmethod
    def _pages(pages, session_ms: int):
        """Node id -> metrics of the process that is the node; node id -> start times of other
        live processes claiming the same id; the active controller's registration state and last
        heartbeat time per broker (empty without its page: DescribeQuorum's last fetch stands
        in). The gauge stops at the session timeout: from there on it only says "a session ago
        or longer"."""
        claims: dict[int, list[exporter.NodeMetrics]] = {}
        registration, heartbeats = {}, {}
        for page in pages:
            if isinstance(page, Exception):
                continue
            m, at = page
            if m.node_id is not None:
                claims.setdefault(m.node_id, []).append(m)
            if m.is_active_controller:
                registration = m.registration
                heartbeats = {bid: at - since for bid, since in m.since_heartbeat_ms.items() if since < session_ms}
        nodes, others = {}, {}
        for node_id, ms in claims.items():
            # the node is the running process that started last (Kafka refuses a newer one while
            # the registered one lives, and replaces an older one once its session is gone)
            ms.sort(key=lambda m: (m.broker_state == exporter.BROKER_RUNNING, m.start_time_ms or 0))
            nodes[node_id] = ms[-1]
            others[node_id] = tuple(m.start_time_ms for m in ms[:-1] if m.start_time_ms is not None
                                    and m.start_time_ms != ms[-1].start_time_ms)
        return nodes, others, registration, heartbeats

    def _observe(self, bid, quorum: QuorumState | None, own, registration, heartbeats, others) -> BrokerObservation:
        # With the active controller's page in hand, its gauge is the heartbeat: a broker it has
        # not heard from for a session is silent, even if its last metadata fetch (a little later
        # than its last heartbeat) would pass for one. Without the page, the last fetch stands in.
        fetch = quorum.observers.get(bid) if quorum is not None else None
        reg = self.cluster.brokers.get(bid) if self.cluster is not None else None
        return BrokerObservation(
            broker_id=bid, fenced=reg.fenced if reg is not None else None, registration=registration.get(bid),
            last_heartbeat_ms=heartbeats.get(bid), last_fetch_ms=fetch[1] if fetch and not registration else None,
            fetched_offset=fetch[0] if fetch else None,
            start_time_ms=own.start_time_ms if own else None, broker_state=own.broker_state if own else None,
            applied_offset=own.applied_offset if own else None,
            applied_timestamp_ms=own.applied_timestamp_ms if own else None, other_starts=others)

    def run(self, stop: Callable[[], bool] = lambda: False, status: IO[str] | None = sys.stderr,
            rounds: int | None = None) -> int:
        """Rounds every interval until ``stop()`` (or ``rounds`` rounds); returns rounds run."""
        interval_s = self.settings.collect.interval_ms / 1000
        done, next_at = 0, time.monotonic()
        while not stop() and (rounds is None or done < rounds):
            events, report = self.run_round()
            done += 1
            if self.metrics is not None:
                self.metrics.round_done(report, events, self.publisher, self.clock(), self.commit_log)
            if status is not None:
                print(report.line(self.publisher), file=status, flush=True)
            if rounds is not None and done >= rounds:
                break
            next_at += interval_s
            wait_s = next_at - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)  # the loop's pace, not a test's wait
            else:
                next_at = time.monotonic()  # a slow round: start the next now
        return done

    def close(self) -> None:
        if self.commit_log is not None:
            self.commit_log.close()
        self.calls.close()
        for _, probe in self._broker_probes.values():
            probe.close()
        self.probe.close()
