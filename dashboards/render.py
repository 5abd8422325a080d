"""Render dashboards to JSON files: sorted keys, 2-space indent, trailing newline (stable across runs)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Mapping


def dumps(dashboard: Mapping) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so Grafana's file provider never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render(dashboards: Mapping[str, Mapping], out_dir: str | os.PathLike) -> list[Path]:
    """Write ``<uid>.json`` for each dashboard into ``out_dir`` (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, dashboard in dashboards.items():
        path = out / f"{uid}.json"
        write_atomically(path, dumps(dashboard))
        written.append(path)
    return written
