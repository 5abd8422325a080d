"""Faults that run longer than a test may, against a live `epochwatch run` (processing time,
Alertmanager attached, real Apache Kafka 4.1.2 for every topic), one phase after another:

- outage ladder: the Kafka broker paused (SIGSTOP) for each of --pauses seconds while a broker of
  the watched cluster is silent (an incident opens during the pause, resolves after it), then
  Alertmanager down for --am-down seconds while that incident fires;
- kill -9 matrix, --kills times each: the job's whole process group (then restarted on its
  checkpoint), one Python worker, one engine host; each during an incident;
- hostile flood: --flood random-byte records, some of ~900 KB, and events with 300 KB ids.

It prints per phase: unexpected exits, recovery time, incidents whole / lost / forked; then the
events lost or read twice (a side consumer compares the topic's end offsets with the offsets the
job committed) and the job's peak memory (driver, JVM, Python workers, engine hosts).

    .venv/bin/python bench/faults.py --quick          # ~10 minutes: short pauses, 2 kills each
    .venv/bin/python bench/faults.py                  # 10 s / 60 s / 10 min pauses, 90 s, 10 kills
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streaming.config import RuleSettings  # noqa: E402
from streaming.tools.embedded import create_topics, free_port  # noqa: E402
from streaming.tools.kafka_cluster import KafkaCluster  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402
from tests.integration.faults.processes import descendants, engine_hosts, python_workers, resident_kib  # noqa: E402
from tests.integration.faults.support import JobProcess, LiveTelemetry, TopicTail, write_job_config  # noqa: E402
from tests.integration.observability.services import WebhookReceiver, alertmanager_process, render_alertmanager_config  # noqa: E402

CLUSTER = "faults"
BROKERS = [1, 2, 3]
RULES = {"controller.heartbeat.timeout.ms": 3000, "broker.heartbeat.interval.ms": 250,
         "heartbeat.timeout.pending.ms": 600}
ALERT = "BrokerHeartbeatTimeout"
START_DEADLINE_S = 240   # JVM + SparkSession + first batch on two busy cores
STEP_DEADLINE_S = 120


@dataclass
class Phase:
    name: str
    exits: int = 0
    recovery_s: list[float] = field(default_factory=list)
    episodes: list[tuple[int, int, int]] = field(default_factory=list)   # (broker, silenced ms, resumed ms)


# --- judging (pure) -----------------------------------------------------------------------------

def judge(episodes, records) -> tuple[int, int, int]:
    """(whole, lost, forked) incidents: an episode (a broker silenced from t0 to t1) is whole when
    exactly one fingerprint of its heartbeat timeout both fired and resolved; lost when none did;
    forked when more than one incident opened for it."""
    whole = lost = forked = 0
    for broker, t0, t1 in episodes:
        mine = [r for r in records if r["alertname"] == ALERT and r["labels"].get("broker_id") == str(broker)
                and t0 - 1000 <= r["starts_at"] <= t1]
        fingerprints = {r["fingerprint"] for r in mine}
        statuses = {(r["fingerprint"], r["status"]) for r in mine}
        if len(fingerprints) > 1:
            forked += 1
        elif len(fingerprints) == 1 and {s for _, s in statuses} == {"firing", "resolved"}:
            whole += 1
        else:
            lost += 1
    return whole, lost, forked


def unexplained(episodes, records, rules: RuleSettings = RuleSettings()) -> list[str]:
    """Alert records that no episode explains (another broker, another alert): what the faults
    themselves raised. A broker silenced and healed again and again is flapping: BrokerFlapping
    is explained by the episodes (two transitions each) that fall in its window."""
    def flapped(b: str, starts_at: int) -> bool:
        window = [t0 for broker, t0, _ in episodes
                  if str(broker) == b and starts_at - rules.flapping_window_ms <= t0 <= starts_at]
        return 2 * len(window) >= rules.flapping_transitions

    def explained(r):
        b = r["labels"].get("broker_id")
        if r["alertname"] == "BrokerFlapping":
            return flapped(b, r["starts_at"])
        return any(r["alertname"] == ALERT and b == str(broker) and t0 - 1000 <= r["starts_at"] <= t1
                   for broker, t0, t1 in episodes)
    return sorted({f"{r['alertname']}{{{r['labels'].get('broker_id', '')}}}" for r in records if not explained(r)})


def identities_forked(records) -> int:
    """Incidents (alertname, labels, start) written under more than one fingerprint."""
    seen: dict[tuple, set] = {}
    for r in records:
        seen.setdefault((r["alertname"], tuple(sorted(r["labels"].items())), r["starts_at"]), set()).add(r["fingerprint"])
    return sum(1 for fps in seen.values() if len(fps) > 1)


# --- the rig --------------------------------------------------------------------------------------

class Rig:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.kafka = KafkaCluster(workdir / "kafka", controllers=1, brokers=1).start()
        self.bootstrap = self.kafka.bootstrap_servers
        self.topics = {"events": "faults.events", "alerts": "faults.alerts", "dlq": "faults.dlq"}
        create_topics(self.bootstrap, {"faults.events": 2, "faults.alerts": 2, "faults.dlq": 1})
        self.webhook = WebhookReceiver()
        self.am_config = render_alertmanager_config(workdir / "alertmanager.yml", self.webhook)
        self.am_port = free_port()
        self.am = alertmanager_process(workdir, self.am_config, self.am_port).start()
        self.metrics_port = free_port()
        config = write_job_config(workdir / "epochwatch.yaml", bootstrap=self.bootstrap, checkpoint=workdir / "ckpt",
                                  rules=RULES, **self.topics,
                                  sinks={"alertmanager.url": self.am.url, "metrics.port": self.metrics_port,
                                         "alertmanager.resend.interval.s": 5})
        self.job = JobProcess(config, workdir / "job.log", ("--set", "sinks.console=off"))   # processing time
        # queued for as long as the broker is away, as the collector's producer does
        self.telemetry = LiveTelemetry(self.bootstrap, self.topics["events"], CLUSTER, BROKERS,
                                       message_timeout_ms=0).start()
        self.tail = TopicTail(self.bootstrap, self.topics["alerts"])
        self.peak_kib, self.memory = 0, []   # KiB at each phase's start
        self.replayed = 0   # records in batches that a kill -9 left uncommitted (read again)
        self._sampling = threading.Event()
        threading.Thread(target=self._sample_memory, daemon=True).start()

    # memory of the job's processes: its process tree and its engine hosts (their own sessions)
    def job_kib(self) -> int:
        if not self.job.alive():
            return 0
        root = self.job._proc.pid   # JobProcess has no public pid (tests/integration/faults/support.py)
        return resident_kib({root, *descendants(root), *engine_hosts(root)})

    def _sample_memory(self) -> None:
        while not self._sampling.wait(1.0):
            self.peak_kib = max(self.peak_kib, self.job_kib())

    def batches(self) -> int:
        return len(self.job.batches(current_start_only=False))

    def wait_batches(self, after: int, count: int = 1, deadline_s: float = STEP_DEADLINE_S) -> float:
        """Seconds until ``count`` more batches completed after ``after`` (restarting the job when it
        exited: counted by the caller through ensure_running)."""
        started = time.monotonic()
        wait_until(lambda: self.batches() >= after + count, timeout_s=deadline_s, interval_s=0.1,
                   what=f"{count} batch(es) after batch {after} (log {self.job.log_path})")
        return time.monotonic() - started

    def ensure_running(self, phase: Phase) -> None:
        if not self.job.alive():
            if self.job.starts:
                phase.exits += 1
                print(f"  ! the job exited ({self.job.returncode()}): restarting", flush=True)
                self.job.stop()
            self.job.start()
            self.job.wait_for_batch(START_DEADLINE_S, "the first batch")

    # incidents
    def fired(self, broker: int, since_ms: int, status: str = "firing") -> bool:
        return any(r["alertname"] == ALERT and r["status"] == status and r["labels"].get("broker_id") == str(broker)
                   and r["starts_at"] >= since_ms - 1000 for _, r in self.tail.poll(0.2))

    def silence(self, broker: int, deadline_s: float = STEP_DEADLINE_S) -> int:
        """Silence a broker's heartbeats; returns when its timeout fired."""
        t0 = self.telemetry.silence(broker)
        wait_until(lambda: self.fired(broker, t0), timeout_s=deadline_s, what=f"{ALERT} of broker {broker} firing")
        return t0

    def heal(self, phase: Phase, broker: int, t0: int, deadline_s: float = STEP_DEADLINE_S) -> None:
        self.telemetry.resume(broker)
        t1 = int(time.time() * 1000)
        try:
            wait_until(lambda: self.fired(broker, t0, "resolved"), timeout_s=deadline_s,
                       what=f"{ALERT} of broker {broker} resolved")
        except AssertionError as exc:
            print(f"  ! {exc}", flush=True)
        phase.episodes.append((broker, t0, t1))

    def am_active(self) -> set[str]:
        try:
            alerts = requests.get(f"{self.am.url}/api/v2/alerts", params={"active": "true"}, timeout=2).json()
        except requests.RequestException:
            return set()
        return {a["labels"].get("broker_id", "") for a in alerts if a["labels"].get("alertname") == ALERT}

    def close(self) -> None:
        self._sampling.set()
        for step in (self.job.stop, self.telemetry.stop, self.tail.close, self.am.stop, self.webhook.close,
                     self.kafka.stop):
            try:
                step()
            except Exception as exc:   # noqa: BLE001 (tear everything down whatever failed)
                print(f"  (teardown: {type(exc).__name__}: {exc})")


