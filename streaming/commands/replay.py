"""epochwatch replay --input EVENTS.jsonl --output ALERTS.jsonl"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

from streaming import config


def register(sub) -> None:
    p = sub.add_parser("replay", help="run the detection pipeline over a JSON Lines file (deterministic, event time)",
                       description="Replay events from JSON Lines through the same Spark pipeline as the live job, "
                                   "in event time: the same input always gives the same alerts.")
    p.add_argument("--input", required=True, help="events as JSON Lines (see docs/events.md); '-' for stdin")
    p.add_argument("--output", required=True, help="alert records as JSON Lines; '-' for stdout")
    p.add_argument("--transitions", help="also write broker state transitions (JSON Lines) here")
    p.add_argument("--dead-letters", help="also write dead letters (bad lines, rejected events) here")
    p.add_argument("--config", help="YAML config (thresholds); defaults are Kafka's")
    p.add_argument("--chunk-events", type=int, default=20_000, help="events per micro-batch (default 20000)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    settings = config.load(args.config)
    if args.chunk_events < 1:
        raise config.ConfigError("--chunk-events", f"{args.chunk_events} is not positive", "pass e.g. 20000")
    if args.input != "-" and not Path(args.input).is_file():
        raise config.ConfigError("--input", f"file {args.input} does not exist", "pass a JSON Lines file of events")
    from streaming.sinks.jsonl import JsonLinesSink
    from streaming.spark.replay import print_progress, replay
    from streaming.spark.session import build_session

    with ExitStack() as stack:
        src = sys.stdin if args.input == "-" else stack.enter_context(open(args.input))
        out = sys.stdout if args.output == "-" else stack.enter_context(open(args.output, "w"))
        transitions = stack.enter_context(open(args.transitions, "w")) if args.transitions else None
        dead = stack.enter_context(open(args.dead_letters, "w")) if args.dead_letters else None
        spark = build_session("epochwatch-replay", conf=settings.spark)
        stats = replay(spark, settings, src, args.input, [JsonLinesSink(out, transitions, dead)],
                       chunk_events=args.chunk_events, progress=None if args.quiet else print_progress)
    from streaming.spark.refusals import describe, everything_refused, refused_everything_message

    if not args.quiet:
        print(f"\nreplayed {stats.events:,} events in {stats.batches} batches ({stats.seconds:.1f} s); "
              f"{stats.bad_lines} bad lines; refused {describe(stats.refused)}, sent to dead letters; "
              f"{stats.late_events} events came later than the allowed lateness (applied late, not dropped)",
              file=sys.stderr)
    if everything_refused(stats.records, sum(stats.refused.values())):
        print(f"epochwatch: {refused_everything_message(stats.records, stats.refused)}", file=sys.stderr)
        return 1
    return 0
