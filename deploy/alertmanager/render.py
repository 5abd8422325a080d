#!/usr/bin/env python3
"""Fill the webhook URLs into deploy/alertmanager/alertmanager.yml (standard library only).

Each ``${NAME}`` in the template is replaced by the environment variable NAME, or by the content
of the file named by NAME_FILE (a mounted secret). Values must be http(s) URLs; they are written
as quoted YAML strings. Exit code 2 and a message naming the variable when one is missing.

    EPOCHWATCH_PAGER_WEBHOOK_URL_FILE=/run/secrets/pager-url \\
    EPOCHWATCH_TEAM_WEBHOOK_URL=https://chat.example/hooks/kafka-sre \\
    python3 deploy/alertmanager/render.py --out /etc/alertmanager/alertmanager.yml
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

PLACEHOLDER = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
TEMPLATE = Path(__file__).with_name("alertmanager.yml")


class RenderError(ValueError):
    pass


def lookup(name: str, env: dict) -> str:
    if env.get(name):
        value = env[name]
    elif env.get(f"{name}_FILE"):
        path = Path(env[f"{name}_FILE"])
        if not path.is_file():
            raise RenderError(f"{name}_FILE={path}: no such file. Fix: mount the secret there or set {name}")
        value = path.read_text().strip()
    else:
        raise RenderError(f"{name} is not set. Fix: export {name}=https://... "
                          f"or {name}_FILE=/path/to/a/file/holding/the/url")
    if not value.startswith(("http://", "https://")):
        raise RenderError(f"{name}: {value[:40]!r} is not an http(s) URL. Fix: give the full webhook URL")
    return value


def render(template: str, env: dict) -> str:
    # JSON string syntax is valid YAML double-quoted scalar syntax: safe for any URL characters.
    return PLACEHOLDER.sub(lambda m: json.dumps(lookup(m.group(1), env)), template)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("--out", type=Path, help="write here (default: standard output)")
    args = parser.parse_args(argv)
    try:
        text = render(args.template.read_text(), dict(os.environ))
    except RenderError as exc:
        print(f"render.py: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
