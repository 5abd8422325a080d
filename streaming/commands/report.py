"""``epochwatch report``: draw a replay's broker state timeline and alerts as a PNG (and HTML)."""

from __future__ import annotations

import sys
from pathlib import Path

from streaming.config import ConfigError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="draw broker states and alerts of a replay as a PNG (and an HTML page)",
        description="One lane per broker coloured by state (INITIAL / INACTIVE / ACTIVE / STOPPING) over time, "
                    "with the alerts as firing->resolved spans below.")
    parser.add_argument("--alerts", required=True, metavar="ALERTS.jsonl", help="alert records (JSON Lines)")
    parser.add_argument("--transitions", required=True, metavar="TRANSITIONS.jsonl",
                        help="broker state transitions (JSON Lines, docs/CONTRACTS.md)")
    parser.add_argument("--out", required=True, metavar="REPORT.png", help="PNG file to write")
    parser.add_argument("--html", metavar="REPORT.html", help="also write an HTML page: the PNG plus an alert table")
    parser.add_argument("--title", help="title drawn on the picture")
    parser.set_defaults(func=run)


def run(args) -> int:
    from streaming.tools.report import ReportInputError, build_report, iso

    for flag, value in (("--alerts", args.alerts), ("--transitions", args.transitions)):
        if not Path(value).is_file():
            raise ConfigError(flag, f"file {value} does not exist", "pass the JSON Lines file written by the replay")
    if not args.out.lower().endswith(".png"):
        raise ConfigError("--out", f"{args.out} does not end in .png", "name the picture e.g. report.png")
    try:
        summary = build_report(Path(args.alerts), Path(args.transitions), Path(args.out),
                               Path(args.html) if args.html else None, args.title)
    except ReportInputError as exc:
        print(f"epochwatch: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {summary.brokers} brokers, {summary.transitions} transitions, "
          f"{summary.incidents} alert incidents, {iso(summary.window[0])} .. {iso(summary.window[1])}")
    if args.html:
        print(args.html)
    return 0
