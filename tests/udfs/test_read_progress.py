"""udfs.read_progress without Kafka: which partitions are behind, and the event time of a peeked
record (the decoded event's, else the record's own timestamp)."""

from udfs.read_progress import event_time_of, lagging


def test_a_partition_with_records_past_the_batch_end_is_behind_one_read_to_its_end_is_not():
    until = {("ev", 0): 40, ("ev", 1): 100, ("ev", 2): 0}
    latest = {("ev", 0): 900, ("ev", 1): 100, ("ev", 2): 5}
    assert lagging(until, latest) == {("ev", 0): 40, ("ev", 2): 0}


def test_a_partition_the_latest_offsets_do_not_know_is_not_behind():
    assert lagging({("ev", 3): 7}, {}) == {}


class _Message:
    def __init__(self, value, timestamp):
        self._value, self._timestamp = value, timestamp

    def value(self):
        return self._value

    def timestamp(self):
        return self._timestamp


def test_the_decoded_event_time_comes_first_then_the_records_own_timestamp():
    def decode(values, messages):
        return [{"event_time": 1_000} if v == b"event" else None for v in values], []

    assert event_time_of(_Message(b"event", (1, 5_000)), decode) == 1_000
    assert event_time_of(_Message(b"junk", (1, 5_000)), decode) == 5_000
    assert event_time_of(_Message(b"junk", (0, -1)), decode) is None
