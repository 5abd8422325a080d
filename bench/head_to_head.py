"""Head to head on the same pre-loaded topic: the simulated 1,000-broker / 100,000-client fleet's
steady state with every scripted incident mixed in (each incident its own cluster).

1. epochwatch on Spark (Kafka source -> transformWithState -> alert sink), local[2] and local[1]
2. a hand-written single-process confluent-kafka + fastavro consumer running the same pure rules
   (streaming.engine.local.LocalDetector: what a team would write instead)
3. the raw consume + decode floor

Each engine runs in its own process (peak memory = max RSS of its process tree, sampled).
Detection latency = wall time an alert record is emitted minus wall time the batch holding its
triggering events started being read (catch-up latency on a backlog; for live latency at a fixed
rate see bench/detection_latency.py).

    .venv/bin/python bench/head_to_head.py --events 5000000

Spark reads the backlog in micro-batches of --batch-events records (kafka.maxOffsetsPerTrigger,
as a catch-up after an outage would: docs/operations.md, Sizing), its first --ramp-up-batches batches
from 1/2^N of that up (kafka.rampUpBatches, the job's default: 3).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.host, run as a script
from bench.host import host_line, host_parallelism, python_speed  # noqa: E402

TOPIC = "h2h.events"
PARTITIONS = 8


def fleet_events(n: int):
    from streaming.tools.demo import play_scenarios
    from streaming.tools.simulate import SCENARIOS, ClusterShape, steady_state

    incidents, _ = play_scenarios(sorted(SCENARIOS), seed=3)
    fleet = steady_state(shape=ClusterShape(cluster_id="fleet", brokers=1000, clients=100_000, groups=2000),
                         duration_ms=24 * 3600 * 1000, seed=3)
    merged = heapq.merge(fleet, incidents, key=lambda e: e["event_time"])
    return itertools.islice(merged, n)


def load(bootstrap: str, n: int) -> int:
    from streaming.tools.demo import load_events
    from streaming.tools.embedded import create_topics
    from streaming.tools.simulate.writers import KafkaEventWriter

    create_topics(bootstrap, {TOPIC: PARTITIONS})
    events = list(fleet_events(n))
    with KafkaEventWriter(bootstrap, TOPIC) as writer:
        load_events(writer, events, PARTITIONS)
    return len(events)


def _tree_rss_mb(pid: int) -> float:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (OSError, StopIteration):
            continue
    return total / 1024


def run_engine(engine: str, bootstrap: str, n: int, extra: list[str]) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--engine", engine, "--bootstrap", bootstrap,
                             "--events", str(n), *extra], stdout=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_mb(proc.pid))
        time.sleep(0.5)
    out = proc.stdout.read().strip().splitlines()
    if proc.returncode != 0 or not out:
        raise RuntimeError(f"engine {engine} failed with {proc.returncode}")
    result = json.loads(out[-1])
    result["peak_mb"] = peak
    return result


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- engines (run in a child process) ----------------------------------------------------------

def engine_floor(bootstrap: str, n: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    from udfs import avro_codec

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "h2h-floor", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    started, seen = time.perf_counter(), 0
    while seen < n:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                avro_codec.decode(msg.value())
                seen += 1
    return {"events": seen, "seconds": time.perf_counter() - started, "alerts": 0, "latencies": []}


def engine_single(bootstrap: str, n: int, chunk: int = 50_000) -> dict:
    """One consumer per partition, read in rounds of chunk / partitions records each, so that a
    chunk covers the same stretch of event time in every partition (Spark's source does the same
    with its offset ranges). One consumer over all partitions gets a partition at a time from
    tansu (tens of seconds of event time apart): most events then arrive behind the horizon and
    every late heartbeat re-evaluates a 1,000-broker cluster (measured: ~10x slower)."""
    from confluent_kafka import Consumer, TopicPartition

    from streaming.engine.local import LocalDetector
    from streaming.tools.simulate import scenario_settings
    from udfs import avro_codec

    detector = LocalDetector(scenario_settings())
    consumers = []
    for p in range(PARTITIONS):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"h2h-single-{p}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, 0)])
        consumers.append(consumer)
    share = max(1, chunk // PARTITIONS)
    started, seen, alerts, latencies, idle_rounds = time.perf_counter(), 0, 0, [], 0
    while seen < n and idle_rounds < 10:
        fetched_at, batch = time.perf_counter(), []
        for consumer in consumers:
            got = 0
            while got < share:
                messages = consumer.consume(share - got, 0.2)
                if not messages:
                    break
                got += len(messages)
                batch.extend(avro_codec.decode(m.value()) for m in messages if m.error() is None)
        idle_rounds = 0 if batch else idle_rounds + 1
        seen += len(batch)
        for result in detector.feed(batch):
            now = time.perf_counter()
            alerts += len(result.alerts)
            latencies.extend([now - fetched_at] * len(result.alerts))
    return {"events": seen, "seconds": time.perf_counter() - started, "alerts": alerts, "latencies": latencies}


def engine_spark(bootstrap: str, n: int, master: str, batch_events: int, ramp_up_batches: int) -> dict:
    import dataclasses
    import tempfile

    from streaming import config
    from streaming.sinks.metrics import input_records
    from streaming.spark.job import start
    from streaming.spark.pipeline import EVENT_TIME
    from streaming.spark.session import build_session
    from streaming.tools.simulate import scenario_settings

    spark = build_session("h2h", master=master)  # one state partition per core
    emitted: list[tuple[int, float, int]] = []

    class Timing:
        def write(self, batch):
            emitted.append((batch.batch_id, time.time(), len(batch.alerts)))

        def close(self):
            pass

    settings = config.load(overrides={"kafka.bootstrap.servers": bootstrap, "kafka.topics.events": TOPIC,
                                      "kafka.startingOffsets": "earliest",
                                      "kafka.maxOffsetsPerTrigger": batch_events or None,
                                      "kafka.rampUpBatches": ramp_up_batches})
    settings = dataclasses.replace(settings, rules=scenario_settings(), checkpoint_location=tempfile.mkdtemp())
    started = time.perf_counter()
    query = start(spark, settings, [Timing()], time_mode=EVENT_TIME, available_now=True, query_name="h2h")
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception():
        raise RuntimeError(str(query.exception()))
    batch_start = {p["batchId"]: _epoch(p["timestamp"]) for p in query.recentProgress}
    latencies = [t - batch_start[b] for b, t, k in emitted for _ in range(k) if b in batch_start]
    data = [p for p in query.recentProgress if p["numInputRows"]]
    return {"events": sum(input_records(p)[0] for p in data), "seconds": seconds,
            "alerts": sum(k for _, _, k in emitted), "latencies": latencies,
            # (seconds, alerts) of each batch that read records: where the catch-up latency comes from
            "batches": [(p["durationMs"]["triggerExecution"] / 1000,
                         sum(k for b, _, k in emitted if b == p["batchId"])) for p in data]}


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--engine", choices=["floor", "single", "spark"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--master", default="local[2]", help=argparse.SUPPRESS)
    # A backlog's catch-up batch: each micro-batch has ~1.5 s of fixed cost on 2 cores, and the
    # sizes measured side by side are in bench/RESULTS.md (head to head, session 8)
    ap.add_argument("--batch-events", type=int, default=1_000_000,
                    help="Spark's kafka.maxOffsetsPerTrigger: records per micro-batch (0: no cap)")
    ap.add_argument("--ramp-up-batches", type=int, default=3,
                    help="kafka.rampUpBatches: the first batches take 1/2^N ... 1/2 of the cap (0: the cap at once)")
    ap.add_argument("--skip-local1", action="store_true", help="do not run Spark on local[1]")
    args = ap.parse_args(argv)
    if args.engine:
        result = {"floor": lambda: engine_floor(args.bootstrap, args.events),
                  "single": lambda: engine_single(args.bootstrap, args.events),
                  "spark": lambda: engine_spark(args.bootstrap, args.events, args.master,
                                                args.batch_events, args.ramp_up_batches)}[args.engine]()
        print(json.dumps(result))
        return 0

    from streaming.tools.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        t = time.perf_counter()
        n = load(broker.bootstrap_servers, args.events)
        print(f"loaded {n:,} events in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        parallel_before, speed_before = host_parallelism(), python_speed()  # with the broker loaded and idle
        batch = ["--batch-events", str(args.batch_events), "--ramp-up-batches", str(args.ramp_up_batches)]
        runs = {"3. raw consume + decode floor": run_engine("floor", broker.bootstrap_servers, n, []),
                "2. hand-written single process, same rules": run_engine("single", broker.bootstrap_servers, n, []),
                "1. epochwatch on Spark, local[2]": run_engine("spark", broker.bootstrap_servers, n,
                                                              ["--master", "local[2]", *batch])}
        if not args.skip_local1:
            runs["1b. epochwatch on Spark, local[1]"] = run_engine("spark", broker.bootstrap_servers, n,
                                                                  ["--master", "local[1]", *batch])
    cap = f"{args.batch_events:,} records" if args.batch_events else "no cap"
    if args.batch_events and args.ramp_up_batches:
        cap += f", the first {args.ramp_up_batches} ramping up from 1/{2 ** args.ramp_up_batches} of it"
    print("\n" + host_line((parallel_before + host_parallelism()) / 2, (speed_before + python_speed()) / 2))
    print(f"{n:,} events (1,000-broker / 100,000-client fleet + 16 incident clusters), {PARTITIONS} partitions, "
          f"Spark micro-batches: {cap}")
    print(f"{'engine':46} {'events/s':>9} {'seconds':>8} {'alerts':>7} {'p50 s':>6} {'p99 s':>6} {'peak MB':>8}")
    for name, r in runs.items():
        rate = r["events"] / r["seconds"]
        r["rate"], r["p99"] = rate, _percentile(r["latencies"], .99)
        print(f"{name:46} {rate:>9,.0f} {r['seconds']:>8.1f} {r['alerts']:>7} "
              f"{_percentile(r['latencies'], .5):>6.2f} {r['p99']:>6.2f} {r['peak_mb']:>8.0f}")
    spark, single, floor = (runs["1. epochwatch on Spark, local[2]"]["rate"],
                            runs["2. hand-written single process, same rules"]["rate"],
                            runs["3. raw consume + decode floor"]["rate"])
    print(f"ratio 1/2 = {spark / single:.2f} (target >= 1.0); ratio 1/3 = {spark / floor:.2f} (target >= 0.6)")
    print(f"Spark local[2] catch-up p99 = {runs['1. epochwatch on Spark, local[2]']['p99']:.2f} s (target <= 10 s)")
    for name, r in runs.items():
        if r.get("batches"):
            print(f"{name}: batches (s, alerts): " + ", ".join(f"{s:.1f} ({k})" for s, k in r["batches"]))
    if "1b. epochwatch on Spark, local[1]" in runs:
        print(f"scaling local[2] / local[1] = {spark / runs['1b. epochwatch on Spark, local[1]']['rate']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