# --- phases -----------------------------------------------------------------------------------

def outage(rig: Rig, pause_s: float) -> Phase:
    """The Kafka broker paused while broker 2 of the watched cluster is silent."""
    phase = Phase(f"Kafka paused {pause_s:g} s")
    rig.ensure_running(phase)
    t0 = rig.telemetry.silence(2)
    node = rig.kafka.broker_ids[0]
    rig.kafka.pause(node)
    try:
        time.sleep(pause_s)   # the fault itself lasts this long (a bench, not a test)
    finally:
        rig.kafka.resume(node)
    resumed, before = time.monotonic(), rig.batches()
    wait_until(lambda: rig.fired(2, t0), timeout_s=STEP_DEADLINE_S + pause_s, what="the timeout after the pause")
    rig.wait_batches(before)
    phase.recovery_s.append(time.monotonic() - resumed)
    rig.ensure_running(phase)
    rig.heal(phase, 2, t0)
    return phase


def alertmanager_down(rig: Rig, down_s: float) -> Phase:
    """Alertmanager stopped while broker 3's timeout fires; recovery: until it shows the alert again."""
    phase = Phase(f"Alertmanager down {down_s:g} s")
    rig.ensure_running(phase)
    t0 = rig.silence(3)
    wait_until(lambda: "3" in rig.am_active(), timeout_s=60, what="the alert in Alertmanager")
    rig.am.stop()
    time.sleep(down_s)   # the outage itself
    rig.am = alertmanager_process(rig.workdir, rig.am_config, rig.am_port).start()
    back = time.monotonic()
    wait_until(lambda: "3" in rig.am_active(), timeout_s=STEP_DEADLINE_S, what="the alert re-sent to Alertmanager")
    phase.recovery_s.append(time.monotonic() - back)
    rig.heal(phase, 3, t0)
    wait_until(lambda: "3" not in rig.am_active(), timeout_s=STEP_DEADLINE_S, what="the resolution in Alertmanager")
    rig.ensure_running(phase)
    return phase


