"""``epochwatch simulate``: listing, writing events + truth, determinism across processes, and
errors that name the flag and the fix."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from streaming.commands import simulate
from streaming.tools.simulate import SCENARIOS, GroundTruth


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="epochwatch")
    simulate.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", *argv])
    return args.func(args)


def test_list_names_every_scenario_with_a_description(capsys):
    assert cli("--list") == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in out]
    assert names == [*SCENARIOS, "steady", "all"]
    assert all(len(line.split(None, 1)[1]) > 15 for line in out)


def test_scenario_writes_events_and_truth(tmp_path, capsys):
    out, truth = tmp_path / "e.jsonl", tmp_path / "t.json"
    assert cli("--scenario", "zombie_incarnation", "--output", str(out), "--truth", str(truth), "--seed", "3") == 0
    lines = out.read_text().splitlines()
    parsed = GroundTruth.from_json(truth.read_text())
    assert parsed.scenario == "zombie_incarnation" and parsed.seed == 3
    assert parsed.expected[0].alertname == "BrokerIncarnationRegression"
    assert f"{len(lines):,} events" in capsys.readouterr().err


def test_all_merges_every_scenario_with_one_cluster_id_each(tmp_path):
    out, truth = tmp_path / "all.jsonl", tmp_path / "all.json"
    assert cli("--scenario", "all", "--output", str(out), "--truth", str(truth)) == 0
    truths = json.loads(truth.read_text())
    assert [t["scenario"] for t in truths] == list(SCENARIOS)
    assert len({t["cluster_id"] for t in truths}) == len(SCENARIOS)
    times = [json.loads(line)["event_time"] for line in out.read_text().splitlines()]
    assert times == sorted(times)


def test_steady_honours_duration_and_sizes(tmp_path):
    out = tmp_path / "s.jsonl"
    assert cli("--scenario", "steady", "--duration", "90s", "--brokers", "3", "--clients", "7", "--groups", "0",
               "--start", "2026-03-01T00:00:00Z", "--output", str(out)) == 0
    evs = [json.loads(line) for line in out.read_text().splitlines()]
    start = 1_772_323_200_000
    assert start <= evs[0]["event_time"] and evs[-1]["event_time"] < start + 90_000
    assert {e["broker_id"] for e in evs if e["event_type"] == "broker_heartbeat"} == {1, 2, 3}
    assert len({e["client_id"] for e in evs if e["event_type"] == "metadata_response"}) == 7
    assert not [e for e in evs if e["event_type"] == "offset_commit"]


def test_config_file_sets_the_thresholds_of_the_truth(tmp_path):
    config = tmp_path / "epochwatch.yaml"
    config.write_text("rules:\n  metadata.max.age.ms: 15000\n  broker.stopping.grace.ms: 45000\n")
    truth = tmp_path / "t.json"
    assert cli("--scenario", "stuck_stopping", "--config", str(config), "--output", str(tmp_path / "e.jsonl"),
               "--truth", str(truth)) == 0
    settings = GroundTruth.from_json(truth.read_text()).settings
    assert settings["broker.stopping.grace.ms"] == 45000 and settings["metadata.max.age.ms"] == 15000


def test_same_arguments_give_identical_bytes_across_processes(tmp_path):
    # Why: hash randomisation or set order must not leak into the output.
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"{hash_seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "streaming.commands", "simulate", "--scenario", "connection_storm",
                        "--seed", "5", "--output", str(out)], check=True, env=env, capture_output=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and len(outputs[0]) > 100_000


# (case, argv, flag named in the error, why)
ERROR_CASES = [
    (1, ["--output", "x.jsonl"], "--scenario", "no scenario given"),
    (2, ["--scenario", "meltdown", "--output", "x.jsonl"], "--scenario", "not a scenario name"),
    (3, ["--scenario", "baseline"], "--output", "nowhere to write"),
    (4, ["--scenario", "baseline", "--output", "x.jsonl", "--topic", "t"], "--output", "two destinations"),
    (5, ["--scenario", "steady", "--duration", "ten minutes", "--output", "x.jsonl"], "--duration", "not a duration"),
    (6, ["--scenario", "steady", "--duration", "0s", "--output", "x.jsonl"], "--duration", "zero length"),
    (7, ["--scenario", "baseline", "--start", "tomorrow", "--output", "x.jsonl"], "--start", "not ISO-8601"),
    (8, ["--scenario", "connection_storm", "--clients", "4", "--output", "x.jsonl"], "--clients",
     "too few clients for a storm"),
    (9, ["--scenario", "commit_epoch_regression", "--groups", "0", "--output", "x.jsonl"], "--groups",
     "no consumer group to regress"),
    (10, ["--scenario", "baseline", "--topic", "t"], "--bootstrap-servers", "a topic but no servers"),
]


@pytest.mark.parametrize("case,argv,flag,why", ERROR_CASES, ids=[f"case{c[0]}" for c in ERROR_CASES])
def test_errors_name_the_flag_and_the_fix(case, argv, flag, why, tmp_path, capsys):
    argv = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in argv]
    assert cli(*argv) == 2, f"case {case}: {why}"
    err = capsys.readouterr().err
    assert f"epochwatch simulate: {flag}" in err and "Fix:" in err, f"case {case}: {why}: {err}"


@pytest.mark.parametrize("text,ms", [("90s", 90_000), ("10m", 600_000), ("2h", 7_200_000), ("500ms", 500),
                                     ("1500", 1500)])
def test_parse_duration(text, ms):
    assert simulate.parse_duration(text) == ms


def test_bad_counts_are_rejected_by_the_parser_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        cli("--scenario", "baseline", "--brokers", "-1", "--output", "x")
    assert "--brokers" in capsys.readouterr().err
