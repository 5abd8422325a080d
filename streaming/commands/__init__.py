"""``epochwatch``, the console script: one module per subcommand in this package, each with
``register(subparsers)``, found automatically (``python -m streaming.commands`` runs it too)."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from streaming import __version__
from streaming.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochwatch",
        description="Monitor Kafka controller heartbeats, broker incarnations, metadata epochs and client rebootstrap.",
    )
    parser.add_argument("--version", action="version", version=f"epochwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"streaming.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"epochwatch: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, as cat does, and let no flush at exit complain
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        print(f"epochwatch: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 2