def kill_matrix(rig: Rig, target: str, kills: int) -> Phase:
    """kill -9 of ``target`` (group | worker | host) during an incident, ``kills`` times."""
    phase = Phase(f"kill -9 {target} x{kills}")
    for i in range(kills):
        rig.ensure_running(phase)
        broker = BROKERS[i % len(BROKERS)]
        t0 = rig.silence(broker)
        before, root = rig.batches(), rig.job._proc.pid
        if target == "group":
            rig.job.kill9()
            rig.replayed += replayed_records(rig.workdir / "ckpt", rig.topics["events"])
            started = time.monotonic()
            rig.job.start()
            rig.job.wait_for_batch(START_DEADLINE_S, "the first batch after kill -9")
            phase.recovery_s.append(time.monotonic() - started)
        else:
            pids = wait_until(lambda: python_workers(root) if target == "worker" else engine_hosts(root),
                              timeout_s=60, what=f"a {target} to kill")
            os.kill(random.choice(pids), signal.SIGKILL)
            killed = time.monotonic()
            rig.wait_batches(before + 1)   # the batch in flight may have met the dead process
            phase.recovery_s.append(time.monotonic() - killed)
            rig.ensure_running(phase)
        rig.heal(phase, broker, t0)
    return phase


def flood(rig: Rig, records: int) -> Phase:
    """Hostile records on the events topic while the cluster's telemetry goes on."""
    from confluent_kafka import Producer

    from tests.support.builders import hb
    from udfs import avro_codec

    phase = Phase(f"hostile flood {records:,} records")
    rig.ensure_running(phase)
    rng = random.Random(22)
    producer = Producer({"bootstrap.servers": rig.bootstrap, "linger.ms": 20, "message.max.bytes": 2_000_000})
    for i in range(records):
        size = 900_000 if i % 500 == 0 else rng.randint(1, 2000)
        producer.produce(rig.topics["events"], rng.randbytes(size))
        if i % 1000 == 0:
            event = {**hb(int(time.time() * 1000), 1), "cluster_id": "x" * 300_000}
            producer.produce(rig.topics["events"], avro_codec.encode(event))
        producer.poll(0)
    producer.flush(60)
    flooded, before = time.monotonic(), rig.batches()
    rig.wait_batches(before, count=2)
    # read through: a batch's lag is what arrived while it ran, a few hundred records of telemetry
    wait_until(lambda: rig.job.batches()[-1].lag < 500, timeout_s=STEP_DEADLINE_S, interval_s=0.2,
               what="the flood read")
    phase.recovery_s.append(time.monotonic() - flooded)
    rig.ensure_running(phase)
    t0 = rig.silence(1)   # the job still decides
    rig.heal(phase, 1, t0)
    return phase


