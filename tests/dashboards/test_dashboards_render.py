"""``epochwatch dashboards render``: stable JSON files equal to the checked-in golden files.

When a dashboard changes on purpose, regenerate the golden files and review the diff:

    EPOCHWATCH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/dashboards/test_dashboards_render.py
    git diff dashboards/golden/
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import dashboards
from dashboards import build_all
from dashboards.render import dumps, render
from streaming.commands import main

GOLDEN_DIR = Path(dashboards.__file__).parent / "golden"
UPDATE = os.environ.get("EPOCHWATCH_UPDATE_GOLDEN") == "1"


def test_rendered_dashboards_equal_the_golden_files(tmp_path):
    written = render(build_all(), tmp_path)
    if UPDATE:
        for stale in GOLDEN_DIR.glob("*.json"):
            stale.unlink()
        render(build_all(), GOLDEN_DIR)
    golden = sorted(p.name for p in GOLDEN_DIR.glob("*.json"))
    assert sorted(p.name for p in written) == golden, "a dashboard was added or removed: regenerate (see docstring)"
    for path in written:
        expected = (GOLDEN_DIR / path.name).read_text(encoding="utf-8")
        assert path.read_text(encoding="utf-8") == expected, (
            f"{path.name} differs from dashboards/golden/: if the change is intended, "
            "run with EPOCHWATCH_UPDATE_GOLDEN=1 and review git diff")


def test_render_is_byte_stable_across_runs(tmp_path):
    first = {p.name: p.read_bytes() for p in render(build_all(), tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in render(build_all(), tmp_path / "b")}
    assert first == second


def test_dumps_sorts_keys_and_indents():
    text = dumps({"b": 1, "a": {"d": 2, "c": [3]}})
    assert text == '{\n  "a": {\n    "c": [\n      3\n    ],\n    "d": 2\n  },\n  "b": 1\n}\n'


def test_cli_render_writes_one_file_per_dashboard(tmp_path, capsys):
    out = tmp_path / "provisioned" / "epochwatch"
    assert main(["dashboards", "render", "--out", str(out), "--check"]) == 0
    files = sorted(out.glob("*.json"))
    assert [f.stem for f in files] == sorted(build_all())
    assert capsys.readouterr().out.split() == [str(out / f"{uid}.json") for uid in build_all()]
    for f in files:
        data = json.loads(f.read_text())
        assert data["uid"] == f.stem
    assert not list(out.glob(".*.tmp")), "no temporary files left behind"


def test_cli_render_overwrites_existing_files(tmp_path):
    (tmp_path / "epochwatch-fleet.json").write_text("{ half a file")
    assert main(["dashboards", "render", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "epochwatch-fleet.json").read_text())["uid"] == "epochwatch-fleet"


@pytest.fixture
def restrictive_umask():
    """umask 077, as under a hardened service account: new files would be 0600, directories 0700."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_rendered_files_are_world_readable_whatever_the_umask(tmp_path, restrictive_umask):
    """Grafana runs as its own user: it must read the files and enter the directories."""
    out = tmp_path / "grafana" / "dashboards" / "epochwatch"
    assert main(["dashboards", "render", "--out", str(out)]) == 0
    files = sorted(out.glob("*.json"))
    assert files and {f.name: mode(f) for f in files} == {f.name: 0o644 for f in files}
    assert {str(d): mode(d) for d in (out, out.parent, out.parent.parent)} == {
        str(d): 0o755 for d in (out, out.parent, out.parent.parent)}
    # a second render replaces the files (new inodes): still 0644
    assert main(["dashboards", "render", "--out", str(out)]) == 0
    assert {mode(f) for f in out.glob("*.json")} == {0o644}


def test_render_leaves_an_existing_directory_mode_alone(tmp_path, restrictive_umask):
    out = tmp_path / "mine"
    out.mkdir()
    out.chmod(0o750)
    render(build_all(), out)
    assert mode(out) == 0o750, "the operator's choice for a directory that already exists"
    assert {mode(f) for f in out.glob("*.json")} == {0o644}


def test_cli_render_requires_out(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["dashboards", "render"])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err
