"""Kafka source throughput: the epochwatch-kafka Spark source (decode=avro) against the floor a
user would write by hand (one Python process: confluent-kafka consume in batches + fastavro decode
of every value), side by side on the same topic of the same embedded broker.

    .venv/bin/python bench/source_throughput.py               # 2M events, 8 partitions
    .venv/bin/python bench/source_throughput.py --events 200000   # smoke run

Events come from the cluster simulator (streaming.tools.simulate, its steady state: the realistic mix of
event types), encoded with udfs.avro_codec.encode and keyed as in docs/CONTRACTS.md. Prints
events/s, MB/s (key + value bytes) and the ratio Spark / hand-written. Not a test.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streaming.tools.embedded import EmbeddedBroker, create_topics
from streaming.tools.simulate import ClusterShape, steady_state
from udfs import avro_codec
from udfs.kafka_sink import event_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.host, run as a script
from bench.host import cpu_seconds_by_role, cpu_used  # noqa: E402

TOPIC = "bench.events"


@dataclass
class Result:
    name: str
    events: int
    seconds: float
    payload_bytes: int
    cpu: dict[str, float]

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6

    @property
    def cpu_us_per_event(self) -> float:
        return sum(self.cpu.values()) / self.events * 1e6

    @property
    def cpu_text(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in sorted(self.cpu.items(), key=lambda kv: -kv[1]))


def load(bootstrap: str, count: int, partitions: int, topic: str = TOPIC) -> int:
    """Produce ``count`` simulated events; each partition ends with one record flushed on its own
    (tansu reports the end of a partition as the start of its last batch + 1)."""
    from confluent_kafka import Producer

    create_topics(bootstrap, {topic: partitions})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    shape = ClusterShape(brokers=12, clients=3000, groups=60)
    source = steady_state(duration_ms=10 * 24 * 3600 * 1000, shape=shape, seed=7)
    payload = 0
    body, tail = count - partitions, partitions
    for event in itertools.islice(source, body):
        key, value = event_key(event).encode(), avro_codec.encode(event)
        payload += len(key) + len(value)
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    for partition, event in zip(range(tail), source):
        key, value = event_key(event).encode(), avro_codec.encode(event)
        payload += len(key) + len(value)
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.flush(30)
    return payload


def hand_written(bootstrap: str, count: int, partitions: int, batch: int, tuned: bool = False) -> tuple[float, int]:
    """consume() in batches of ``batch`` and decode every value: the floor a user would write;
    ``tuned``: with the same fetch settings as the Spark source's readers."""
    from confluent_kafka import Consumer, TopicPartition

    from udfs.partition_reader import _THROUGHPUT_DEFAULTS

    fetch = dict(_THROUGHPUT_DEFAULTS) if tuned else {"fetch.wait.max.ms": 100}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hand-written",
                         "enable.auto.commit": False, **fetch})
    catalog = avro_codec.builtin_catalog()
    decode = avro_codec.decode
    started = time.perf_counter()
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    seen = decoded = 0
    while seen < count:
        for message in consumer.consume(batch, 1.0):
            if message.error() is None:
                decode(message.value(), catalog)
                decoded += 1
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed, decoded


def spark_source(spark, bootstrap: str, topic: str, name: str, decode: str = "avro") -> tuple[float, int]:
    """availableNow query from earliest into the no-op sink; seconds and rows read."""
    query = (spark.readStream.format("epochwatch-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("decode", decode).load()
             .writeStream.format("noop").queryName(name).trigger(availableNow=True))
    started = time.perf_counter()
    running = query.start()
    running.awaitTermination()
    elapsed = time.perf_counter() - started
    if running.exception() is not None:
        raise running.exception()
    return elapsed, sum(p["numInputRows"] for p in running.recentProgress)


def warm_up(spark, bootstrap: str) -> float:
    """Start Spark's Python workers on a small topic (batch 0 costs seconds, whatever the size)."""
    load(bootstrap, 2000, 2, topic="bench.warmup")
    return spark_source(spark, bootstrap, "bench.warmup", "warmup")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events pre-loaded (default 2,000,000)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consume-batch", type=int, default=10_000, help="hand-written consume() batch size")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        t = time.perf_counter()
        payload = load(bootstrap, args.events, args.partitions)
        print(f"loaded {args.events:,} events ({payload / 1e6:.1f} MB key+value) into {args.partitions} "
              f"partitions in {time.perf_counter() - t:.1f}s", flush=True)

        results = []
        for tuned, label in ((False, "hand-written consume + fastavro decode (1 process)"),
                             (True, "same, with the Spark source's fetch settings")):
            before = cpu_seconds_by_role()
            seconds, decoded = hand_written(bootstrap, args.events, args.partitions, args.consume_batch, tuned)
            assert decoded == args.events, f"hand-written read {decoded} of {args.events}"
            results.append(Result(label, decoded, seconds, payload, cpu_used(before, cpu_seconds_by_role())))

        from streaming.spark.session import build_session

        spark = build_session("bench-source-throughput", master=args.master)
        warm = warm_up(spark, bootstrap)
        for decode, label in (("avro", "decode=avro"), ("none", "decode=none (no decoding: Spark's floor)")):
            before = cpu_seconds_by_role()
            seconds, rows = spark_source(spark, bootstrap, TOPIC, f"bench_{decode}", decode)
            assert rows == args.events, f"Spark source read {rows} of {args.events}"
            results.append(Result(f"epochwatch-kafka {label} -> noop, {args.master}", rows, seconds, payload,
                                  cpu_used(before, cpu_seconds_by_role())))
        spark.stop()

    raw, source = max(results[:2], key=lambda r: r.events_per_s), results[2]
    print(f"\ncores: {os.cpu_count()}, python {sys.version.split()[0]}, Spark warm-up query {warm:.1f}s (excluded)")
    print(f"| {'reader':62} | {'events':>9} | {'seconds':>7} | {'events/s':>8} | {'MB/s':>4} | CPU µs/event | "
          "CPU seconds by process |")
    print(f"|{'-' * 64}|{'-' * 10}:|{'-' * 8}:|{'-' * 9}:|{'-' * 5}:|-------------:|------------------------|")
    for r in results:
        print(f"| {r.name:62} | {r.events:>9,} | {r.seconds:>7.2f} | {r.events_per_s:>8,.0f} | {r.mb_per_s:>4.1f} "
              f"| {r.cpu_us_per_event:>12.1f} | {r.cpu_text} |")
    print(f"\nratio Spark source (decode=avro) / the faster hand-written reader: "
          f"{source.events_per_s / raw.events_per_s:.2f}x (target >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
