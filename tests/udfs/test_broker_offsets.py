"""BrokerOffsets' answers: what counts as one (the admin client is a stand-in here; the real
broker's side is in tests/integration/faults/test_source_outage.py)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.fake_time import FakeTime
from udfs.broker_offsets import BrokerOffsets
from udfs.kafka_options import parse_source_options


class Answer:
    def __init__(self, offset: int):
        self.offset = offset

    def result(self, timeout=None):
        return SimpleNamespace(offset=self.offset)


class Admin:
    """list_offsets answers the offsets given, one per call, in turn."""

    def __init__(self, *offsets: int):
        self.offsets, self.calls = list(offsets), 0

    def list_offsets(self, wanted, isolation_level=None, request_timeout=None):
        self.calls += 1
        return {tp: Answer(self.offsets.pop(0)) for tp in wanted}

    def poll(self, timeout):
        return 0


def test_an_invalid_offset_without_an_error_is_no_answer_and_is_asked_again():
    """Why: with its leader paused, librdkafka 2.16 answered ListOffsets with -1001
    (OFFSET_INVALID) and no error (seen against Kafka 4.1.2); planned on, the batch's end would
    go back and read as data loss."""
    time_ = FakeTime()
    offsets = BrokerOffsets(parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}),
                            clock=time_.clock, sleep=time_.sleep)
    offsets._admin = admin = Admin(-1001, 42)
    assert offsets.latest([("t", 0)]) == {("t", 0): 42}
    assert admin.calls == 2 and len(time_.sleeps) == 1
