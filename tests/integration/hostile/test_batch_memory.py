"""A micro-batch's memory is bounded in bytes, not only in records (issue #22): thousands of
records of 200-350 KB in one batch (a producer sending files, a misrouted topic) are dead letters
that must not be gathered anywhere in one piece: not in the read task, not in a pack, not on the
driver. `epochwatch run` as a process, so that running out of memory fails this test only."""

from __future__ import annotations

import random

import pytest

from tests.integration.faults.support import job_on_fresh_topics
from tests.integration.hostile.support import dead_letter_headers, produce_raw, run_to_exit, write_events
from tests.support.builders import hb

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]
T0 = 1_767_225_600_000
RECORDS = 4000      # ~1.1 GB: more than Spark lets a driver collect (spark.driver.maxResultSize 1g)


def test_thousands_of_large_records_in_one_batch_do_not_fail_it(own_broker, tmp_path):
    bootstrap = own_broker.bootstrap_servers
    config, topics = job_on_fresh_topics(bootstrap, tmp_path, "mem", kafka={"maxOffsetsPerTrigger": 1_000_000})
    rng = random.Random(22)
    sizes = [rng.randint(200_000, 350_000) for _ in range(RECORDS)]
    block = rng.randbytes(350_000)
    produce_raw(bootstrap, topics["events"],
                [(b"files/%d" % i, b"\x7f" + block[:size - 1]) for i, size in enumerate(sizes)])
    beats = []
    for i in range(10):
        for b in (1, 2):
            beats.append(hb(T0 + i * 500, b))
            beats[-1]["cluster_id"] = "after-the-files"
    write_events(bootstrap, topics["events"], beats)

    code, job = run_to_exit(config, tmp_path / "job.log", timeout_s=600)
    assert code == 0, job.log()[-4000:]
    batches = job.batches()
    assert batches[0].events == RECORDS + len(beats), "one batch holding every record"
    letters = dead_letter_headers(bootstrap, topics["dlq"], RECORDS)
    assert sorted(int(h["epochwatch.source.offset"]) for h in letters) == list(range(RECORDS))
    assert {h["epochwatch.dlq.reason"] for h in letters} == {"bad_magic_byte"}
    assert sorted(int(h["epochwatch.source.value.size"]) for h in letters) == sorted(sizes)
