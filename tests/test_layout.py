"""The README's "How it is built" is the map a newcomer reads first: it must match the tree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# packages whose README entry names each module (the others are described as a whole)
NAMED_ONE_BY_ONE = ("rules", "engine", "fastpath", "spark", "sinks")


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## How it is built", 1)[1].split("```", 2)[1]


def _entries(block: str) -> dict[str, str]:
    """'rules/' or 'events.py' (under streaming/) or 'udfs/' (top level) -> its description."""
    entries, name = {}, None
    for line in block.splitlines():
        m = re.match(r"^(\s*)(\S+/|\S+\.py)\s+(.*)$", line)
        if m and len(m.group(1)) <= 2:
            name = m.group(2)
            entries[name] = m.group(3)
        elif name and line.strip():
            entries[name] += " " + line.strip()
    return entries


def test_every_package_and_module_is_on_the_map():
    entries = _entries(_layout())
    packages = sorted(p.name + "/" for p in (ROOT / "streaming").iterdir() if (p / "__init__.py").exists())
    assert [p for p in packages if p not in entries and p not in _layout()] == []  # schemas/: under events.py
    modules = sorted(p.name for p in (ROOT / "streaming").glob("*.py") if not p.name.startswith("__"))
    assert [m for m in modules if m not in entries] == []
    for package in NAMED_ONE_BY_ONE:
        words = set(re.findall(r"[a-z_]+", entries[package + "/"]))
        stems = sorted(p.stem for p in (ROOT / "streaming" / package).glob("*.py") if not p.name.startswith("__"))
        assert [s for s in stems if s not in words] == [], f"streaming/{package}/ modules missing from the README"


def test_everything_on_the_map_exists():
    entries = _entries(_layout())
    for name, description in entries.items():
        top = ROOT / name if name in ("udfs/", "dashboards/", "deploy/", "bench/", "tests/", "streaming/") else None
        assert (top or ROOT / "streaming" / name).exists(), name
    for package in NAMED_ONE_BY_ONE:
        words = re.findall(r"\b([a-z]+(?:_[a-z]+)+)\b", entries[package + "/"])  # module-like names
        missing = [w for w in words if not (ROOT / "streaming" / package / f"{w}.py").exists()
                   and w not in ("fast_paths",)]
        assert missing == [], f"streaming/{package}/ in the README names modules that do not exist"
    tested = re.findall(r"\b([a-z]+(?:/[a-z]+)*)/", entries["tests/"])
    assert [t for t in tested if not (ROOT / "tests" / t).is_dir()] == []
