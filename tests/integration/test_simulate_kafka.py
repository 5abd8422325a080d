"""Simulated events written to the real broker (Apache Kafka) and read back with a plain consumer:
the same events, under the contract's keys, in per-key order, in both value formats.

Read back with assign() + explicit offsets and stop at the count we produced."""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition

from streaming.commands import simulate as simulate_command
from streaming.tools.simulate import ClusterShape, run_scenario, steady_state
from streaming.tools.simulate.writers import KafkaEventWriter, event_key
from udfs import avro_codec

pytestmark = pytest.mark.integration


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records, deadline = [], time.monotonic() + timeout_s
    try:
        while len(records) < expected:
            assert time.monotonic() < deadline, f"read {len(records)} of {expected} records in {timeout_s}s"
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                assert msg.error() is None, msg.error()
                records.append(msg)
        extra = consumer.consume(num_messages=10, timeout=0.5)  # nothing beyond what we produced
        assert not [m for m in extra if m.error() is None]
    finally:
        consumer.close()
    return records


def assert_same_events(records, produced: list[dict], decode) -> None:
    by_key = defaultdict(list)
    for e in produced:
        by_key[event_key(e)].append(e)
    seen = defaultdict(list)
    partition_of_key = {}
    for msg in records:
        key = msg.key().decode()
        event = decode(msg)
        assert event_key(event) == key
        assert partition_of_key.setdefault(key, msg.partition()) == msg.partition(), "one key, one partition"
        seen[key].append(event)
    assert dict(seen) == dict(by_key)  # same events, and per key in the produced order


def test_a_scenario_round_trips_through_the_broker_in_the_wire_format(broker, topic_factory):
    topic = topic_factory(partitions=3, prefix="sim")
    produced = run_scenario("partitioned_broker").events
    with KafkaEventWriter(broker.bootstrap_servers, topic, progress=None) as writer:
        stats = writer.write(produced)
    assert stats.events == len(produced)
    records = read_back(broker.bootstrap_servers, topic, 3, len(produced))
    assert_same_events(records, produced, lambda m: avro_codec.decode(m.value()))
    assert {m.partition() for m in records} == {0, 1, 2}


def test_schemaless_values_carry_the_event_type_header(broker, topic_factory):
    topic = topic_factory(partitions=2, prefix="sim-schemaless")
    produced = run_scenario("proxy_rebootstrap_required").events
    with KafkaEventWriter(broker.bootstrap_servers, topic, encoding="schemaless", progress=None) as writer:
        writer.write(produced)

    def decode(msg):
        headers = dict(msg.headers())
        return avro_codec.decode_schemaless(msg.value(), headers[avro_codec.EVENT_TYPE_HEADER].decode())

    assert_same_events(read_back(broker.bootstrap_servers, topic, 2, len(produced)), produced, decode)


def test_the_cli_loads_a_steady_state_into_a_topic(broker, topic_factory, capsys):
    topic = topic_factory(partitions=4, prefix="sim-cli")
    argv = ["simulate", "--scenario", "steady", "--duration", "5m", "--brokers", "10", "--clients", "2000",
            "--groups", "200", "--seed", "7", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic]
    parser = argparse.ArgumentParser(prog="epochwatch")
    simulate_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    expected = list(steady_state(duration_ms=300_000, seed=7,
                                 shape=ClusterShape(brokers=10, clients=2000, groups=200)))
    assert len(expected) > 50_000
    assert f"{len(expected):,} events" in capsys.readouterr().err
    records = read_back(broker.bootstrap_servers, topic, 4, len(expected))
    assert_same_events(records, expected, lambda m: avro_codec.decode(m.value()))
