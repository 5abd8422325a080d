"""``epochwatch simulate``: realistic cluster telemetry (steady state or a scripted incident) to a
JSON Lines file or a Kafka topic, plus the ground truth of what a correct engine must fire."""

from __future__ import annotations

import argparse
import heapq
import re
import sys
from pathlib import Path

from streaming import config as config_module
from streaming.events import EventError, to_millis
from streaming.tools.simulate import (
    DEFAULT_START_MS,
    SCENARIOS,
    ClusterShape,
    SimulationError,
    run_scenario,
    scenario_settings,
    steady_state,
    steady_truth,
)
from streaming.tools.simulate.writers import KafkaEventWriter, KafkaWriteError, write_jsonl_file

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> int:
    """``90s``, ``10m``, ``2h``, ``500ms`` or plain milliseconds -> milliseconds."""
    match = _DURATION.match(text or "")
    if not match or int(match.group(1)) <= 0:
        raise SimulationError("--duration", f"{text!r} is not a positive duration", "use e.g. 90s, 10m or 2h")
    return int(match.group(1)) * _UNITS[match.group(2) or "ms"]


def _count(flag: str, minimum: int):
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {minimum}; e.g. {flag} {max(minimum, 6)}")
        return int(text)
    return parse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="generate cluster telemetry (steady state or an incident) with ground truth",
        description="Generate a Kafka cluster's controller / broker / client telemetry as epochwatch events, "
                    "seeded and deterministic. Scenarios come with a ground truth file: the alerts a correct "
                    "engine must and may fire.")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--scenario", metavar="NAME|all|steady", help="a scenario name, all of them, or steady")
    p.add_argument("--brokers", type=_count("--brokers", 1), default=6,
                   help="brokers of the simulated cluster (default 6)")
    p.add_argument("--clients", type=_count("--clients", 1), default=40, help="clients (default 40)")
    p.add_argument("--groups", type=_count("--groups", 0), default=8, help="consumer groups (default 8)")
    p.add_argument("--duration", default="10m", help="event time of --scenario steady (e.g. 90s, 10m, 2h)")
    p.add_argument("--seed", type=_count("--seed", 0), default=1,
                   help="random seed: the same seed, the same events (default 1)")
    p.add_argument("--cluster-id", default="cluster-a", help="the events' cluster_id (default cluster-a)")
    p.add_argument("--start", help="event time of the first event, ISO-8601 (default 2026-01-01T00:00:00Z)")
    p.add_argument("--output", metavar="FILE.jsonl", help="write JSON Lines here ('-' for stdout)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="produce to this Kafka cluster")
    p.add_argument("--topic", help="Kafka topic for the events")
    p.add_argument("--encoding", choices=("confluent", "schemaless"),
                   help="Kafka value format (default: kafka.encoding of --config, else confluent)")
    p.add_argument("--truth", metavar="FILE.json", help="write the ground truth here (a list for --scenario all)")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="thresholds (rules:) and Kafka settings; default: Kafka's defaults with short timers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    try:
        return _simulate(args)
    except SimulationError as exc:
        print(f"epochwatch simulate: {exc}", file=sys.stderr)
        return 2
    except KafkaWriteError as exc:
        print(f"epochwatch simulate: Kafka: {exc}", file=sys.stderr)
        return 1


def _list() -> int:
    width = max(len(n) for n in SCENARIOS)
    for scenario in SCENARIOS.values():
        print(f"{scenario.name:{width}}  {scenario.description}")
    print(f"{'steady':{width}}  steady state for --duration (for benchmarks: millions of events)")
    print(f"{'all':{width}}  every scenario above, one cluster id each, merged in event-time order")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    if not args.scenario:
        raise SimulationError("--scenario", "is missing", "pass a scenario name, all or steady (see --list)")
    if args.scenario not in SCENARIOS and args.scenario not in ("all", "steady"):
        raise SimulationError("--scenario", f"unknown scenario {args.scenario!r}", "see epochwatch simulate --list")
    settings = config_module.load(args.config) if args.config else None
    rules = settings.rules if settings else scenario_settings()
    to_kafka = bool(args.bootstrap_servers or args.topic)
    if to_kafka == bool(args.output):
        raise SimulationError("--output", "say where the events go, once",
                              "pass --output FILE.jsonl, or --bootstrap-servers HOST:PORT --topic T")
    shape = ClusterShape(cluster_id=args.cluster_id, brokers=args.brokers, clients=args.clients,
                         groups=args.groups).validate()
    start_ms = _start(args.start)

    if args.scenario == "steady":
        duration = parse_duration(args.duration)
        stream = steady_state(duration_ms=duration, settings=rules, shape=shape, seed=args.seed, start_ms=start_ms)
        truths = [steady_truth(duration_ms=duration, settings=rules, shape=shape, seed=args.seed, start_ms=start_ms)]
    else:
        names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
        results = []
        for name in names:
            cluster = f"{args.cluster_id}-{name.replace('_', '-')}" if len(names) > 1 else args.cluster_id
            results.append(run_scenario(name, settings=rules, seed=args.seed, start_ms=start_ms,
                                        shape=ClusterShape(cluster_id=cluster, brokers=args.brokers,
                                                           clients=args.clients, groups=args.groups)))
        stream = heapq.merge(*(r.events for r in results), key=lambda e: e["event_time"])
        truths = [r.truth for r in results]

    if to_kafka:
        written, where = _produce(args, settings, stream), f"topic {_topic(args, settings)}"
    elif args.output == "-":
        written, where = _write_stdout(stream), "stdout"
    else:
        written, where = write_jsonl_file(stream, args.output), args.output
    if args.truth:
        body = truths[0].to_json() if len(truths) == 1 and args.scenario != "all" else \
            "[\n" + ",\n".join(t.to_json() for t in truths) + "\n]"
        Path(args.truth).write_text(body + "\n", encoding="utf-8")
    print(f"epochwatch simulate: {written:,} events ({args.scenario}, seed {args.seed}) to {where}"
          + (f"; ground truth in {args.truth}" if args.truth else ""), file=sys.stderr)
    return 0


def _start(text: str | None) -> int:
    if not text:
        return DEFAULT_START_MS
    try:
        return to_millis(text, "--start")
    except EventError as exc:
        raise SimulationError("--start", str(exc), "use ISO-8601, e.g. 2026-01-01T00:00:00Z") from None


def _topic(args, settings) -> str:
    if args.topic:
        return args.topic
    if settings:
        return settings.kafka.events_topic
    raise SimulationError("--topic", "is missing", "pass --topic T (or topics.events in --config)")


def _produce(args, settings, stream) -> int:
    bootstrap = args.bootstrap_servers or (settings.kafka.bootstrap_servers if settings else None)
    if not bootstrap:
        raise SimulationError("--bootstrap-servers", "is missing", "pass --bootstrap-servers HOST:PORT")
    encoding = args.encoding or (settings.kafka.encoding if settings else "confluent")
    catalog = settings.kafka.registry_catalog(_topic(args, settings)) if settings and encoding == "confluent" else None
    with KafkaEventWriter(bootstrap, _topic(args, settings), encoding=encoding, catalog=catalog,
                          client=settings.kafka.client if settings else None) as writer:
        return writer.write(stream).events


def _write_stdout(stream) -> int:
    from streaming.events import write_jsonl

    return write_jsonl(stream, sys.stdout)