# --- the side consumer: events lost or read twice -------------------------------------------------

def topic_end(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-side"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        consumer.close()


def committed_offsets(checkpoint: Path, topic: str) -> dict[int, int]:
    """The end offsets of the last micro-batch the job committed (Spark's offsets/ + commits/)."""
    done = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    return batch_offsets(checkpoint, topic, done)


def batch_offsets(checkpoint: Path, topic: str, batch_id: int) -> dict[int, int]:
    if batch_id < 0:
        return {}
    last_line = (checkpoint / "offsets" / str(batch_id)).read_text().strip().splitlines()[-1]
    return {int(p): o for p, o in json.loads(last_line)[topic].items() if p.isdigit()}


def replayed_records(checkpoint: Path, topic: str) -> int:
    """Records of the batch planned but not committed when the job died: the next start reads
    them again (Spark runs that batch again from its recorded offsets)."""
    ids = lambda folder: [int(p.name) for p in (checkpoint / folder).iterdir() if p.name.isdigit()]  # noqa: E731
    planned, done = max(ids("offsets"), default=-1), max(ids("commits"), default=-1)
    if planned <= done:
        return 0
    start, end = batch_offsets(checkpoint, topic, planned - 1), batch_offsets(checkpoint, topic, planned)
    return sum(o - start.get(p, 0) for p, o in end.items())


# --- main -----------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pauses 5/10/20 s, Alertmanager down 20 s, 2 kills each, "
                                                          "2,000 flood records")
    ap.add_argument("--pauses", help="broker pause lengths in seconds, comma-separated (default 10,60,600)")
    ap.add_argument("--am-down", type=float, help="Alertmanager down for this long (default 90 s)")
    ap.add_argument("--kills", type=int, help="kills per target (default 10)")
    ap.add_argument("--flood", type=int, help="hostile records (default 20000)")
    ap.add_argument("--workdir", help="keep logs and checkpoint here (default: a temporary folder)")
    args = ap.parse_args(argv)
    quick = args.quick
    pauses = [float(s) for s in (args.pauses or ("5,10,20" if quick else "10,60,600")).split(",")]
    am_down = args.am_down if args.am_down is not None else (20 if quick else 90)
    kills = args.kills if args.kills is not None else (2 if quick else 10)
    flood_records = args.flood if args.flood is not None else (2000 if quick else 20_000)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="epochwatch-faults-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"faults bench: pauses {pauses} s, Alertmanager down {am_down:g} s, {kills} kill(s) per target, "
          f"flood {flood_records:,}; workdir {workdir}", flush=True)

    began = time.monotonic()
    rig = Rig(workdir)
    phases = []
    try:
        plan = ([lambda p=p: outage(rig, p) for p in pauses] + [lambda: alertmanager_down(rig, am_down)]
                + [lambda t=t: kill_matrix(rig, t, kills) for t in ("group", "worker", "host")]
                + [lambda: flood(rig, flood_records)])
        for step in plan:
            rig.memory.append(rig.job_kib())
            phase = step()
            phases.append(phase)
            whole, lost, forked = judge(phase.episodes, [r for _, r in rig.tail.poll(0.5)])
            print(f"  {phase.name}: exits {phase.exits}, recovery {_seconds(phase.recovery_s)}, "
                  f"incidents whole {whole} lost {lost} forked {forked}, job memory {rig.job_kib() / 1024:.0f} MiB",
                  flush=True)
        rig.memory.append(rig.job_kib())
        rig.telemetry.hold()
        end = topic_end(rig.bootstrap, rig.topics["events"])
        wait_until(lambda: committed_offsets(workdir / "ckpt", rig.topics["events"]) == end, timeout_s=STEP_DEADLINE_S,
                   interval_s=0.5, what="the job to commit the topic's end offsets")
        report(rig, phases, end, time.monotonic() - began)
    finally:
        rig.close()
    return 0


