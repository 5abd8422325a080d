"""``epochwatch collect``: watch a real Kafka cluster from outside and produce the contract's
events to the events topic (streaming/collect/, docs/events.md "Deriving events from a real
cluster")."""

from __future__ import annotations

import signal
import sys

from streaming import config as config_module
from streaming.commands.run import parse_overrides


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "collect", help="watch a Kafka cluster (Admin API, Metadata probes, JMX exporters) and produce events",
        description="Watch a KRaft Kafka cluster from outside: DescribeQuorum, DescribeCluster with fenced brokers, a "
                    "Metadata request to every broker in turn, and the brokers' and controllers' Prometheus JMX "
                    "exporters (collect.exporter.urls). Produces broker_heartbeat, metadata_update, metadata_response "
                    "and metadata_request_failed events to kafka.topics.events, and with collect.offset.commits: on every "
                    "group's commits from __consumer_offsets as offset_commit events; prints one status line per round.")
    p.add_argument("--config", help="YAML config file (section 'collect:', see deploy/config/epochwatch.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set collect.exporter.urls=http://127.0.0.1:7071/metrics")
    p.add_argument("--rounds", type=int, default=None, help="stop after this many rounds (default: run until stopped)")
    p.add_argument("--quiet", action="store_true", help="no status line per round")
    p.add_argument("--events-out", metavar="FILE",
                   help="also append every event produced to FILE as JSON Lines (what the job was told)")
    p.set_defaults(func=run)


def run(args) -> int:
    from streaming.collect.collector import Collector
    from streaming.collect.metrics import CollectorMetrics
    from streaming.collect.publish import EventPublisher

    settings = config_module.load(args.config, parse_overrides(args.set))
    k = settings.kafka
    copy = open(args.events_out, "a", encoding="utf-8", buffering=1) if args.events_out else None
    publisher = EventPublisher(k.bootstrap_servers, k.events_topic, encoding=k.encoding, client=k.client, copy_to=copy)
    metrics = CollectorMetrics()
    if settings.collect.metrics_port:
        metrics.serve(settings.collect.metrics_port, settings.collect.metrics_address)
    collector = Collector(settings, publisher, metrics=metrics)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        collector.run(stop=lambda: bool(stopping), status=None if args.quiet else sys.stderr, rounds=args.rounds)
    except KeyboardInterrupt:
        pass
    finally:
        collector.close()
        left = publisher.close()
        if left:
            print(f"epochwatch collect: {left} events not acknowledged at exit", file=sys.stderr)
    return 0
