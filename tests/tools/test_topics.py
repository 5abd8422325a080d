"""streaming.tools.topics: the topics and ACLs of a deployment, and how they are spelt for Kafka's tools.
tests/integration/kafka/test_topics_command.py runs the printed commands with Kafka's own tools."""

from __future__ import annotations

import shlex

import pytest

from streaming import config
from streaming.commands import main
from streaming.tools.topics import (
    AclSpec,
    acl_plan,
    default_principal,
    kafka_acls_commands,
    kafka_topics_commands,
    topic_plan,
)


def settings(**overrides) -> config.Settings:
    return config.load(None, overrides)


def by_name(plan):
    return {t.name: t for t in plan}


def test_alerts_are_compacted_dead_letters_kept_two_weeks():
    plan = by_name(topic_plan(settings()))
    assert list(plan) == ["epochwatch.events", "epochwatch.alerts", "epochwatch.dlq"]
    assert plan["epochwatch.alerts"].configs["cleanup.policy"] == "compact", "latest record per incident key"
    assert plan["epochwatch.dlq"].configs["retention.ms"] == str(14 * 24 * 3600 * 1000)
    assert plan["epochwatch.dlq"].configs["cleanup.policy"] == "delete"
    assert "cleanup.policy" not in plan["epochwatch.events"].configs, "the broker's default (delete)"
    assert plan["epochwatch.events"].partitions == 12 and plan["epochwatch.alerts"].partitions == 3


@pytest.mark.parametrize("replicas, min_isr", [(3, "2"), (5, "2"), (2, None), (1, None)])
def test_min_insync_replicas_two_only_where_three_replicas_allow_one_to_fail(replicas, min_isr):
    """acks=all with min.insync.replicas=2 survives one replica down; with fewer than 3 replicas
    it would stop every write as soon as one is down."""
    for topic in topic_plan(settings(), replication_factor=replicas):
        assert topic.configs.get("min.insync.replicas") == min_isr and topic.replication_factor == replicas


def test_topic_names_and_partitions_follow_the_config_and_options():
    plan = topic_plan(settings(**{"kafka.topics.events": "t.in", "kafka.topics.alerts": "t.out",
                                  "kafka.topics.dlq": "t.bad"}), events_partitions=48, dlq_retention_ms=1000)
    assert [(t.name, t.partitions) for t in plan] == [("t.in", 48), ("t.out", 3), ("t.bad", 3)]
    assert plan[2].configs["retention.ms"] == "1000"
    with pytest.raises(ValueError):
        topic_plan(settings(), events_partitions=0)


def ops(acls, principal, kind, name):
    return {a.operation for a in acls if (a.principal, a.resource_type, a.resource_name) == (principal, kind, name)}


def test_acls_the_job_and_the_collector_need_on_one_cluster():
    [(servers, acls)] = acl_plan(settings(), "User:job", "User:col").items()
    assert servers == "127.0.0.1:9092"
    assert ops(acls, "User:job", "TOPIC", "epochwatch.events") == {"READ", "DESCRIBE"}
    assert ops(acls, "User:job", "TOPIC", "epochwatch.alerts") == {"WRITE", "READ", "DESCRIBE"}, "history read"
    assert ops(acls, "User:job", "TOPIC", "epochwatch.dlq") == {"WRITE", "DESCRIBE"}
    [group] = [a for a in acls if a.principal == "User:job" and a.resource_type == "GROUP"]
    assert (group.resource_name, group.pattern, group.operation) == ("epochwatch-", "PREFIXED", "READ")
    assert ops(acls, "User:col", "TOPIC", "epochwatch.events") == {"WRITE", "DESCRIBE"}
    assert ops(acls, "User:col", "CLUSTER", "kafka-cluster") == {"DESCRIBE"}
    assert ops(acls, "User:col", "TOPIC", "*") == {"DESCRIBE"}
    assert not ops(acls, "User:col", "TOPIC", "__consumer_offsets"), "only with collect.offset.commits: on"
    assert not [a for a in acls if a.operation in ("ALL", "ALTER", "CREATE", "DELETE")], "least privilege"


