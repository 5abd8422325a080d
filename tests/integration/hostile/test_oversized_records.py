"""Oversized records and fields never stop the job (issue #22): a record of random bytes as large
as a producer may write is dead-lettered with as much of it as fits, and a valid event whose ids
are hundreds of KB is a dead letter of its own reason; the events after both are processed."""

from __future__ import annotations

import random

import pytest

from streaming.sinks.memory import MemorySink
from streaming.tools.demo import read_topic
from tests.integration.hostile.support import job_settings, produce_raw, run_to_end, write_events
from tests.support.builders import hb, response
from udfs.dead_letters import headers_to_dict

pytestmark = [pytest.mark.integration, pytest.mark.spark]
T0 = 1_767_225_600_000  # 2026-01-01
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # the dead-letter producer's limit (librdkafka's default)


def _events(cluster: str, brokers: list[int], start: int, count: int) -> list[dict]:
    out = [hb(start + i * 500, b) for i in range(count) for b in brokers]
    for ev in out:
        ev["cluster_id"] = cluster
    return out


def run_to_the_one_dead_letter(spark, settings, broker):
    """The job run over the topic to its end, without failing: what reached its sinks, and the one
    dead letter it wrote with its headers."""
    memory = MemorySink()
    query = run_to_end(spark, settings, [memory])
    assert query.exception() is None, query.exception()
    [letter] = read_topic(broker.bootstrap_servers, settings.kafka.dlq_topic, 1)
    return memory, letter, headers_to_dict(letter.headers())


def test_a_megabyte_of_random_bytes_is_dead_lettered_truncated_and_the_job_goes_on(broker, spark, tmp_path):
    """Reported: such a record (its producer allowed 2 MB) stopped `epochwatch run` with
    MSG_SIZE_TOO_LARGE while it produced the dead letter (the same bytes plus headers), and the
    replayed batch failed again on every restart. Broker 2 is heard from only after it."""
    settings = job_settings(broker.bootstrap_servers, tmp_path)
    k = settings.kafka
    big = b"\xff" + random.Random(22).randbytes(1_040_000 - 1)  # 0xff: bad_magic_byte
    write_events(broker.bootstrap_servers, k.events_topic, _events("big-record", [1], T0, 4))
    produce_raw(broker.bootstrap_servers, k.events_topic, [(b"big-record/broker-9", big)],
                **{"message.max.bytes": 2_000_000})
    # ten of each: the last 2 s of them wait for a watermark (rules.event.allowed.lateness.ms)
    write_events(broker.bootstrap_servers, k.events_topic, _events("big-record", [1, 2], T0 + 2_000, 10))

    memory, letter, headers = run_to_the_one_dead_letter(spark, settings, broker)
    assert headers["epochwatch.dlq.reason"] == "bad_magic_byte"
    assert (headers["epochwatch.source.topic"], headers["epochwatch.source.offset"]) == (k.events_topic, "4")
    assert headers["epochwatch.source.value.size"] == str(len(big))
    assert headers["epochwatch.dlq.truncated"] == "true"
    assert letter.key() == b"big-record/broker-9"
    # as much as fits: the value is the record's start, only the headers' room short of the limit
    assert big.startswith(letter.value())
    assert LIBRDKAFKA_MESSAGE_MAX_BYTES - 4096 < len(letter.value()) < LIBRDKAFKA_MESSAGE_MAX_BYTES
    assert {s["broker_id"] for s in memory.all("broker_status")} == {1, 2}


def test_an_event_with_ids_of_hundreds_of_kb_is_a_dead_letter_of_its_own(broker, spark, tmp_path):
    """A valid Avro event whose client id is 300 KB: were it applied, every alert and state row of
    that client would carry the 300 KB (and the alert record could outgrow the producer's limit
    too). It is an ``id_too_long`` dead letter; the same event with a 255-byte id is applied."""
    settings = job_settings(broker.bootstrap_servers, tmp_path)
    k = settings.kafka
    hostile = response(T0 + 1_000, "c" * 300_000, 1, 10)
    longest = response(T0 + 1_000, "c" * 255, 1, 10)
    for ev in (hostile, longest):
        ev["cluster_id"] = "long-ids"
    write_events(broker.bootstrap_servers, k.events_topic,
                 [*_events("long-ids", [1], T0, 2), hostile, longest, *_events("long-ids", [1], T0 + 2_000, 2)],
                 **{"message.max.bytes": 2_000_000})

    memory, letter, headers = run_to_the_one_dead_letter(spark, settings, broker)
    assert headers["epochwatch.dlq.reason"] == "id_too_long"
    assert "client_id" in headers["epochwatch.dlq.detail"] and "255" in headers["epochwatch.dlq.detail"]
    assert headers["epochwatch.source.offset"] == "2"
    assert len(headers["epochwatch.dlq.detail"]) < 1000
    assert [d["reason"] for d in memory.all("dead_letters")] == ["id_too_long"]
