"""Detection during a large incident: the simulator's partitioned_broker_fleet scenario (a broker
cut off from the controller keeps serving its old epoch, and every client asks it once, so every
client opens and ends a stale incident within a minute) through the single-process detector
(streaming.engine.local.LocalDetector), with rules.fast.paths on and off, side by side.

On, a clients key evaluates only the clients changed since its last evaluation or whose deadline
came (streaming.fastpath.changed_entities); off, every client with an incident at every evaluation,
so each event costs the incident's size. Off also turns the quiet-run pass off (the one switch);
the alerts of both runs are checked equal.

    nice .venv/bin/python bench/incident_scale.py --clients 1000,3000,10000
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from streaming.engine.local import LocalDetector
from streaming.tools.simulate import ClusterShape, run_scenario


def detect(events: list[dict], settings, batch: int, until: int) -> tuple[float, float, list[dict]]:
    """Wall and CPU seconds of the detector over ``events`` (``batch`` per micro-batch, then time
    advanced to ``until``), and the alert records in the order it emitted them."""
    wall, cpu = time.perf_counter(), time.process_time()
    detector = LocalDetector(settings)
    alerts = []
    for i in range(0, len(events), batch):
        alerts += [a for r in detector.feed(events[i:i + batch]) for a in r.alerts]
    alerts += [a for r in detector.advance(until) for a in r.alerts]
    return time.perf_counter() - wall, time.process_time() - cpu, alerts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1000,3000,10000", help="client counts, comma-separated")
    parser.add_argument("--batch", type=int, default=5000, help="events per micro-batch")
    args = parser.parse_args()

    rows, shards = [], None
    for clients in (int(c) for c in args.clients.split(",")):
        result = run_scenario("partitioned_broker_fleet", shape=ClusterShape(clients=clients))
        settings, until = result.truth.rule_settings(), result.truth.end_ms
        shards = settings.client_shards
        on = detect(result.events, settings, args.batch, until)
        off = detect(result.events, dataclasses.replace(settings, fast_paths="off"), args.batch, until)
        if on[2] != off[2]:
            raise SystemExit(f"{clients} clients: the alerts differ with rules.fast.paths on and off")
        rows.append((clients, len(result.events), on, off))
        print(f"{clients:,} clients done", flush=True)

    print(f"\npartitioned_broker_fleet through LocalDetector, {args.batch:,} events per micro-batch, "
          f"{shards} client shards; seconds wall (CPU)")
    print(f"{'clients':>8} {'events':>9} {'fast paths on':>16} {'fast paths off':>16} {'off/on CPU':>10} {'alerts':>7}")
    for clients, events, (on_s, on_cpu, alerts), (off_s, off_cpu, _) in rows:
        print(f"{clients:>8,} {events:>9,} {f'{on_s:.2f} ({on_cpu:.2f})':>16} {f'{off_s:.2f} ({off_cpu:.2f})':>16} "
              f"{off_cpu / on_cpu:>9.1f}x {len(alerts):>7,}")


if __name__ == "__main__":
    main()
