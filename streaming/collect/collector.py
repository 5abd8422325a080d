"""The collect loop: every ``collect.interval.ms`` ask the cluster (probes), read the exporters,
derive the events (pure), hand them to the publisher, print one status line.

Nothing the cluster does may stop it: every failure to reach a node becomes a
``metadata_request_failed`` event (when it was a Kafka request) or a count in the status line
(when it was an exporter), and the loop goes on.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Callable

from streaming.collect import exporter
from streaming.collect.derive import BrokerObservation, DeriveSettings, EventDeriver, Round
from streaming.collect.metrics import CollectorMetrics
from streaming.collect.probes import ClusterProbe, ProbeError
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

    def line(self, publisher) -> str:
        cluster = self.cluster_id or "unreachable"
        controller = "?" if self.controller_id is None else f"{self.controller_id} (epoch {self.controller_epoch})"
        sent = "" if publisher is None else (f", sent {publisher.sent}, queued {publisher.queued}, "
                                             f"failed {publisher.failed}, dropped {publisher.dropped}")
        return (f"epochwatch collect: cluster {cluster} controller {controller} brokers {self.brokers} "
                f"(fenced {self.fenced}, stopping {self.stopping}) probes {self.probes_ok}/{self.probes} "
                f"exporters {self.scrapes_ok}/{self.scrapes} events +{self.events}{sent}")


class Collector:
    def __init__(self, settings: Settings, publisher, probe: ClusterProbe | None = None,
                 scrape: Callable[[str, float], exporter.NodeMetrics] = exporter.scrape,
                 clock: Callable[[], float] = time.time, metrics: CollectorMetrics | None = None):
        c, r = settings.collect, settings.rules
        self.settings, self.publisher, self.scrape, self.clock = settings, publisher, scrape, clock
        self.metrics = metrics
        self.probe = probe or ClusterProbe(c.bootstrap_servers or settings.kafka.bootstrap_servers, c.client_id,
                                           c.request_timeout_ms, c.client)
        self.deriver = EventDeriver(DeriveSettings(client_id=c.client_id,
                                                   session_timeout_ms=r.controller_heartbeat_timeout_ms,
                                                   heartbeat_interval_ms=r.broker_heartbeat_interval_ms,
                                                   stale_after_ms=c.metadata_stale_after_ms))
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="epochwatch-scrape")
        self.cluster_id: str | None = None
        self.controller: tuple[int, int] | None = None
        self.known_brokers: tuple[int, ...] = ()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _start_scrapes(self) -> list[Future]:
        """Every exporter at once, beside the Admin calls: a Kafka node takes 0.5-1 s to render
        its page (about 1 MB with a catch-all rule, more on a busy machine); one after another,
        that was a 4-5 s round on a 3+3 cluster."""
        timeout_s = self.settings.collect.exporter_timeout_ms / 1000

        def one(url):
            try:
                return self.scrape(url, timeout_s), self._now_ms()
            except exporter.ScrapeError:
                return None, None

        return [self._pool.submit(one, url) for url in self.settings.collect.urls()]

    @staticmethod
    def _scrapes_done(futures: list[Future]) -> tuple[dict[int, exporter.NodeMetrics], dict[int, int], dict[int, int], int]:
        """Node id -> metrics; the active controller's registration state and last heartbeat time
        per broker (empty without its exporter: DescribeQuorum's last fetch stands in); how many
        exporters answered."""
        nodes, registration, heartbeats, ok = {}, {}, {}, 0
        for future in futures:
            m, at = future.result()
            if m is None:
                continue
            ok += 1
            if m.node_id is not None:
                nodes[m.node_id] = m
            if m.is_active_controller:
                registration = m.registration
                heartbeats = {bid: at - since for bid, since in m.since_heartbeat_ms.items()}
        return nodes, registration, heartbeats, ok

    def run_round(self) -> tuple[list[dict], RoundReport]:
        # The round's events are stamped with its start: what the probes and scrapes saw is at
        # least that recent, and the job's processing-time horizon trails the newest event of a
        # key, so stamping the end would make the heartbeats (up to an interval old) look late.
        started_ms = self._now_ms()
        scrapes = self._start_scrapes()
        failures: dict[int | None, str] = {}
        cluster = quorum = None
        try:
            cluster = self.probe.cluster()
            self.cluster_id = cluster.cluster_id
            self.known_brokers = tuple(sorted(cluster.brokers))
        except ProbeError as exc:
            failures[None] = exc.reason
        if cluster is not None:
            try:
                quorum = self.probe.quorum()
                self.controller = (quorum.leader_id, quorum.leader_epoch)
            except ProbeError:
                pass  # the controller's view then comes from the exporters, or the last round
        answers = {}
        for bid in self.known_brokers:
            try:
                answers[bid] = self.probe.metadata(bid)
            except ProbeError as exc:
                failures[bid] = exc.reason
        nodes, registration, heartbeats, scrapes_ok = self._scrapes_done(scrapes)
        if quorum is None:
            active = next((m for m in nodes.values() if m.is_active_controller), None)
            if active is not None and active.raft_leader is not None and active.raft_epoch is not None:
                self.controller = (active.raft_leader, active.raft_epoch)
        broker_ids = set(self.known_brokers) | set(registration) | {
            n for n, m in nodes.items() if m.broker_state is not None}
        observations = {bid: self._observe(bid, cluster, quorum, nodes.get(bid), registration, heartbeats)
                        for bid in broker_ids}
        events = []
        if self.cluster_id is not None and self.controller is not None:
            events = self.deriver.derive(Round(started_ms, self.cluster_id, *self.controller, observations,
                                               answers, failures))
            if self.publisher is not None:
                self.publisher.publish(events)
        states = [o.controller_state for o in observations.values()]
        report = RoundReport(cluster is not None, self.cluster_id, *(self.controller or (None, None)), len(observations),
                             states.count("INACTIVE"), states.count("STOPPING"), len(answers),
                             len(self.known_brokers), scrapes_ok, len(self.settings.collect.urls()), len(events))
        return events, report

    @staticmethod
    def _observe(bid, cluster, quorum, own, registration, heartbeats) -> BrokerObservation:
        fetch = quorum.observers.get(bid) if quorum is not None else None
        reg = cluster.brokers.get(bid) if cluster is not None else None
        return BrokerObservation(
            broker_id=bid, fenced=reg.fenced if reg is not None else None, registration=registration.get(bid),
            last_heartbeat_ms=heartbeats.get(bid), last_fetch_ms=fetch[1] if fetch else None,
            fetched_offset=fetch[0] if fetch else None,
            start_time_ms=own.start_time_ms if own else None, broker_state=own.broker_state if own else None,
            applied_offset=own.applied_offset if own else None,
            applied_timestamp_ms=own.applied_timestamp_ms if own else None)

    def run(self, stop: Callable[[], bool] = lambda: False, status: IO[str] | None = sys.stderr,
            rounds: int | None = None) -> int:
        """Rounds every interval until ``stop()`` (or ``rounds`` rounds); returns rounds run."""
        interval_s = self.settings.collect.interval_ms / 1000
        done, next_at = 0, time.monotonic()
        while not stop() and (rounds is None or done < rounds):
            events, report = self.run_round()
            done += 1
            if self.metrics is not None:
                self.metrics.round_done(report, events, self.publisher, self.clock())
            if status is not None:
                print(report.line(self.publisher), file=status, flush=True)
            if rounds is not None and done >= rounds:
                break
            next_at += interval_s
            wait = next_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the loop's pace, not a test's wait
            else:
                next_at = time.monotonic()  # a slow round (a node timing out): start the next now
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.probe.close()
