"""epochwatch validate-config --config FILE: check a config, report every problem at once, and
show the effective settings in the YAML's own names with secrets masked."""

from __future__ import annotations

from dataclasses import fields

from streaming import config
from udfs.redact import is_secret, redact


def register(sub) -> None:
    p = sub.add_parser("validate-config", help="check a config file and explain what is wrong",
                       description="Load the YAML config as the job would; print the effective settings, or "
                                   "every offending key and how to fix it (exit 2).")
    p.add_argument("--config", required=True, help="YAML config file")
    p.add_argument("--quiet", action="store_true", help="print nothing when the config is valid")
    p.set_defaults(func=run)


def run(args) -> int:
    settings = config.load(args.config)  # ConfigError(s) -> exit 2 with each key and its fix (commands.main)
    if not args.quiet:
        print(f"{args.config}: valid")
        for line in effective(settings):
            print(f"  {line}")
    return 0


def effective(settings: config.Settings) -> list[str]:
    """Every setting as ``section.yaml.name = value``: secrets masked, credentials in URLs too."""
    lines = []
    for section in ("kafka", "rules", "sinks", "collect"):
        values = getattr(settings, section)
        for f in fields(values):
            name, value = f"{section}.{f.metadata.get('yaml', f.name)}", getattr(values, f.name)
            if f.metadata.get("block"):   # a nested block, e.g. sinks.labels
                lines += _block_lines(name, value)
            elif name.endswith(".client"):
                lines += [f"{name}.{k} = {'***' if _secret(k) else redact(str(v))}" for k, v in sorted(value.items())]
            else:
                shown = "null" if value is None else "***" if is_secret(name) else redact(str(value))
                lines.append(f"{name} = {shown}")
    lines += [f"checkpoint_location = {redact(settings.checkpoint_location)}",
              f"trigger_interval = {settings.trigger_interval}"]
    lines += [f"spark.{k} = {'***' if _secret(k) else redact(str(v))}" for k, v in sorted(settings.spark.items())]
    return lines


def _block_lines(prefix: str, block) -> list[str]:
    lines = []
    for f in fields(block):
        name, value = f"{prefix}.{f.metadata.get('yaml', f.name)}", getattr(block, f.name)
        if isinstance(value, dict):
            lines += [f"{name}.{k} = {redact(str(v))}" for k, v in sorted(value.items())]
        else:
            lines.append(f"{name} = {redact(str(value))}")
    return lines


def _secret(key: str) -> bool:
    return is_secret(key) or any(word in key for word in ("password", "secret", "token", "key"))