def report(rig: Rig, phases: list[Phase], end: dict[int, int], took_s: float) -> None:
    records = [r for _, r in rig.tail.poll(1.0)]
    committed = committed_offsets(rig.workdir / "ckpt", rig.topics["events"])
    in_topic = sum(end.values())
    event_ids = [r["event_id"] for r in records]
    print("\nphase | exits | recovery s | incidents whole / lost / forked")
    for phase in phases:
        whole, lost, forked = judge(phase.episodes, records)
        print(f"{phase.name} | {phase.exits} | {_seconds(phase.recovery_s)} | {whole} / {lost} / {forked}")
    print(f"\nevents: {in_topic:,} records in the topic, the job committed {sum(committed.values()):,}: lost "
          f"{in_topic - sum(committed.values())}; read twice {rig.replayed:,} (batches a kill -9 left uncommitted, "
          f"run again over {rig.job.starts} starts)")
    print(f"telemetry the producer gave up on: {len(rig.telemetry.errors)} records")
    print(f"alert records {len(records)} ({len(event_ids) - len(set(event_ids))} written twice, same key and "
          f"event_id), incidents under two fingerprints {identities_forked(records)}")
    others = unexplained([e for phase in phases for e in phase.episodes], records)
    print(f"alerts no episode explains: {', '.join(others) or 'none'}")
    print(f"Alertmanager: {len(rig.am_active())} {ALERT} still active at the end (every episode healed)")
    mib = [m / 1024 for m in rig.memory]
    print(f"job memory (driver, JVM, Python workers, engine hosts): peak {rig.peak_kib / 1024:.0f} MiB; at each "
          f"phase start {', '.join(f'{m:.0f}' for m in mib)} MiB")
    print(f"took {took_s / 60:.1f} min")


def _seconds(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.1f}-{max(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


if __name__ == "__main__":
    sys.exit(main())
