"""Detection latency of the live job: produce at a fixed rate (default 10,000 events/s: a
1,000-broker / 100,000-client fleet's steady state, timestamped as produced), inject one zombie
heartbeat (an old incarnation, STALE_BROKER_EPOCH) per second for a different broker each time,
and measure wall-clock time from producing it to the BrokerIncarnationRegression record reaching
the job's sinks. Processing-time mode, as `epochwatch run` runs.

Silence, which only the job's timers can see: in the steady period a broker of the fleet stops
heartbeating every 15 s (its other events go on), and four small clusters of three brokers beside
it go quiet altogether, one after the other (at 1/5, 2/5, 3/5 and 4/5 of the period). Reported: how
long after it was due each BrokerHeartbeatTimeout (last heartbeat + controller.heartbeat.timeout.ms
+ heartbeat.timeout.pending.ms) and each ClusterSilent (last heartbeat +
controller.heartbeat.timeout.ms) reached the sinks.

Reported in two parts: the first ``--warmup`` seconds after the job's first batches (the JVM is
still compiling Spark's code then: JIT threads took ~40% of a core 30-50 s after the start, ~13%
at 80-100 s), and the ``--seconds`` after that, the steady state a long-running job is in. With
them, the host (bench/host.py: measured before and after, nothing else running) and the CPU of
the job's processes by role over the steady period: this shared machine's speed moves from hour
to hour, and a figure is read beside them.

    .venv/bin/python bench/detection_latency.py --rate 10000 --warmup 60 --seconds 60
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.host, run as a script
from bench.host import (  # noqa: E402
    RoundTrips,
    busy_share,
    cpu_seconds_by_role,
    cpu_used,
    host_line,
    host_parallelism,
    machine_times,
    nearest_rank,
    python_speed,
    round_trips_line,
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="events per second")
    ap.add_argument("--warmup", type=int, default=60, help="first period after the start, reported on its own")
    ap.add_argument("--seconds", type=int, default=60, help="steady period measured after the warm-up")
    ap.add_argument("--trigger", default="0 seconds", help="processing-time trigger interval")
    ap.add_argument("--engine-hosts", choices=("true", "false"), default="true",
                    help="spark.epochwatch.engineHosts (false: state keys stepped in Spark's Python workers)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a configuration override, as `epochwatch run --set` takes (e.g. rules.state.client.shards=8)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark conf of the job's session, as spark-submit's --conf "
                         "(e.g. spark.sql.shuffle.partitions=1)")
    args = ap.parse_args(argv)

    from streaming import config
    from streaming.commands.run import parse_overrides, stop_between_batches
    from streaming.sinks.base import Dispatcher
    from streaming.spark.job import start
    from streaming.spark.pipeline import ENGINE_HOSTS_CONF, PROCESSING_TIME
    from streaming.spark.session import build_session
    from streaming.tools.embedded import EmbeddedBroker, create_topics

    emitted: dict[str, float] = {}
    silence_seen: dict[str, float] = {}  # "broker-<id>" / a quiet cluster's id -> when its alert reached the sinks
    batches: list[float] = []

    class LatencySink:
        def write(self, batch):
            now = time.time()
            batches.append(now)
            for a in batch.alerts:
                if a["alertname"] == "BrokerIncarnationRegression" and a["status"] == "firing":
                    emitted.setdefault(a["labels"]["broker_id"], now)
                elif (a["alertname"] == "BrokerHeartbeatTimeout" and a["status"] == "firing"
                      and a["cluster_id"] == "fleet"):
                    silence_seen.setdefault(f"broker-{a['labels']['broker_id']}", now)
                elif a["alertname"] == "ClusterSilent" and a["status"] == "firing" and a["cluster_id"] in QUIET:
                    silence_seen.setdefault(a["cluster_id"], now)

        def close(self):
            pass

    with EmbeddedBroker() as broker:
        host_before = host_parallelism(), python_speed()   # the broker started, nothing else running
        trips_before = RoundTrips()
        time.sleep(3)
        idle_trips = trips_before.stop()
        settings = config.load(overrides={**parse_overrides(args.set), "kafka.bootstrap.servers": broker.bootstrap_servers,
                                          "kafka.startingOffsets": "earliest"})
        checkpoint = tempfile.mkdtemp(prefix="epochwatch-latency-")  # ~200 MB after a default run: removed below
        settings = dataclasses.replace(settings, checkpoint_location=checkpoint, trigger_interval=args.trigger)
        create_topics(broker.bootstrap_servers, {settings.kafka.events_topic: 8})
        spark = build_session("latency", conf={"spark.sql.streaming.numRecentProgressUpdates": "100000",
                                               ENGINE_HOSTS_CONF: args.engine_hosts,
                                               **parse_overrides(args.conf)})
        # The load is produced by a process of its own: in the job's process its Python (~half a
        # core at 10,000 events/s) would hold the GIL the driver's sink and progress callbacks
        # need, which a job's driver never shares with its producers.
        spawn = multiprocessing.get_context("spawn")
        stop, warm, steady = spawn.Event(), spawn.Event(), spawn.Event()
        results = spawn.Queue()
        rules = settings.rules
        broker_due_s = (rules.controller_heartbeat_timeout_ms + rules.heartbeat_timeout_pending_ms) / 1000
        producer = spawn.Process(target=produce, daemon=True,
                                 args=(broker.bootstrap_servers, settings.kafka.events_topic, args.rate, args.seconds,
                                       broker_due_s, stop, warm, steady, results))
        dispatcher = Dispatcher([LatencySink()])
        query = start(spark, settings, dispatcher, time_mode=PROCESSING_TIME, query_name="latency")
        producer.start()
        deadline = time.time() + 180
        while len(batches) < 3 and time.time() < deadline:  # past Spark's first (slow) batches
            time.sleep(0.5)
        warm.set()
        steady_from = time.time() + args.warmup
        time.sleep(args.warmup)
        steady.set()
        cpu_before, machine_before, trips = cpu_seconds_by_role(), machine_times(), RoundTrips()
        time.sleep(args.seconds)
        cpu, busy = cpu_used(cpu_before, cpu_seconds_by_role()), busy_share(machine_before, machine_times())
        loaded_trips = trips.stop()
        stop.set()
        injected, last_heartbeat, silenced = results.get(timeout=120)
        producer.join()
        time.sleep(15)  # let the last injections come through
        progress = query.recentProgress
        stop_between_batches(query, dispatcher)
        shutil.rmtree(checkpoint, ignore_errors=True)
        host_after = host_parallelism(), python_speed()

    print("\n" + host_line((host_before[0] + host_after[0]) / 2, (host_before[1] + host_after[1]) / 2))
    print(round_trips_line(idle_trips, loaded_trips, f"in the steady {args.seconds} s"))
    print(f"target {args.rate:,} events/s, trigger '{args.trigger}', 1,000 brokers / 100,000 clients, "
          f"engine hosts {args.engine_hosts}, client shards {settings.rules.client_shards}"
          + "".join(f", {s}" for s in [*args.set, *args.conf]))
    for phase, first, last in ((f"first {args.warmup} s after the start", 0, steady_from),
                               (f"steady, next {args.seconds} s", steady_from, float("inf"))):
        report(phase, {b: t for b, t in injected.items() if first <= t < last}, emitted,
               [p for p in progress if p["numInputRows"] and first <= _started(p) < last])
    broker_due = {k: t + broker_due_s for k, t in last_heartbeat.items()
                  if k.startswith("broker-") and int(k[7:]) in silenced}
    cluster_due = {k: last_heartbeat[k] + rules.controller_heartbeat_timeout_ms / 1000 for k in QUIET}
    report_silence("brokers silenced (BrokerHeartbeatTimeout after timeout + pending)", broker_due, silence_seen)
    report_silence("small clusters gone quiet (ClusterSilent after timeout)", cluster_due, silence_seen)
    print(f"\nCPU in the steady {args.seconds} s, % of one core: "
          + ", ".join(f"{role} {seconds / args.seconds * 100:.0f}" for role, seconds in
                      sorted(cpu.items(), key=lambda kv: -kv[1]))
          + f"; all cores {busy * 100:.0f} % busy")
    return 0


QUIET = ("quiet-1", "quiet-2", "quiet-3", "quiet-4")  # small clusters that go quiet altogether
SILENT_BROKERS_FROM = 901      # the fleet's brokers silenced one by one, from this id
SILENCE_EVERY_S = 15.0


def produce(bootstrap: str, topic: str, rate: int, seconds: int, broker_due_s: float, stop, warm, steady,
            results) -> None:
    """The fleet's events at ``rate``, its zombies once ``warm`` is set and its silences once
    ``steady`` is, until ``stop``; then (injected, last_heartbeat, silenced) onto ``results``.
    A broker is silenced only if its timeout comes due ``broker_due_s`` later within the steady
    ``seconds``: once the load stops the whole fleet is quiet, and its ClusterSilent rightly
    mutes a broker's timeout that comes due after (runs missed such a fifth broker)."""
    from streaming import config
    from streaming.tools.simulate import ClusterShape, steady_state
    from streaming.tools.simulate.writers import KafkaEventWriter

    writer = KafkaEventWriter(bootstrap, topic, progress=None)
    # metadata.max.age.ms chosen so the fleet's own event rate is close to --rate
    fleet = steady_state(shape=ClusterShape(cluster_id="fleet", brokers=1000, clients=100_000, groups=2000),
                         settings=config.RuleSettings(
                             metadata_max_age_ms=max(1000, int(100_000 / max(1, rate - 2000) * 1000))),
                         duration_ms=24 * 3600 * 1000)
    injected: dict[str, float] = {}
    # "broker-<id>" / a quiet cluster's id -> wall time of the last heartbeat sent before it went quiet
    last_heartbeat: dict[str, float] = {}
    silenced: set[int] = set()
    tick, sent, started = 0.05, 0, time.time()
    victims = itertools.count(1)
    quiet_victims = itertools.count(SILENT_BROKERS_FROM)
    next_zombie = next_silence = steady_end = None
    quiet_at: dict[str, float] = {}
    # the small clusters beat out of step, every 2 s each
    next_quiet_beat = {cluster: started + i * 2.0 / len(QUIET) for i, cluster in enumerate(QUIET)}
    while not stop.is_set():
        due = int((time.time() - started) * rate) - sent
        now_ms = int(time.time() * 1000)
        batch = [dict(ev, event_time=now_ms) for ev in itertools.islice(fleet, max(0, due))
                 if not (ev["event_type"] == "broker_heartbeat" and ev["broker_id"] in silenced)]
        for ev in batch:
            if ev["event_type"] == "broker_heartbeat" and ev["broker_id"] >= SILENT_BROKERS_FROM:
                last_heartbeat[f"broker-{ev['broker_id']}"] = time.time()
        if steady.is_set():
            next_silence = next_silence or time.time()
            steady_end = steady_end or time.time() + seconds
            quiet_at = quiet_at or {cluster: time.time() + (i + 1) * seconds / (len(QUIET) + 1)
                                    for i, cluster in enumerate(QUIET)}
            if next_silence <= time.time() and next_silence + broker_due_s < steady_end:
                silenced.add(next(quiet_victims))
                next_silence += SILENCE_EVERY_S
        for cluster in QUIET:
            if time.time() < quiet_at.get(cluster, float("inf")) and time.time() >= next_quiet_beat[cluster]:
                batch += quiet_cluster_heartbeats(cluster, now_ms)
                last_heartbeat[cluster] = time.time()
                next_quiet_beat[cluster] += 2.0
        if warm.is_set():
            next_zombie = next_zombie or time.time()
            if time.time() >= next_zombie:
                victim = next(victims)
                batch.append({"event_type": "broker_heartbeat", "event_id": f"zombie-{victim}",
                              "cluster_id": "fleet", "event_time": now_ms, "controller_id": 3000,
                              "controller_epoch": 1, "broker_id": victim, "incarnation_id": 0,
                              "target_state": "ACTIVE", "error_code": 77})
                injected[str(victim)] = time.time()
                next_zombie += 1.0
        if batch:
            writer.write(batch)
            sent += len(batch)
        stop.wait(tick)
    writer.close()
    results.put((injected, last_heartbeat, silenced))


