"""Every runbook link an alert carries leads to a real section: the Prometheus meta-alerts'
(deploy/prometheus/rules) and the job's (streaming.rules.catalog) point at headings that exist in
the Markdown they name, and deploy/prometheus/render.py moves the meta-alerts' links to another
copy of the runbooks as rules.runbook.base.url moves the job's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from streaming.config import RUNBOOK_BASE_URL
from streaming.rules.catalog import RULES, runbook_url

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RENDER = PROMETHEUS / "render.py"
# the repository's files as the default base links to them
BLOB = RUNBOOK_BASE_URL.removesuffix("docs/alerts.md")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", markdown.read_text(), flags=re.M | re.S)   # no headings in code blocks
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def meta_rules(folder: Path = PROMETHEUS / "rules") -> list[dict]:
    return [rule for path in sorted(folder.glob("*.yml")) for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule]


def target(url: str) -> tuple[Path, str]:
    """The repository file and the anchor a default-base link points at."""
    assert url.startswith(BLOB), f"{url}: not a link into this repository ({BLOB})"
    page, _, anchor = url.removeprefix(BLOB).partition("#")
    return ROOT / page, anchor


def test_the_anchor_rule_matches_githubs_for_the_headings_we_use():
    cases = [("EpochwatchDown", "epochwatchdown"),
             ("Runbook: the monitor is down or stalled", "runbook-the-monitor-is-down-or-stalled"),
             ("Consumer group commits (`collect.offset.commits: on`)", "consumer-group-commits-collectoffsetcommits-on"),
             ("Kafka unreachable, or a topic re-created", "kafka-unreachable-or-a-topic-re-created")]
    assert [github_anchor(h) for h, _ in cases] == [a for _, a in cases]


@pytest.mark.parametrize("rule", meta_rules(), ids=lambda r: r["alert"])
def test_every_meta_alert_links_to_its_own_section(rule):
    url = rule["annotations"]["runbook_url"]
    page, anchor = target(url)
    assert page.is_file(), f"{rule['alert']}: {url} names {page}, which does not exist"
    assert anchor in anchors(page), f"{rule['alert']}: no heading #{anchor} in {page.name}"
    assert url == runbook_url(rule["alert"]), "the same link the job's alerts get: <base>#<alertname in lower case>"


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_detection_alert_links_to_a_section_that_exists(name):
    page, anchor = target(runbook_url(name))
    assert anchor in anchors(page), f"{name}: no heading #{anchor} in {page.name}"


def test_render_moves_every_meta_alert_link_to_another_copy_of_the_runbooks(tmp_path):
    base = "https://wiki.example.com/sre/epochwatch/alerts"
    result = subprocess.run([sys.executable, str(RENDER), "--runbook-base-url", base, "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (PROMETHEUS / "rules").glob("*.yml"))
    rendered, shipped = meta_rules(tmp_path), meta_rules()
    assert [r["annotations"]["runbook_url"] for r in rendered] == [runbook_url(r["alert"], base) for r in shipped]
    for before, after in zip(shipped, rendered):   # nothing else changes
        assert {**after, "annotations": {**after["annotations"], "runbook_url": None}} == \
            {**before, "annotations": {**before["annotations"], "runbook_url": None}}


@pytest.mark.parametrize("base", ["wiki.example.com/alerts", "https://wiki.example.com/alerts#top", ""])
def test_render_refuses_a_base_no_link_can_be_built_on(tmp_path, base):
    result = subprocess.run([sys.executable, str(RENDER), "--runbook-base-url", base, "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Fix:" in result.stderr
    assert not (tmp_path / "out").exists()


def test_render_knows_the_jobs_default_base():
    assert re.search(r'^DEFAULT_BASE = "(.+?)"', RENDER.read_text(), re.M).group(1) == RUNBOOK_BASE_URL
