"""``epochwatch replay`` through Spark gives the alerts of the single-process engine over the same
events: the pipeline (staged chunks -> routed packs -> transformWithState) adds nothing and loses
nothing, whatever files a chunk is staged in."""

import io
import json

import pytest

from streaming import config
from streaming.dispatch import MemorySink
from streaming.local import detect_all
from streaming.replay import FILES_PER_CHUNK, replay
from streaming.simulate import run_scenario

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
