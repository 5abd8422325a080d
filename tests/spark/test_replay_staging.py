"""Replay's staging of a JSON Lines file (streaming.spark.replay.stage_jsonl), without Spark: what a bad
line leaves in the staged chunks is bounded (issue #22)."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq

from streaming.spark.replay import MAX_BAD_LINE_BYTES, stage_jsonl


def test_a_huge_bad_line_keeps_its_start_and_says_how_large_it_was(tmp_path):
    """Why: a file of thousands of 300 KB lines would otherwise put gigabytes in one micro-batch."""
    huge = json.dumps({"event_type": "broker_heartbeat", "junk": "j" * 300_000})
    stats = stage_jsonl(io.StringIO(huge + "\n"), "file.jsonl", tmp_path, chunk_events=10)
    rows = [r for f in sorted(tmp_path.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert stats.bad_lines == 1 and len(rows) == 1
    assert rows[0]["raw_value"] == huge.encode()[:MAX_BAD_LINE_BYTES]
    assert f"a line of {len(huge)} bytes" in rows[0]["dlq_detail"] and rows[0]["dlq_reason"] == "bad_json_line"
