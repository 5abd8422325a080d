"""The user docs speak to the people who run epochwatch: what it does and how to run it, not how
it came to be. Development history (work sessions, issues, "used to", "before this change")
belongs in the commit log and bench/HISTORY.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = ["README.md", "docs/operations.md", "deploy/kubernetes/README.md", "deploy/grafana/README.md"]
NARRATION = [
    r"\bsessions? \d+", r"\bissues? #?\d+", r"\bused to\b", r"\bno longer\b", r"\bpreviously\b",
    r"\bbefore (this|the) (change|fix|commit|release)\b", r"\bwe (measured|changed|fixed|moved|found)\b",
    r"\bthe code before\b", r"\bnot re-measured\b", r"\bon a later host\b",
]


@pytest.mark.parametrize("doc", USER_DOCS)
def test_user_docs_carry_no_development_history(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = [(m.group(0), text.count("\n", 0, m.start()) + 1) for pattern in NARRATION
             for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert not found, f"{doc}: development history at (phrase, line) {found}"


def test_the_check_finds_narration():
    assert re.search(NARRATION[0], "measured in session 14", re.IGNORECASE)
    assert re.search(NARRATION[2], "it used to take 10x", re.IGNORECASE)
