"""epochwatch demo: a real incident on a real Kafka cluster end to end (default), or the simulator's
scripted incidents on the embedded broker (--simulated)."""

from __future__ import annotations

from pathlib import Path

from streaming import config


def register(sub) -> None:
    p = sub.add_parser("demo", help="a real broker cut off from the controller of a real Kafka cluster, end to end",
                       description="Starts a real Apache Kafka KRaft cluster on loopback, `epochwatch collect` and the "
                                   "live Spark job, cuts one broker off from the controller while its clients still "
                                   "reach it, prints each alert as it fires, heals it, and checks that the expected "
                                   "alerts fired and resolved and nothing else paged. With --simulated: the "
                                   "simulator's scripted incidents on the embedded broker instead, checked against "
                                   "their ground truth.")
    p.add_argument("--simulated", action="store_true",
                   help="play the simulator's scripted incidents on the embedded broker (tansu) instead")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="with --simulated: scenario to play (repeatable; 'all' for every one; default: "
                        "partitioned_broker). See: epochwatch simulate --list")
    p.add_argument("--seed", type=int, default=1, help="seed of the simulated scenarios (--simulated; default 1)")
    p.add_argument("--bootstrap-servers", help="with --simulated: use this Kafka instead of the embedded broker")
    p.add_argument("--report", type=Path, default=Path("epochwatch-demo-report.png"),
                   help="where to draw the broker timeline + alerts (PNG, plus .html beside it)")
    p.add_argument("--no-report", action="store_true", help="do not draw the report")
    p.set_defaults(func=run)


def run(args) -> int:
    from streaming.tools.demo import run_demo
    from streaming.tools.simulate import SCENARIOS

    report = None if args.no_report else args.report
    if not (args.simulated or args.scenario or args.bootstrap_servers):
        from streaming.tools.cluster_demo import run_cluster_demo

        return run_cluster_demo(report)

    names = args.scenario or ["partitioned_broker"]
    if "all" in names:
        names = list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise config.ConfigError("--scenario", f"unknown scenario(s) {', '.join(unknown)}",
                                 f"use one of {', '.join(SCENARIOS)} or all")
    return run_demo(names, args.seed, args.bootstrap_servers, report)
