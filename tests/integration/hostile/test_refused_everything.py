"""`epochwatch run --available-now` over a topic where every record is refused (a producer on
another encoding) detected nothing: it exits non-zero and says why, by reason, instead of
reporting success (issue #22)."""

from __future__ import annotations

import pytest

from tests.integration.faults.support import job_on_fresh_topics
from tests.integration.hostile.support import produce_raw, run_to_exit

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_run_that_refused_every_record_fails_loudly(broker, tmp_path):
    config, topics = job_on_fresh_topics(broker.bootstrap_servers, tmp_path, "refused")
    # JSON where Avro is expected: what a producer on the wrong encoding sends
    produce_raw(broker.bootstrap_servers, topics["events"],
                [(b"c/broker-1", b'{"event_type": "broker_heartbeat"}')] * 5 + [(b"c/broker-1", b"{}")])
    code, job = run_to_exit(config, tmp_path / "job.log")
    log = job.log()
    assert code == 1, log[-3000:]
    assert "refused 6 (bad_magic_byte=5, truncated_header=1)" in log  # the batch line
    assert "every one of the 6 records read was refused" in log and "kafka.encoding" in log
