"""kill -9 of `epochwatch run --event-time` in the middle of incidents, several times, each time
restarted on the same checkpoint: no alert transition is lost, none appears under a second
identity, the state carries over (the result equals one clean pass over the same events), and
the at-least-once duplicates (same event_id rewritten by a replayed batch) are counted."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, defaultdict

import pytest

from streaming.engine.local import detect_all
from streaming.rules.catalog import RULES
from streaming.rules.rollup import is_rollup
from streaming.sinks.labels import presented
from streaming.tools.demo import load_events, play_scenarios
from streaming.tools.embedded import create_topics
from streaming.tools.simulate.truth import settings_dict
from streaming.tools.simulate.writers import KafkaEventWriter
from tests.integration.faults.support import write_job_config
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCENARIOS = ["partitioned_broker", "zombie_incarnation"]
MAX_OFFSETS_PER_TRIGGER = 300   # ~10 micro-batches for the ~2,700 events: kills land mid-stream
KILLS = 2
EVENT_PARTITIONS = 2            # few read tasks per batch: the restarts dominate the test's time
# Partitions are admitted in proportion to their backlog, so their event times drift apart (by up
# to ~20 s with 8 partitions at 200 per trigger, where Kafka's 2 s lateness dropped 172 of the
# 2,710 rows as late): a property of the stream, not of the restarts. 30 s keeps every row, so one
# clean pass is the exact reference (checked below: no row may be late).
LATENESS_MS = 30_000
START_DEADLINE_S = 180          # JVM + SparkSession + first batch on two busy cores
IDENTITY_FIELDS = ("alertname", "severity", "status", "labels", "starts_at", "ends_at", "cluster_id")


def identity(record: dict) -> tuple:
    """What makes two alert records the same incident (its fingerprint must follow from it)."""
    return record["alertname"], tuple(sorted(record["labels"].items())), record["starts_at"]


def test_kill9_mid_incident_then_restart_loses_nothing_and_forks_nothing(broker, job_factory, tail_factory,
                                                                          tmp_path, fault_report):
    events, truths = play_scenarios(SCENARIOS, seed=7)
    rules = dataclasses.replace(next(iter(truths.values())).rule_settings(), allowed_lateness_ms=LATENESS_MS)
    # one clean pass, same rules, labelled as the alerts topic has them (default sinks.labels)
    reference = {a["event_id"]: presented(a) for a in detect_all(events, rules)}

    suffix = tmp_path.name[-10:]
    topics = {"events": f"k9-ev-{suffix}", "alerts": f"k9-al-{suffix}", "dlq": f"k9-dlq-{suffix}"}
    create_topics(broker.bootstrap_servers, {topics["events"]: EVENT_PARTITIONS, topics["alerts"]: 4,
                                             topics["dlq"]: 1})
    with KafkaEventWriter(broker.bootstrap_servers, topics["events"], progress=None) as writer:
        load_events(writer, events, EVENT_PARTITIONS)

    config = write_job_config(tmp_path / "epochwatch.yaml", bootstrap=broker.bootstrap_servers,
                              checkpoint=tmp_path / "checkpoint", rules=settings_dict(rules),
                              kafka={"maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER}, **topics)
    tail = tail_factory(broker.bootstrap_servers, topics["alerts"])
    job = job_factory(config)

    kills = []   # (distinct alert ids seen at the kill, batches completed by that run)
    restart_s = []
    for _ in range(KILLS):
        seen_before = len(tail.event_ids())
        if seen_before >= len(reference):
            break
        started = time.monotonic()
        job.start()
        if kills:
            job.wait_for_batch(START_DEADLINE_S, "the first batch after the restart")
            restart_s.append(time.monotonic() - started)
        # kill as soon as new records show: the batch that wrote them may not have committed yet
        wait_until(lambda: job.alive() and len(tail.event_ids(wait_s=0.02)) > seen_before,
                   timeout_s=START_DEADLINE_S, interval_s=0, what=f"new alert records after start {job.starts}")
        job.kill9()
        kills.append((len(tail.event_ids()), len(job.batches())))
    mid_incident = [seen for seen, _ in kills if 0 < seen < len(reference)]
    assert len(mid_incident) >= 2, f"the kills did not land mid-incident: {kills} of {len(reference)} alerts"

    started = time.monotonic()
    job.start()
    job.wait_for_batch(START_DEADLINE_S, "the first batch after the last restart")
    restart_s.append(time.monotonic() - started)

    def caught_up():
        # the source has nothing left and a no-data batch moved the watermark past the last event;
        # alert records are flushed before a batch reports progress, so the topic is complete
        batches = job.progress()
        return bool(batches) and batches[-1].events == 0 and batches[-1].lag == 0
    wait_until(caught_up, timeout_s=240, interval_s=0.2, what=f"the job to catch up (log {job.log_path})")
    last_run = job.batches()
    stop_code = job.stop()
    records = _drain(tail)
    late = sum(b.late for b in job.batches(current_start_only=False))
    assert late == 0, f"{late} rows dropped as late: the clean pass is no longer the reference"
    # the roll-ups the job writes beside the per-client records they count (docs/alerts.md): one
    # alert per scope across every kill, resolved by the end exactly when the clean pass leaves no
    # per-client incident open
    rollups = [r for _, r in records if is_rollup(r)]
    records = [(key, r) for key, r in records if not is_rollup(r)]
    last_of_rollup = {r["fingerprint"]: r for r in rollups}   # keyed by fingerprint: in order per partition
    clients_open = {r["fingerprint"] for r in reference.values() if RULES[r["alertname"]].per_client} - {
        r["fingerprint"] for r in reference.values() if r["status"] == "resolved"}
    assert bool(rollups) == any(RULES[r["alertname"]].per_client for r in reference.values())
    assert all(r["status"] == "resolved" for r in last_of_rollup.values()) == (not clients_open), last_of_rollup

    by_id = defaultdict(list)
    for key, record in records:
        assert key == record["fingerprint"], f"record keyed {key} but fingerprint {record['fingerprint']}"
        assert record["event_id"] == f"{record['fingerprint']}:{record['status']}"
        by_id[record["event_id"]].append(record)

    lost = sorted(set(reference) - set(by_id))
    extra = sorted(set(by_id) - set(reference))
    assert not lost, f"alert transitions lost across kill -9: {[reference[i]['alertname'] for i in lost]}"
    assert not extra, f"alerts a clean pass does not raise (state lost?): {[by_id[i][0] for i in extra]}"

    for event_id, copies in by_id.items():
        want = {f: reference[event_id][f] for f in IDENTITY_FIELDS}
        for copy in copies:
            assert {f: copy[f] for f in IDENTITY_FIELDS} == want, f"{event_id}: a copy differs from the clean pass"

    fingerprints = defaultdict(set)
    for record in [r for _, r in records] + rollups:
        fingerprints[identity(record)].add(record["fingerprint"])
    forked = {k: fps for k, fps in fingerprints.items() if len(fps) > 1}
    assert not forked, f"incidents under more than one fingerprint: {forked}"

    restarted = Counter(r["labels"]["broker_id"] for _, r in records if r["alertname"] == "BrokerRestarted")
    expected_restarts = Counter(r["labels"]["broker_id"] for r in reference.values()
                                if r["alertname"] == "BrokerRestarted")
    assert set(restarted) == set(expected_restarts), "BrokerRestarted for a broker that did not restart"

    duplicates = {i: len(c) - 1 for i, c in by_id.items() if len(c) > 1}
    fault_report(f"kill -9: {len(events):,} events, {len(reference)} alert transitions, {len(kills)} kills at "
                 f"{[seen for seen, _ in kills]} distinct alerts ({[b for _, b in kills]} batches per run), "
                 f"{len(last_run)} batches in the last run; {len(records)} records, "
                 f"{sum(duplicates.values())} duplicate(s) of {len(duplicates)} event_id(s) "
                 f"(at-least-once); restart to first batch {', '.join(f'{s:.1f}' for s in restart_s)} s; "
                 f"exit code after SIGTERM {stop_code}")
    assert stop_code == 0, "SIGTERM must stop `epochwatch run` cleanly (the query stops, sinks flush)"


def _drain(tail) -> list[tuple[str, dict]]:
    """Read the tail until a poll brings nothing new (the job is stopped: nothing more comes)."""
    def quiet():
        before = len(tail.records)
        tail.poll(wait_s=1.0)
        return len(tail.records) == before
    wait_until(quiet, timeout_s=30, interval_s=0, what="the alerts topic read to its end")
    return list(tail.records)
