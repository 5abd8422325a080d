"""Dead letters fit the producer's record size limit (udfs.dead_letters.DeadLetter.fitted): a
record as large as its own producer allowed must not make the dead-letter producer fail."""

from __future__ import annotations

import pytest

from udfs.dead_letters import MAX_KEY_BYTES, DeadLetter, headers_to_dict, message_max_bytes


def letter(key: bytes | None, value: bytes | None) -> DeadLetter:
    return DeadLetter("events", 3, 41, 1_767_225_600_000, key, value, "bad_magic_byte", "first byte is 255")


def record_size(key, value, headers) -> int:
    """What librdkafka counts against message.max.bytes."""
    return len(key or b"") + len(value or b"") + sum(len(n) + len(v) for n, v in headers)


# (case, key size, value size, limit, kept key, kept value (None: all), why)
FITS = [
    (1, 10, 1000, 1_000_000, 10, None, "small: kept as it is, marked not truncated"),
    (2, 10, 999_900, 1_000_000, 10, "cut", "the value plus the headers would pass the limit: cut to what fits"),
    (3, 50_000, 2_000_000, 1_000_000, MAX_KEY_BYTES, "cut", "a huge key too: the key is cut first, the value gets the rest"),
    (4, 10, 5_000_000, 200_000, 10, "cut", "kafka.client.message.max.bytes lowered: the letter follows it"),
    (5, 0, 0, 1_000_000, 0, None, "empty key and value stay empty"),
]


@pytest.mark.parametrize("case,key_size,value_size,limit,kept_key,kept_value,why", FITS,
                         ids=[f"case{c[0]}" for c in FITS])
def test_a_dead_letter_fits_the_producers_limit(case, key_size, value_size, limit, kept_key, kept_value, why):
    original = letter(b"k" * key_size, bytes(range(256)) * (value_size // 256) + b"v" * (value_size % 256))
    key, value, headers = original.fitted(limit)
    text = headers_to_dict(headers)
    assert record_size(key, value, headers) <= limit, f"case {case}: {why}"
    assert len(key) == kept_key, f"case {case}: {why}"
    assert original.value.startswith(value) and original.key.startswith(key), f"case {case}: a prefix, never other bytes"
    if kept_value is None:
        assert value == original.value and text["epochwatch.dlq.truncated"] == "false", f"case {case}: {why}"
    else:
        assert len(value) > limit - 4096 - len(key), f"case {case}: as much as fits, not much less"
        assert text["epochwatch.dlq.truncated"] == "true", f"case {case}: {why}"
    assert (text["epochwatch.source.key.size"], text["epochwatch.source.value.size"]) == (str(key_size), str(value_size))
    assert (text["epochwatch.dlq.reason"], text["epochwatch.source.offset"]) == ("bad_magic_byte", "41")


def test_a_null_key_or_value_stays_null_and_has_no_size():
    key, value, headers = letter(None, None).fitted()
    assert (key, value) == (None, None)
    text = headers_to_dict(headers)
    assert (text["epochwatch.source.key.size"], text["epochwatch.source.value.size"]) == ("", "")


def test_a_detail_quoting_hostile_bytes_is_capped():
    long = DeadLetter("events", 0, 1, None, None, b"x", "bad_avro", "d" * 50_000)
    assert len(headers_to_dict(long.fitted()[2])["epochwatch.dlq.detail"]) == 1000


def test_the_limit_is_the_producers_message_max_bytes():
    assert message_max_bytes({}) == 1_000_000  # librdkafka's default
    assert message_max_bytes({"message.max.bytes": "2000000"}) == 2_000_000
