"""Many clusters in one job (issue 22, cardinality): the same fleet (by default 3,000 brokers and
100,000 distinct clients) as one cluster and spread over 1,000 clusters, side by side in one run.
Per-cluster work (state keys, summaries, alert book, metrics) must grow linearly with the number
of clusters: the batch times and memory of the two runs should be close.

Each run is a fresh process (so that one run's JVM heap does not count in the next one's memory)
replaying the same number of steady-state events through the detection query (EventTime,
availableNow, the pandas API with engine hosts, as `epochwatch replay` runs). Printed per run:
events/s and micro-batch times (the first batch excluded: Python worker start-up), state rows and
size, the sinks' metrics series, and the peak resident memory of the process tree plus its
engine hosts (sampled every 0.5 s).

    .venv/bin/python bench/cardinality.py --clusters 1,1000 --events 1000000
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.faults.processes import descendants, engine_hosts, resident_kib  # noqa: E402


def fleet_events(n: int, clusters: int, brokers: int, clients: int):
    """n steady-state events of ``clusters`` clusters sharing ``brokers`` and ``clients`` evenly,
    merged in event-time order (each cluster its own simulation, seed and ids)."""
    from streaming.tools.simulate import ClusterShape, steady_state

    per_brokers, per_clients = max(1, brokers // clusters), max(1, clients // clusters)
    streams = [steady_state(shape=ClusterShape(cluster_id=f"cluster-{i:04d}", brokers=per_brokers,
                                               clients=per_clients, groups=max(1, per_clients // 50)),
                            duration_ms=24 * 3600 * 1000, seed=i + 1)
               for i in range(clusters)]
    return itertools.islice(heapq.merge(*streams, key=lambda e: e["event_time"]), n)


def run_one(args) -> dict:
    """One configuration, in this process: stage, replay, measure; prints a JSON line."""
    from prometheus_client import generate_latest

    from streaming import config
    from streaming.sinks.memory import MemorySink
    from streaming.sinks.metrics import Metrics
    from streaming.spark.replay import run_staged, stage_events
    from streaming.spark.session import build_session

    started = time.monotonic()
    events = list(fleet_events(args.events, args.run_clusters, args.brokers, args.clients))
    generated_s = time.monotonic() - started
    span_s = (events[-1]["event_time"] - events[0]["event_time"]) / 1000
    distinct = {"clusters": len({e["cluster_id"] for e in events}),
                "clients": len({(e["cluster_id"], e["client_id"]) for e in events if e.get("client_id")})}
    work = Path(tempfile.mkdtemp(prefix="epochwatch-cardinality-"))
    peak = [0]
    sampling = threading.Event()

    def sample():
        me = os.getpid()
        while not sampling.wait(0.5):
            peak[0] = max(peak[0], resident_kib({me, *descendants(me), *engine_hosts(me)}))

    threading.Thread(target=sample, daemon=True).start()
    spark = None
    try:
        staged = work / "events"
        staged.mkdir()
        stage_events(events, staged, args.chunk)
        del events
        spark = build_session("epochwatch-cardinality")
        metrics = Metrics()
        sinks = [MemorySink(), metrics]   # the metrics are a sink of the driver's (as `epochwatch run` has them)
        settings = config.load(overrides=dict(kv.split("=", 1) for kv in args.set))
        query = run_staged(spark, settings, staged, sinks, str(work / "checkpoint"))
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        later = progress[1:] or progress
        batch_s = [p["durationMs"]["triggerExecution"] / 1000 for p in later]
        rows = sum(p["numInputRows"] for p in later)
        op = query.recentProgress[-1]["stateOperators"][0]
        series = sum(1 for line in generate_latest(metrics.registry).decode().splitlines() if not line.startswith("#"))
        return {"clusters": args.run_clusters, "distinct": distinct, "events": args.events, "span_s": span_s,
                "generated_s": generated_s, "events_per_s": rows / sum(batch_s) if batch_s else 0.0,
                "batches": len(progress), "batch_median_s": statistics.median(batch_s) if batch_s else 0.0,
                "batch_max_s": max(batch_s, default=0.0), "first_batch_s": progress[0]["durationMs"]["triggerExecution"] / 1000,
                "state_rows": op["numRowsTotal"], "state_mb": (op.get("customMetrics", {}).get("rocksdbTotalBytes")
                                                               or op.get("memoryUsedBytes", 0)) / 1e6,
                "alerts": len(sinks[0].all("alerts")), "series": series, "peak_mib": peak[0] / 1024}
    finally:
        sampling.set()
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", default="1,1000", help="cluster counts to run, side by side")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=3000, help="brokers in all, shared by the clusters")
    ap.add_argument("--clients", type=int, default=100_000, help="distinct clients in all")
    ap.add_argument("--chunk", type=int, default=100_000, help="events per micro-batch")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a configuration override for every run, e.g. rules.state.client.shards=1")
    ap.add_argument("--run-clusters", type=int, help=argparse.SUPPRESS)  # one run, in a child process
    args = ap.parse_args(argv)
    if args.run_clusters:
        print(json.dumps(run_one(args)), flush=True)
        return 0

    results = []
    for clusters in (int(c) for c in args.clusters.split(",")):
        print(f"running {clusters} cluster(s) ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, __file__, "--run-clusters", str(clusters), "--events", str(args.events),
                              "--brokers", str(args.brokers), "--clients", str(args.clients),
                              "--chunk", str(args.chunk), *(f"--set={kv}" for kv in args.set)],
                             stdout=subprocess.PIPE, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))

    print(f"\n{args.events:,} steady-state events, {args.brokers:,} brokers and {args.clients:,} clients in all, "
          f"{args.chunk:,} events per micro-batch, local[2], pandas API with engine hosts, "
          f"settings {' '.join(args.set) or 'default'}; "
          f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'clusters':>8} {'clients':>8} {'ev. time':>8} {'events/s':>9} {'batches':>7} {'median s':>8} "
          f"{'max s':>6} {'state rows':>10} {'state MB':>8} {'series':>7} {'alerts':>6} {'peak MiB':>8}")
    for r in results:
        print(f"{r['distinct']['clusters']:>8,} {r['distinct']['clients']:>8,} {r['span_s']:>7.0f}s "
              f"{r['events_per_s']:>9,.0f} {r['batches']:>7} {r['batch_median_s']:>8.2f} {r['batch_max_s']:>6.2f} "
              f"{r['state_rows']:>10,} {r['state_mb']:>8.1f} {r['series']:>7,} {r['alerts']:>6} {r['peak_mib']:>8,.0f}")
    if len(results) > 1:
        a, b = results[0], results[-1]
        print(f"{b['clusters']} / {a['clusters']} cluster(s): events/s x{b['events_per_s'] / a['events_per_s']:.2f}, "
              f"median batch x{b['batch_median_s'] / a['batch_median_s']:.2f}, peak memory x{b['peak_mib'] / a['peak_mib']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
