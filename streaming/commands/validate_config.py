"""epochwatch validate-config --config FILE: check a config and explain each problem."""

from __future__ import annotations

import dataclasses

from streaming import config
from udfs.redact import is_secret, redact


def register(sub) -> None:
    p = sub.add_parser("validate-config", help="check a config file and explain what is wrong",
                       description="Load the YAML config as the job would; print the effective settings, or "
                                   "the offending key and how to fix it (exit 2).")
    p.add_argument("--config", required=True, help="YAML config file")
    p.add_argument("--quiet", action="store_true", help="print nothing when the config is valid")
    p.set_defaults(func=run)


def run(args) -> int:
    settings = config.load(args.config)  # ConfigError -> exit 2 with the key and the fix (cli.main)
    if not args.quiet:
        print(f"{args.config}: valid")
        for section in ("kafka", "rules", "sinks", "collect"):
            values = dataclasses.asdict(getattr(settings, section))
            if section in ("kafka", "collect"):
                values["client"] = {k: ("***" if _secret(k) else v) for k, v in values["client"].items()}
            for name, value in values.items():
                print(f"  {section}.{name} = {redact(str(value))}")  # URLs may carry credentials
        print(f"  checkpoint_location = {settings.checkpoint_location}")
    return 0


def _secret(key: str) -> bool:
    return is_secret(key) or any(word in key for word in ("password", "secret", "token", "key"))


