"""epochwatch reset-cluster --config FILE --cluster-id ID: make the running job forget a cluster.

The job's state lives in its checkpoint, which only the job itself may write (Spark has no API
to change a running query's state), so the command does not touch it: it writes a
``cluster_reset`` control record to the events topic, and each state key of the cluster forgets
what it knew when the job reaches that record (streaming.engine.key_engine.KeyEngine._forget), in order
with the cluster's other events. Its open alerts resolve then.
"""

from __future__ import annotations

import sys
import time
import uuid

from streaming import config, events


def register(sub) -> None:
    p = sub.add_parser("reset-cluster", help="make the running job forget everything it knows about a cluster",
                       description="Write a cluster_reset record to the events topic: when the job reaches it, "
                                   "the cluster's state is dropped and its open alerts resolve; events after it "
                                   "start afresh (docs/events.md, cluster_reset).")
    p.add_argument("--config", help="the job's YAML config file (its events topic and Kafka settings)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--cluster-id", required=True, help="the cluster id, as in the events' cluster_id")
    p.add_argument("--at", help="when the reset takes effect (epoch ms or ISO-8601; default: now). The job "
                                "forgets what came before this event time")
    p.set_defaults(func=run)


def run(args) -> int:
    from streaming.commands.run import parse_overrides

    settings = config.load(args.config, parse_overrides(args.set))
    if not args.cluster_id:
        raise config.ConfigError("--cluster-id", "is empty", "pass the cluster id the events carry")
    at = int(time.time() * 1000) if args.at is None else _millis(args.at)
    try:
        event = events.normalize({"event_type": events.CLUSTER_RESET, "cluster_id": args.cluster_id,
                                  "event_id": f"reset-{uuid.uuid4().hex[:12]}", "event_time": at})
    except events.EventError as exc:
        raise config.ConfigError("--cluster-id", str(exc), "pass the cluster id the events carry") from None
    from udfs.kafka_sink import DeliveryError, EventProducer
    from udfs.registry_catalog import RegistryError

    k = settings.kafka
    producer = EventProducer(k.bootstrap_servers, k.client, catalog=k.registry_catalog(k.events_topic),
                             encoding="avro" if k.encoding == "confluent" else "avro-schemaless")
    try:
        producer.send([event], k.events_topic)
        producer.flush()
    except (DeliveryError, RegistryError) as exc:
        print(f"epochwatch: the reset record was not written to {k.events_topic}: {exc}", file=sys.stderr)
        return 1
    print(f"cluster_reset {event['event_id']} for cluster {args.cluster_id!r} written to {k.events_topic} "
          f"(event_time {at}): the job forgets the cluster when it reaches it, and its open alerts resolve then")
    return 0


def _millis(text: str) -> int:
    try:
        return events.to_millis(int(text) if text.strip().lstrip("-").isdigit() else text, "--at")
    except events.EventError as exc:
        raise config.ConfigError("--at", str(exc), "give epoch milliseconds or ISO-8601, e.g. 2026-01-01T00:00:00Z") from None
