"""Decoding in the epochwatch-kafka source: every event type, both wire formats, and a flood of
malformed records that must all reach the dead-letter topic while every good record flows."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from streaming import events
from tests.support.kafka_io import BatchCollector, consume_all, kafka_stream, produce, run_available_now, sample_events
from udfs import avro_codec, event_columns
from udfs.dead_letters import SOURCE_HEADERS, headers_to_dict, publish_dead_letter_rows
from udfs.kafka_sink import event_key

pytestmark = pytest.mark.spark

EVENT_COLUMNS = tuple(f.name for f in event_columns.event_fields())


def as_event(row: dict) -> dict:
    """A decoded row back in the event dict form (ms timestamps, only the type's own fields)."""
    event = {"event_type": row["event_type"]}
    for name in events.field_names(row["event_type"]):
        value = row[name]
        event[name] = int(value.timestamp() * 1000) if name == "event_time" else value
    return event


@pytest.mark.parametrize("decode", ["avro", "avro-schemaless"])
def test_every_event_type_decodes_to_its_columns(spark, bootstrap, topic_factory, decode):
    topic = topic_factory(partitions=2)
    produced_events = sample_events(per_type=3)
    if decode == "avro":
        records = [(event_key(e).encode(), avro_codec.encode(e)) for e in produced_events]
    else:
        records = [(event_key(e).encode(), avro_codec.encode_schemaless(e),
                    [(avro_codec.EVENT_TYPE_HEADER, e["event_type"].encode())]) for e in produced_events]
    produced = produce(bootstrap, topic, records, partitions=2)
    stream = kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", decode=decode)
    assert tuple(stream.columns) == event_columns.decoded_column_names()
    collected, _ = run_available_now(stream)
    rows = [dict(zip(stream.columns, r)) for r in collected.rows]

    assert sorted(events.INPUT_EVENT_TYPES) == sorted({r["event_type"] for r in rows})
    by_id = {r["event_id"]: r for r in rows}
    assert len(by_id) == len(rows) == len(produced_events)
    for event in produced_events:
        row = by_id[event["event_id"]]
        assert as_event(row) == event
        foreign = set(EVENT_COLUMNS) - set(events.field_names(event["event_type"]))
        assert all(row[name] is None for name in foreign), event["event_type"]
        assert row["dlq_reason"] is None and row["raw_value"] is None
    where = {(p.partition, p.offset): p.value for p in produced}
    assert all(where[(r["kafka_partition"], r["kafka_offset"])] is not None and r["kafka_topic"] == topic
               and r["kafka_timestamp"] is not None for r in rows)


ALERT = events.normalize({"event_type": "alert", "event_id": "f:firing", "cluster_id": "c", "event_time": 1,
                          "alertname": "ClusterSilent", "severity": "critical", "status": "firing", "labels": {},
                          "annotations": {}, "starts_at": 1, "fingerprint": "f"})


def malformed(kind: str, good: bytes, rng: random.Random) -> bytes | None:
    return {
        "bad_magic_byte": b"\x07" + good[1:],
        "unknown_schema_id": b"\x00" + rng.randrange(100, 10**6).to_bytes(4, "big") + good[5:],
        "truncated_avro": good[:rng.randrange(6, len(good) - 1)],
        "trailing_bytes": good + bytes(rng.randrange(1, 5)),
        "unknown_event_type": avro_codec.encode(ALERT),
        "null_value": None,
        "truncated_header": good[:rng.randrange(0, 5)],
        "bad_avro": good.replace(b"flood-", b"\xff\xfe\xfd\xfc\xfb\xfa"),  # invalid UTF-8 in event_id
    }[kind]


KINDS = ("bad_magic_byte", "unknown_schema_id", "truncated_avro", "trailing_bytes", "unknown_event_type",
         "null_value", "truncated_header", "bad_avro")


def flood(per_kind: int = 250, seed: int = 7):
    """Good events and malformed records of every kind, shuffled together: (records, good events,
    bad index -> reason)."""
    rng = random.Random(seed)
    good_events = []
    for event in sample_events(per_type=(per_kind * len(KINDS)) // 7 + 1):
        event = dict(event, event_id=f"flood-{event['event_id']}")
        good_events.append(event)
    template = avro_codec.encode(good_events[0])
    items = [("good", e) for e in good_events] + [(kind, None) for kind in KINDS for _ in range(per_kind)]
    rng.shuffle(items)
    records, reasons = [], {}
    for i, (kind, event) in enumerate(items):
        key = f"key-{i}".encode()
        if kind == "good":
            records.append((key, avro_codec.encode(event)))
        else:
            records.append((key, malformed(kind, template, rng)))
            reasons[key] = kind
    return records, good_events, reasons


def test_malformed_flood_as_rows_then_published_by_the_job(spark, bootstrap, topic_factory):
    topic, dlq = topic_factory(partitions=4), topic_factory(partitions=1, prefix="dlq")
    records, good_events, reasons = flood()
    produced = {p.key: p for p in produce(bootstrap, topic, records, partitions=4)}
    published: Counter = Counter()
    columns = ("event_id", "event_type", "dlq_reason", "dlq_detail", "kafka_partition", "kafka_offset", "raw_key",
               "raw_value")

    def publish(df, batch_id):  # what the job does in foreachBatch
        published.update(publish_dead_letter_rows(df.where("dlq_reason IS NOT NULL").toLocalIterator(),
                                                  bootstrap, dlq))

    stream = kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", decode="avro")
    collector, _ = run_available_now(stream, collector=BatchCollector(columns, also=publish))
    rows = [dict(zip(columns, r)) for r in collector.rows]

    good_rows = [r for r in rows if r["event_type"] is not None]
    assert sorted(r["event_id"] for r in good_rows) == sorted(e["event_id"] for e in good_events)
    bad_rows = [r for r in rows if r["event_type"] is None]
    assert Counter(r["dlq_reason"] for r in bad_rows) == Counter(reasons.values())
    for row in bad_rows:
        key = bytes(row["raw_key"])
        assert row["dlq_reason"] == reasons[key] and row["dlq_detail"]
        assert (row["kafka_partition"], row["kafka_offset"]) == (produced[key].partition, produced[key].offset)
        assert (None if row["raw_value"] is None else bytes(row["raw_value"])) == produced[key].value

    assert published == Counter(reasons.values()), "the job-side publisher returns counts by reason"
    check_dead_letter_topic(bootstrap, dlq, topic, produced, reasons)


def test_malformed_flood_produced_to_the_dead_letter_topic_by_the_source(spark, bootstrap, topic_factory):
    topic, dlq = topic_factory(partitions=4), topic_factory(partitions=1, prefix="dlq")
    records, good_events, reasons = flood(per_kind=200, seed=11)
    produced = {p.key: p for p in produce(bootstrap, topic, records, partitions=4)}
    stream = kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", decode="avro",
                          deadLetterTopic=dlq)
    collected, _ = run_available_now(stream.select("event_id", "event_type", "dlq_reason"))
    assert all(r[1] is not None and r[2] is None for r in collected.rows), "dead letters are not rows here"
    assert sorted(r[0] for r in collected.rows) == sorted(e["event_id"] for e in good_events)
    check_dead_letter_topic(bootstrap, dlq, topic, produced, reasons)


def check_dead_letter_topic(bootstrap, dlq, source_topic, produced, reasons) -> None:
    letters = consume_all(bootstrap, dlq, expected=len(reasons))
    assert len(letters) == len(reasons), "every malformed record once in the dead-letter topic"
    for letter in letters:
        headers = headers_to_dict(letter.headers())
        original = produced[letter.key()]
        assert headers["epochwatch.dlq.reason"] == reasons[letter.key()]
        assert headers["epochwatch.dlq.detail"]
        assert [headers[h] for h in SOURCE_HEADERS[:3]] == [source_topic, str(original.partition),
                                                             str(original.offset)]
        assert int(headers["epochwatch.source.timestamp"]) > 0
        assert letter.value() == original.value


def _events_by_key(rows: list[dict]) -> dict:
    """Every pack's events per state key, as (kafka partition, offset, event fields) in pack
    order, and the records the clock rows count."""
    from streaming.engine.keys import CLOCK
    from streaming.spark.packs import unpack

    by_key: dict = {}
    records = 0
    for row in rows:
        if row["kind"] == CLOCK:
            records += row["events"]
            continue
        events = unpack(bytes(row["payload"]))
        assert len(events) == row["events"]
        # a brokers pack's served epochs carry no Kafka coordinates (routing.SERVED_EPOCH_FIELDS)
        by_key.setdefault((row["cluster_id"], row["kind"], row["shard"]), []).extend(
            sorted((e.get("kafka_partition", -1), e.get("kafka_offset", -1),
                    tuple(sorted((k, repr(v)) for k, v in e.items()))) for e in events))
    return {k: sorted(v) for k, v in by_key.items()}, records


def test_packs_from_the_source_are_the_packs_of_its_decoded_rows(spark, bootstrap, topic_factory):
    """Why: the job reads packs straight from the source (output=packs) instead of packing decoded
    rows in a second step; every state key must get exactly the same events, dead letters
    included, and the clock rows must count every record read."""
    from streaming.config import RuleSettings
    from streaming.spark.packs import PACK_SCHEMA
    from streaming.spark.pipeline import EVENT_TIME, pack_events

    topic = topic_factory(partitions=4)
    records, good_events, reasons = flood()
    produce(bootstrap, topic, records, partitions=4)
    rules = RuleSettings()
    common = dict(subscribe=topic, startingOffsets="earliest", decode="avro")
    # both judge event times by the batches' own times (the events are of a fixed date)
    packed = kafka_stream(spark, bootstrap, output="packs", packs__clientShards=rules.client_shards,
                          packs__maxFutureMs=rules.max_future_ms, packs__clock="events", **common)
    assert packed.schema == PACK_SCHEMA
    from_source, _ = run_available_now(packed)
    from_rows, _ = run_available_now(pack_events(kafka_stream(spark, bootstrap, **common), rules, EVENT_TIME))
    source_keys, source_records = _events_by_key([dict(zip(packed.columns, r)) for r in from_source.rows])
    row_keys, row_records = _events_by_key([dict(zip(packed.columns, r)) for r in from_rows.rows])
    assert source_keys == row_keys
    assert source_records == row_records == len(records)
    assert sum(len(v) for k, v in source_keys.items() if k[1] == "dead_letter") == len(reasons)
