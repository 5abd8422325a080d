"""epochwatch demo: a scripted incident end to end on the embedded broker."""

from __future__ import annotations

from pathlib import Path

from streaming import config


def register(sub) -> None:
    p = sub.add_parser("demo", help="play a scripted incident through the real pipeline on the embedded broker",
                       description="Starts the embedded Kafka-compatible broker (tansu), plays a simulated incident "
                                   "into it, runs the Spark job over it and prints each alert as it fires, then "
                                   "checks the alerts against the scenario's ground truth.")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="scenario to play (repeatable; 'all' for every one; default: partitioned_broker). "
                        "Several scenarios run side by side as separate clusters. See: epochwatch simulate --list")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bootstrap-servers", help="use this Kafka instead of starting the embedded broker")
    p.add_argument("--report", type=Path, default=Path("epochwatch-demo-report.png"),
                   help="where to draw the broker timeline + alerts (PNG, plus .html beside it)")
    p.add_argument("--no-report", action="store_true", help="do not draw the report")
    p.set_defaults(func=run)


def run(args) -> int:
    from streaming.demo import run_demo
    from streaming.simulate import SCENARIOS

    names = args.scenario or ["partitioned_broker"]
    if "all" in names:
        names = list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise config.ConfigError("--scenario", f"unknown scenario(s) {', '.join(unknown)}",
                                 f"use one of {', '.join(SCENARIOS)} or all")
    return run_demo(names, args.seed, args.bootstrap_servers, None if args.no_report else args.report)