def quiet_cluster_heartbeats(cluster: str, now_ms: int) -> list[dict]:
    """One round of heartbeats of a small cluster's three brokers (every 2 s, as Kafka's default)."""
    return [{"event_type": "broker_heartbeat", "event_id": f"{cluster}-{b}-{now_ms}", "cluster_id": cluster,
             "event_time": now_ms, "controller_id": 3000, "controller_epoch": 1, "broker_id": b, "incarnation_id": 1,
             "target_state": "ACTIVE"} for b in (1, 2, 3)]


def report_silence(what: str, due: dict[str, float], seen: dict[str, float]) -> None:
    """How long after it was due each silence's alert reached the sinks (negative: early)."""
    late = sorted(seen[k] - t for k, t in due.items() if k in seen)
    missing = sorted(k for k in due if k not in seen)
    print(f"\n{what}: {len(due)} silence(s), detected {len(late)}"
          + (f", missing {', '.join(missing)}" if missing else ""))
    if late:
        print(f"  detected after due: min {late[0]:.2f} s, median {late[len(late) // 2]:.2f} s, max {late[-1]:.2f} s"
              f" ({', '.join(f'{v:.2f}' for v in late)})")


def report(phase: str, injected: dict, emitted: dict, rows: list[dict]) -> None:
    from streaming.sinks.metrics import input_records

    lat = sorted(emitted[b] - t for b, t in injected.items() if b in emitted)
    pct = lambda q: nearest_rank(lat, q) if lat else float("nan")
    print(f"\n{phase}: injected {len(injected)} zombie heartbeats, detected {len(lat)}, "
          f"missing {len(injected) - len(lat)}")
    print(f"  produce -> alert record latency: p50 {pct(.5):.2f} s, p99 {pct(.99):.2f} s, "
          f"max {lat[-1] if lat else float('nan'):.2f} s; five slowest {', '.join(f'{v:.2f}' for v in lat[-5:])} s")
    if not rows:
        return
    rate = sum(input_records(p)[0] for p in rows) / max(1e-9, sum(p["durationMs"]["triggerExecution"] for p in rows) / 1000)
    durations = sorted(p["durationMs"]["triggerExecution"] / 1000 for p in rows)
    print(f"  {len(rows)} batches at {rate:,.0f} events/s while running: median {durations[len(durations) // 2]:.2f} s, "
          f"p90 {durations[int(.9 * len(durations))]:.2f} s, max {durations[-1]:.2f} s")
    median = lambda values: sorted(values)[len(values) // 2]
    parts = {k: median([p["durationMs"].get(k, 0) for p in rows]) for k in rows[0]["durationMs"]}
    ops = [p["stateOperators"][0] for p in rows if p.get("stateOperators")]
    parts["state: allUpdatesTimeMs (all tasks)"] = median([o.get("allUpdatesTimeMs", 0) for o in ops])
    parts["state: commitTimeMs (all tasks)"] = median([o.get("commitTimeMs", 0) for o in ops])
    print("  median ms per batch: " + ", ".join(f"{k} {v}" for k, v in parts.items()))
    # what the tail is made of: a p99 over 60 zombies is about the slowest batch they waited for
    for p in sorted(rows, key=lambda p: -p["durationMs"]["triggerExecution"])[:3]:
        op = (p.get("stateOperators") or [{}])[0]
        slow_parts = {k: v for k, v in p["durationMs"].items() if v >= 20}
        print(f"  slow batch {p['batchId']}: " + ", ".join(f"{k} {v}" for k, v in slow_parts.items())
              + f"; state updates {op.get('allUpdatesTimeMs', 0)}, commit {op.get('commitTimeMs', 0)}, "
              f"rows updated {op.get('numRowsUpdated', 0)}, input {input_records(p)[0]:,}")


def _started(progress: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    sys.exit(main())
