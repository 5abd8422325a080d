"""``epochwatch topics``: the topics and ACLs a deployment needs, as Kafka's own commands, or the
topics created through the Admin API (``--create``). What and why: streaming.tools.topics."""

from __future__ import annotations

import shlex
import sys

from streaming import config
from streaming.tools import topics


def register(sub) -> None:
    p = sub.add_parser("topics", help="print the kafka-topics.sh / kafka-acls.sh commands of a deployment, "
                                      "or create the topics",
                       description="Print, as a shell script to review and run, the kafka-topics.sh commands that "
                                   "create the events, alerts (compacted) and dead-letter topics of the config, and "
                                   "the kafka-acls.sh commands that give the job and the collector what they need. "
                                   "--create creates the missing topics instead, with the job's own Kafka settings.")
    p.add_argument("--config", help="the job's YAML config file (topics, bootstrap servers, client settings)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--partitions", type=int, default=topics.DEFAULT_EVENTS_PARTITIONS,
                   help=f"partitions of the events topic (default {topics.DEFAULT_EVENTS_PARTITIONS}); the alerts "
                        f"and dead-letter topics get {topics.OUTPUT_PARTITIONS}")
    p.add_argument("--replication-factor", type=int, default=topics.DEFAULT_REPLICATION,
                   help=f"replicas per partition (default {topics.DEFAULT_REPLICATION}; 3 or more also sets "
                        "min.insync.replicas=2)")
    p.add_argument("--dlq-retention-ms", type=int, default=topics.DEFAULT_DLQ_RETENTION_MS,
                   help=f"how long dead letters are kept (default {topics.DEFAULT_DLQ_RETENTION_MS}: 14 days)")
    p.add_argument("--job-principal", help="the job's principal (default User:<kafka.client sasl.username>, "
                                           "else User:epochwatch)")
    p.add_argument("--collector-principal", help="the collector's principal (default User:<collect.client "
                                                 "sasl.username>, else User:epochwatch-collector)")
    p.add_argument("--command-config", metavar="FILE",
                   help="the admin client properties the printed commands pass to Kafka's tools (--command-config)")
    p.add_argument("--create", action="store_true",
                   help="create the missing topics now (Admin API, kafka.bootstrap.servers and kafka.client) and "
                        "check the existing ones; ACLs are only printed")
    p.set_defaults(func=run)


def run(args) -> int:
    from streaming.commands.run import parse_overrides

    settings = config.load(args.config, parse_overrides(args.set))
    try:
        plan = topics.topic_plan(settings, args.partitions, args.replication_factor, args.dlq_retention_ms)
    except ValueError as exc:
        raise config.ConfigError("--partitions / --replication-factor / --dlq-retention-ms", str(exc),
                                 "pass whole numbers above 0") from None
    if args.create:
        return create(settings, plan)
    job = args.job_principal or topics.default_principal(settings.kafka.client, "User:epochwatch")
    collector = args.collector_principal or topics.default_principal(settings.collect.client,
                                                                     "User:epochwatch-collector")
    print(script(settings, plan, topics.acl_plan(settings, job, collector), args.command_config))
    return 0


def script(settings: config.Settings, plan: list[topics.TopicSpec], acls: dict[str, list[topics.AclSpec]],
           command_config: str | None) -> str:
    bootstrap = settings.kafka.bootstrap_servers
    lines = ["#!/bin/sh",
             "# epochwatch topics and ACLs (epochwatch topics); review, then run with Kafka's bin/ on PATH.",
             "set -e", "", f"# Topics, on the cluster that carries the events ({bootstrap}):"]
    lines += [f"# {t.name}: {t.why}" for t in plan]
    lines += topics.kafka_topics_commands(plan, bootstrap, command_config)
    for servers, entries in acls.items():
        lines += ["", f"# ACLs on {servers} (where an authorizer is on):"]
        lines += [f"# {a.principal} {a.operation} {a.resource_type} {a.resource_name}: {a.why}"
                  for a in entries if a.why]
        lines += topics.kafka_acls_commands(entries, servers, command_config)
    lines += ["", "# Applications instrumented with the client hook write the events too, as the collector does:",
              "#   --allow-principal User:<application> --operation Write --operation Describe "
              f"--topic {shlex.quote(settings.kafka.events_topic)}"]
    return "\n".join(lines)


def create(settings: config.Settings, plan: list[topics.TopicSpec], timeout_s: float = 30.0) -> int:
    """Create the missing topics; report an existing topic whose settings differ from the plan's
    (exit 1), with the kafka-configs.sh command that fixes it."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    k = settings.kafka
    admin = AdminClient({**dict(k.client), "bootstrap.servers": k.bootstrap_servers})
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
        missing = [t for t in plan if t.name not in existing]
        futures = admin.create_topics([NewTopic(t.name, t.partitions, t.replication_factor, config=dict(t.configs))
                                       for t in missing]) if missing else {}
        for name, future in futures.items():
            try:
                future.result(timeout_s)
                print(f"{name}: created")
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                existing.add(name)  # created meanwhile, or not yet in the metadata we listed
        _wait_until_listed(admin, [t.name for t in plan], timeout_s)
        present = [t for t in plan if t.name in existing]
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t.name) for t in present]) \
            if present else {}
        actual = {resource.name: future.result(timeout_s) for resource, future in described.items()}
    except KafkaException as exc:
        print(f"epochwatch: creating topics on {k.bootstrap_servers} failed: {exc.args[0]}. Fix: check "
              "kafka.bootstrap.servers and kafka.client, and that this principal may create topics (CREATE on "
              "the cluster), or run the kafka-topics.sh commands of `epochwatch topics` as an administrator",
              file=sys.stderr)
        return 1
    differ = 0
    for t in present:
        wrong = {name: want for name, want in t.configs.items()
                 if actual[t.name].get(name) is None or actual[t.name][name].value != want}
        if not wrong:
            print(f"{t.name}: exists, settings as planned")
            continue
        differ += 1
        have = ", ".join(f"{n}={actual[t.name][n].value if n in actual[t.name] else '?'}" for n in sorted(wrong))
        alter = shlex.join(["kafka-configs.sh", "--bootstrap-server", k.bootstrap_servers, "--alter", "--entity-type",
                            "topics", "--entity-name", t.name, "--add-config",
                            ",".join(f"{n}={v}" for n, v in sorted(wrong.items()))])
        print(f"{t.name}: exists with {have}; wanted {', '.join(f'{n}={v}' for n, v in sorted(wrong.items()))}. "
              f"Fix: {alter}", file=sys.stderr)
    return 1 if differ else 0


def _wait_until_listed(admin, names: list[str], timeout_s: float) -> None:
    """A new topic reaches the brokers' metadata a moment after CreateTopics returns: describing it
    before then fails with UNKNOWN_TOPIC_OR_PART."""
    import time

    deadline = time.monotonic() + timeout_s
    while not set(names) <= set(admin.list_topics(timeout=timeout_s).topics):
        if time.monotonic() > deadline:
            missing = sorted(set(names) - set(admin.list_topics(timeout=timeout_s).topics))
            raise RuntimeError(f"topics {missing} not listed {timeout_s:.0f} s after creating them")
        time.sleep(0.1)
