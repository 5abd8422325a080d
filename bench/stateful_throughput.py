"""Stateful stage throughput: 1,000 brokers and 100,000 clients through transformWithState.

Side by side in one run on the same staged events (Parquet chunks, one per micro-batch, EventTime,
availableNow): the pandas API (transformWithStateInPandas) and the Row API (transformWithState),
plus the single-process detector over the same pure rules for reference. Prints events/s
(excluding the first batch, where Spark starts its Python workers), state rows and state size,
for the whole query and for its stateful stage alone (the stage that runs transformWithState,
timed from Spark's event log; the rest is reading the staged files and routing them into packs).

    .venv/bin/python bench/stateful_throughput.py --events 2000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from streaming.config import RuleSettings, Settings
from streaming.engine.local import LocalDetector
from streaming.sinks.memory import MemorySink
from streaming.spark.pipeline import ENGINE_HOSTS_CONF
from streaming.spark.replay import run_staged, stage_events
from streaming.spark.session import build_session
from streaming.tools.simulate import ClusterShape, steady_state


def generate(n: int, brokers: int, clients: int) -> list[dict]:
    shape = ClusterShape(brokers=brokers, clients=clients, groups=max(1, clients // 50))
    # long enough for n events; the stream is cut at n
    stream = steady_state(shape=shape, duration_ms=24 * 3600 * 1000)
    return list(itertools.islice(stream, n))


def progress_figures(query) -> dict:
    progress = query.recentProgress
    data = [p for p in progress if p["numInputRows"] > 0]
    later = data[1:] or data
    rows = sum(p["numInputRows"] for p in later)
    ms = sum(p["durationMs"]["triggerExecution"] for p in later)
    last_op = progress[-1]["stateOperators"][0]
    custom = last_op.get("customMetrics", {})
    return {"events_per_s": rows / (ms / 1000) if ms else 0.0, "rows": rows, "seconds": ms / 1000,
            "first_batch_s": data[0]["durationMs"]["triggerExecution"] / 1000 if data else 0,
            "state_rows": last_op["numRowsTotal"], "state_bytes": custom.get("rocksdbTotalBytes")
            or last_op.get("memoryUsedBytes", 0), "batches": len(data)}


def stage_seconds(event_log_dir: Path) -> list[tuple[bool, float]]:
    """(is the stateful stage, wall seconds) of every completed stage, in order, from Spark's
    event log: the stateful stage is the one that reads the state store (a StateStoreRDD)."""
    stages = []
    for path in sorted(event_log_dir.rglob("events_*")):
        for line in path.open():
            if '"SparkListenerStageCompleted"' not in line:
                continue
            info = json.loads(line)["Stage Info"]
            stateful = any(rdd["Name"] == "StateStoreRDD" for rdd in info["RDD Info"])
            stages.append((info["Stage ID"], stateful, (info["Completion Time"] - info["Submission Time"]) / 1000))
    return [(stateful, seconds) for _, stateful, seconds in sorted(stages)]


def stateful_stage_figures(query, stages: list[tuple[bool, float]]) -> dict:
    """Events/s of the stateful stage alone, first data batch excluded (one stateful stage per
    micro-batch, in batch order); empty if the stages do not line up with the batches."""
    progress = query.recentProgress
    stateful = [seconds for is_stateful, seconds in stages if is_stateful]
    if len(stateful) != len(progress):
        return {}
    timed = [(p["numInputRows"], s) for p, s in zip(progress, stateful) if p["numInputRows"] > 0][1:]
    seconds = sum(s for _, s in timed)
    return {"events_per_s": sum(n for n, _ in timed) / seconds if seconds else 0.0, "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=250_000, help="events per micro-batch")
    ap.add_argument("--apis", default="pandas,row")
    ap.add_argument("--engine-hosts", default="true",
                    help="spark.epochwatch.engineHosts values to run each API with, e.g. true,false")
    args = ap.parse_args(argv)

    started = time.monotonic()
    events = generate(args.events, args.brokers, args.clients)
    span_s = (events[-1]["event_time"] - events[0]["event_time"]) / 1000
    print(f"generated {len(events):,} events ({span_s:.0f} s of event time) in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    settings = Settings(rules=RuleSettings())
    work = Path(tempfile.mkdtemp(prefix="epochwatch-bench-"))
    results = {}
    spark = None
    try:
        staged = work / "events"
        staged.mkdir()
        stage_events(events, staged, args.chunk)
        t = time.monotonic()
        detector = LocalDetector(settings.rules)
        for i in range(0, len(events), args.chunk):
            detector.feed(events[i:i + args.chunk])
        local_s = time.monotonic() - t
        results["single process (same rules)"] = {"events_per_s": len(events) / local_s, "seconds": local_s}
        event_log = work / "event-log"
        event_log.mkdir()
        spark = build_session("epochwatch-bench", conf={"spark.eventLog.enabled": "true",
                                                        "spark.eventLog.dir": event_log.as_uri(),
                                                        "spark.eventLog.compress": "false"})
        runs = [(api, hosted) for hosted in args.engine_hosts.split(",") for api in args.apis.split(",")]
        for api, hosted in runs:
            name = api if len(runs) == len(args.apis.split(",")) else f"{api}, hosts {hosted}"
            print(f"running {name} ...", file=sys.stderr)
            spark.conf.set(ENGINE_HOSTS_CONF, hosted)
            seen = len(stage_seconds(event_log))
            query = run_staged(spark, settings, staged, [MemorySink()], str(work / f"ckpt-{api}-{hosted}"), api=api)
            results[f"Spark transformWithState, {name}"] = progress_figures(query)
            # a listener thread writes the event log: wait (10 s at most) until it has every batch
            deadline = time.monotonic() + 10
            while not (stage := stateful_stage_figures(query, stage_seconds(event_log)[seen:])) \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
            if stage:
                results[f"  its stateful stage alone ({name})"] = stage
    finally:
        if spark is not None:
            spark.stop()  # before the event log's directory goes
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{len(events):,} events, {args.brokers} brokers, {args.clients:,} clients, "
          f"{args.chunk:,} events per micro-batch, local[2]")
    print(f"{'stage':52} {'events/s':>10} {'seconds':>8} {'state rows':>11} {'state MB':>9}")
    for name, r in results.items():
        mb = f"{r['state_bytes'] / 1e6:.1f}" if r.get("state_bytes") else "-"
        print(f"{name:52} {r['events_per_s']:>10,.0f} {r['seconds']:>8.1f} {r.get('state_rows', '-'):>11} {mb:>9}")
    spark_rates = {k: v["events_per_s"] for k, v in results.items() if "Spark" in k}
    if len(spark_rates) == 2:
        (a, ra), (b, rb) = spark_rates.items()
        print(f"ratio {a.split(', ', 1)[1]} / {b.split(', ', 1)[1]}: {ra / rb:.2f}")
    print("(first Spark batch excluded: Python worker start-up; it took "
          + ", ".join(f"{v['first_batch_s']:.1f} s" for k, v in results.items() if "Spark" in k) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
