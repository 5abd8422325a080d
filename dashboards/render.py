"""Render dashboards to JSON files: sorted keys, 2-space indent, trailing newline (stable across runs).

Grafana usually runs as its own user, so the files are world-readable (0644) and the directories
0755 whatever the umask of the process that renders them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Mapping

FILE_MODE = 0o644
DIR_MODE = 0o755


def dumps(dashboard: Mapping) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so Grafana's file provider never reads half a file.
    mkstemp creates the file 0600: it is opened up to FILE_MODE before the rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            os.fchmod(handle.fileno(), FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render(dashboards: Mapping[str, Mapping], out_dir: str | os.PathLike) -> list[Path]:
    """Write ``<uid>.json`` for each dashboard into ``out_dir`` (created if missing, DIR_MODE)."""
    out = Path(out_dir)
    _make_dirs(out)
    written = []
    for uid, dashboard in dashboards.items():
        path = out / f"{uid}.json"
        write_atomically(path, dumps(dashboard))
        written.append(path)
    return written


def _make_dirs(out: Path) -> None:
    """Create ``out`` and its missing parents with DIR_MODE; an existing directory keeps its mode."""
    missing = [d for d in (out, *out.parents) if not d.exists()]
    out.mkdir(parents=True, exist_ok=True)
    for directory in missing:
        directory.chmod(DIR_MODE)
