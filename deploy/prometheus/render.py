#!/usr/bin/env python3
"""Point the meta-alerts' runbook links at your copy of the runbooks (standard library only).

Each rule in deploy/prometheus/rules links to its section of this repository's docs/alerts.md.
Where on-call reads the runbooks elsewhere (a fork, an internal mirror, a wiki copy of
docs/alerts.md), give the same URL here as to the job's ``rules.runbook.base.url``, so that every
alert, the job's and Prometheus's, links to the same page:

    python3 deploy/prometheus/render.py --out /etc/prometheus/rules \\
        --runbook-base-url https://git.example.com/sre/epochwatch/blob/main/docs/alerts.md

Writes every rule file under the same name into --out; exit code 2 and a message when the URL is
not one a link can be built on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

RULES = Path(__file__).with_name("rules")
DEFAULT_BASE = "https://github.com/epochwatch/epochwatch/blob/main/docs/alerts.md"   # = rules.runbook.base.url's
_LINK = re.compile(r'runbook_url: "' + re.escape(DEFAULT_BASE) + r'#([^"]+)"')


def render(text: str, base: str) -> str:
    """The rule file with every runbook link on ``base`` (a JSON string is a valid YAML double-quoted one)."""
    if not re.fullmatch(r"https?://[^\s#]+", base):
        raise ValueError(f"{base!r} is not an http(s) URL without a #fragment. Fix: give the URL of your copy "
                         f"of docs/alerts.md, e.g. {DEFAULT_BASE}")
    return _LINK.sub(lambda m: "runbook_url: " + json.dumps(f"{base}#{m.group(1)}"), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runbook-base-url", required=True, help="the URL of your copy of docs/alerts.md")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the rule files into")
    args = parser.parse_args(argv)
    try:
        rendered = {path.name: render(path.read_text(), args.runbook_base_url) for path in sorted(RULES.glob("*.yml"))}
    except ValueError as exc:
        print(f"render.py: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (args.out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
