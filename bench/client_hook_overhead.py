"""What the client hook (streaming/collect/client_hook.py) costs a busy application, and how many
events a client at rest sends.

Against a real Kafka (1 controller, 1 broker), each run a process of its own, plain and hooked
alternating: a producer sends --messages records of 100 bytes and flushes; a consumer reads them
back (assign, no group). CPU is the worker process's user + system time, the hook's thread and
librdkafka's threads included. Then a hooked consumer idles for --rest-seconds: events per second
at rest. Prints the figures side by side.

    .venv/bin/python bench/client_hook_overhead.py --messages 300000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streaming.tools.embedded import create_topics  # noqa: E402
from streaming.tools.kafka_cluster import KafkaCluster  # noqa: E402

TOPIC, EVENTS = "hook-bench", "hook-bench-events"


def worker(args) -> None:
    """One measured run, in its own process: prints its CPU seconds and the hook's counts."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from streaming.collect.client_hook import ClientHook

    hook = ClientHook(args.bootstrap, "bench", events_topic=EVENTS) if args.hooked else None
    conf = (lambda c: hook.instrument(c)) if hook else dict
    started = time.process_time()
    if args.worker == "produce":
        producer = Producer(conf({"bootstrap.servers": args.bootstrap, "linger.ms": 5}))
        payload = b"x" * 100
        for i in range(args.messages):
            while True:
                try:
                    producer.produce(TOPIC, payload)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
    elif args.worker == "consume":
        consumer = Consumer(conf({"bootstrap.servers": args.bootstrap, "group.id": f"bench-{os.getpid()}",
                                  "enable.auto.commit": False}))
        parts = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in parts])
        read = 0
        while read < args.messages:
            read += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
        consumer.close()
    else:   # rest: a hooked consumer with nothing to do
        consumer = Consumer(conf({"bootstrap.servers": args.bootstrap, "group.id": f"bench-rest-{os.getpid()}"}))
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + args.rest_seconds
        while time.monotonic() < deadline:
            consumer.poll(0.5)
        consumer.close()
    cpu = time.process_time() - started
    published = dict(hook.published_by_type) if hook else {}
    if hook:
        hook.close()
    print(json.dumps({"cpu_s": cpu, "published": published, "dropped": hook.dropped if hook else 0}))


def run_worker(bootstrap: str, kind: str, hooked: bool, messages: int, rest_seconds: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", kind, "--bootstrap", bootstrap,
                          "--messages", str(messages), "--rest-seconds", str(rest_seconds),
                          *(["--hooked"] if hooked else [])],
                         capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rest-seconds", type=float, default=60.0)
    p.add_argument("--worker", choices=["produce", "consume", "rest"], help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", help=argparse.SUPPRESS)
    p.add_argument("--hooked", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    with tempfile.TemporaryDirectory() as work, KafkaCluster(Path(work), controllers=1, brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topics(bootstrap, {TOPIC: 6, EVENTS: 1})
        cpu: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.repeat):
            for kind in ("produce", "consume"):
                for hooked in (False, True):   # alternating: a drift of the machine hits both
                    cpu.setdefault((kind, hooked), []).append(
                        run_worker(bootstrap, kind, hooked, args.messages, 0)["cpu_s"])
        rest = run_worker(bootstrap, "rest", True, 0, args.rest_seconds)

    print(f"client hook overhead: {args.messages} records of 100 B, {args.repeat} runs each, median CPU s "
          f"(min-max), Kafka 4.1.2 on loopback")
    print(f"{'client':<10}{'plain':>22}{'hooked':>22}{'overhead':>10}")
    for kind in ("produce", "consume"):
        plain, hooked = cpu[(kind, False)], cpu[(kind, True)]
        overhead = statistics.median(hooked) / statistics.median(plain) - 1
        print(f"{kind:<10}{_fmt(plain):>22}{_fmt(hooked):>22}{overhead:>+10.1%}")
    sent = sum(rest["published"].values())
    print(f"at rest: a hooked consumer idle for {args.rest_seconds:.0f} s sent {sent} events "
          f"({sent / args.rest_seconds:.3f}/s: {rest['published']}), dropped {rest['dropped']}")


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()