def test_a_separate_watched_cluster_gets_the_collectors_probe_acls(tmp_path):
    lib = tmp_path / "libs"
    lib.mkdir()
    (lib / "kafka-tools-4.1.2.jar").write_bytes(b"")
    s = settings(**{"collect.bootstrap.servers": "watched:9092", "collect.offset.commits": "on",
                    "collect.kafka.libs": str(lib), "collect.probe.client.id": "probe",
                    "kafka.client.group.id": "my-group"})
    plan = acl_plan(s, "User:job", "User:col")
    assert list(plan) == ["127.0.0.1:9092", "watched:9092"]
    events, watched = plan["127.0.0.1:9092"], plan["watched:9092"]
    assert {a.principal for a in watched} == {"User:col"}
    assert ops(watched, "User:col", "TOPIC", "__consumer_offsets") == {"READ"}
    groups = [(a.resource_name, a.pattern) for a in watched if a.resource_type == "GROUP"]
    assert groups == [("probe-commits-", "PREFIXED")]
    assert ops(events, "User:job", "GROUP", "my-group") == {"READ"}, "kafka.client group.id is the source's"


@pytest.mark.parametrize("client, expected", [
    ({"sasl.username": "svc-epochwatch"}, "User:svc-epochwatch"),
    ({}, "User:fallback"),
    ({"sasl.username": "${KAFKA_USER}"}, "User:fallback"),  # an unexpanded reference names nobody
])
def test_default_principal(client, expected):
    assert default_principal(client, "User:fallback") == expected


def test_kafka_topics_commands_are_idempotent_and_quote_their_values():
    [line] = kafka_topics_commands(topic_plan(settings())[1:2], "b:9092", command_config="admin.properties")
    words = shlex.split(line)
    assert words[:5] == ["kafka-topics.sh", "--bootstrap-server", "b:9092", "--command-config", "admin.properties"]
    assert "--if-not-exists" in words and words[words.index("--topic") + 1] == "epochwatch.alerts"
    assert words[words.index("--partitions") + 1] == "3" and words[words.index("--replication-factor") + 1] == "3"
    configs = [words[i + 1] for i, w in enumerate(words) if w == "--config"]
    assert configs == ["cleanup.policy=compact", "min.insync.replicas=2"]


def test_kafka_acls_commands_group_operations_per_resource():
    acls = [AclSpec("User:a", "READ", "TOPIC", "t"), AclSpec("User:a", "DESCRIBE", "TOPIC", "t"),
            AclSpec("User:a", "READ", "GROUP", "g-", "PREFIXED"),
            AclSpec("User:a", "DESCRIBE", "CLUSTER", "kafka-cluster"),
            AclSpec("User:a", "DESCRIBE", "TOPIC", "*")]
    assert [shlex.split(line)[3:] for line in kafka_acls_commands(acls, "b:9092")] == [
        ["--add", "--allow-principal", "User:a", "--operation", "Read", "--operation", "Describe", "--topic", "t"],
        ["--add", "--allow-principal", "User:a", "--operation", "Read", "--group", "g-",
         "--resource-pattern-type", "prefixed"],
        ["--add", "--allow-principal", "User:a", "--operation", "Describe", "--cluster"],
        ["--add", "--allow-principal", "User:a", "--operation", "Describe", "--topic", "*"],
    ]
    assert "'*'" in kafka_acls_commands(acls, "b:9092")[-1], "quoted: a shell would expand it"


def test_cli_prints_a_script_with_the_principals_of_the_config(tmp_path, capsys):
    path = tmp_path / "epochwatch.yaml"
    path.write_text("kafka:\n  bootstrap.servers: k:9093\n  client:\n    security.protocol: SASL_SSL\n"
                    "    sasl.mechanism: SCRAM-SHA-512\n    sasl.username: ew\n    sasl.password: pw\n")
    assert main(["topics", "--config", str(path), "--collector-principal", "User:col"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/sh\n")
    commands = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert commands[0] == "set -e"
    assert sum(c.startswith("kafka-topics.sh --bootstrap-server k:9093 --create") for c in commands) == 3
    acl_lines = [c for c in commands if c.startswith("kafka-acls.sh")]
    assert {shlex.split(c)[shlex.split(c).index("--allow-principal") + 1] for c in acl_lines} == {"User:ew", "User:col"}
    assert "pw" not in out


def test_cli_refuses_nonsense_numbers(capsys):
    assert main(["topics", "--partitions", "0"]) == 2
    assert "--partitions" in capsys.readouterr().err
