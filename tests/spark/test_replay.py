"""``epochwatch replay`` through Spark gives the alerts of the single-process engine over the same
events: the pipeline (staged chunks -> routed packs -> transformWithState) adds nothing and loses
nothing, whatever files a chunk is staged in."""

import io
import json

import pytest

from streaming import config
from streaming.engine.local import detect_all
from streaming.sinks.memory import MemorySink
from streaming.spark.replay import FILES_PER_CHUNK, replay, run_staged, stage_jsonl
from streaming.tools.simulate import run_scenario

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("name", ["partitioned_broker", "zombie_incarnation"])
def test_replay_gives_the_single_process_alerts(spark, tmp_path, name):
    result = run_scenario(name)
    rules = result.truth.rule_settings()
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    # the last chunk holds a single event: fewer than the files a chunk is staged in
    chunk = 500
    events = result.events[:(len(result.events) // chunk) * chunk + 1]
    assert len(events) % chunk == 1 and FILES_PER_CHUNK >= 1
    text = "".join(json.dumps(ev) + "\n" for ev in events)
    sink = MemorySink()
    stats = replay(spark, settings, io.StringIO(text), "scenario", [sink], chunk_events=chunk,
                   checkpoint=str(tmp_path / "ckpt"))
    assert stats.events == len(events) and stats.batches == len(events) // chunk + 1
    got = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"]) for a in sink.all("alerts"))
    want = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"])
                  for a in detect_all(events, rules, batch=chunk))
    assert got and got == want


def test_the_row_api_processor_gives_the_same_alerts(spark, tmp_path):
    """transformWithState (Row API) beside transformWithStateInPandas, the default: the same
    processor with rows in and out, kept as the benchmark's peer (bench/stateful_throughput.py)."""
    result = run_scenario("zombie_incarnation")
    rules = result.truth.rule_settings()
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    staged = tmp_path / "events"
    staged.mkdir()
    stage_jsonl(io.StringIO("".join(json.dumps(ev) + "\n" for ev in result.events)), "scenario", staged, 400)
    sink = MemorySink()
    run_staged(spark, settings, staged, [sink], str(tmp_path / "ckpt"), api="row")
    got = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"]) for a in sink.all("alerts"))
    want = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"])
                  for a in detect_all(result.events, rules, batch=400))
    assert any(a[0] == "BrokerIncarnationRegression" for a in got) and got == want


DAY = 86_400_000


def shifted(events: list[dict], to_ms: int) -> list[dict]:
    delta = to_ms - events[0]["event_time"]
    return [{**ev, "event_time": ev["event_time"] + delta} for ev in events]


def test_a_recording_dated_months_ahead_replays_as_it_would_today(spark, tmp_path):
    """Reported (issue #22): a file dated two months ahead of the wall clock gave no alerts and
    "0 bad lines": every event was refused as too far in the future against the wall clock,
    silently. Replay runs on event time: the batches' own times are the clock."""
    import time

    result = run_scenario("partitioned_broker")
    rules = result.truth.rule_settings()
    settings = config.load()
    settings = type(settings)(kafka=settings.kafka, rules=rules, sinks=settings.sinks)
    events = shifted(result.events, int(time.time() * 1000) + 60 * DAY)
    sink = MemorySink()
    stats = replay(spark, settings, io.StringIO("".join(json.dumps(ev) + "\n" for ev in events)), "ahead", [sink],
                   chunk_events=2000, checkpoint=str(tmp_path / "ckpt"))
    assert sum(stats.refused.values()) == 0, stats.refused
    got = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"]) for a in sink.all("alerts"))
    want = sorted((a["alertname"], a["fingerprint"], a["status"], a["event_time"])
                  for a in detect_all(events, rules, batch=2000))
    assert got and got == want


def test_the_replay_command_reports_refusals_and_fails_when_it_refused_everything(spark, tmp_path, capsys):
    """Why: a run that refused every event detected nothing; it must say so and exit non-zero,
    not report success with "0 bad lines"."""
    from streaming.commands import main
    from tests.support.builders import hb

    good = [hb(1_767_225_600_000 + i * 1000, 1) for i in range(20)]
    forged = [hb(1_767_225_600_000 + i * 1000, 1, inc=2**63 - 1 - i) for i in range(20)]
    for name, evs, code in (("some", good + forged[:1], 0), ("all", forged, 1)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(ev) + "\n" for ev in evs) + "not json\n")
        assert main(["replay", "--input", str(path), "--output", str(tmp_path / f"{name}-alerts.jsonl")]) == code
        err = capsys.readouterr().err
        assert "refused 2 (bad_json_line=1, implausible_value=1)" in err if name == "some" else \
            "refused 21 (bad_json_line=1, implausible_value=20)" in err
        assert ("every one of the 21 records read was refused" in err) == (code == 1)
