"""`epochwatch topics` against a real Kafka with an authorizer: the printed script runs as it is
through Kafka's own TopicCommand and AclCommand (what kafka-topics.sh and kafka-acls.sh start),
the topics come out as planned, and the ACLs let the job's and the collector's principals do
their work and nothing more. `--create` makes the topics itself and finds one set up wrong."""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid

import pytest

from streaming.commands import main
from streaming.tools.kafka_cluster import JVM_FLAGS, KafkaCluster, kafka_classpath
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration]

USERS = {"ew-job": "job-secret", "ew-collector": "collector-secret"}
# Plaintext clients (the tests' own admin, the brokers between themselves) are ANONYMOUS: super users.
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
TOOLS = {"kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
         "kafka-acls.sh": "org.apache.kafka.tools.AclCommand"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KafkaCluster(tmp_path_factory.mktemp("topics"), controllers=1, brokers=1, sasl_users=USERS,
                      broker_overrides=AUTHORIZER, controller_overrides=AUTHORIZER) as c:
        yield c


def write_config(path, cluster, name: str) -> str:
    path.write_text(
        "kafka:\n"
        f"  bootstrap.servers: {cluster.bootstrap_servers}\n"
        f"  topics: {{events: {name}.events, alerts: {name}.alerts, dlq: {name}.dlq}}\n")
    return str(path)


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def run_with_kafkas_tools(script: str) -> list[str]:
    """Every command line of the script, run by the Kafka class its bin/ script would start."""
    ran = []
    for line in script.splitlines():
        if not line or line.startswith("#") or line in ("#!/bin/sh", "set -e"):
            continue
        tool, *args = shlex.split(line)
        result = subprocess.run(["java", "-Xmx128m", *JVM_FLAGS, "-cp", kafka_classpath(), TOOLS[tool], *args],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        ran.append(tool)
    return ran


def test_printed_script_runs_with_kafkas_tools_and_grants_just_enough(cluster, tmp_path, capsys):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ConfigResource,
        ResourcePatternType,
        ResourceType,
    )

    name = f"t{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path / "epochwatch.yaml", cluster, name)
    assert main(["topics", "--config", config, "--replication-factor", "1", "--partitions", "4",
                 "--job-principal", "User:ew-job", "--collector-principal", "User:ew-collector"]) == 0
    ran = run_with_kafkas_tools(capsys.readouterr().out)
    assert ran.count("kafka-topics.sh") == 3 and ran.count("kafka-acls.sh") >= 6

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topics = admin.list_topics(timeout=30).topics
    assert {t: len(topics[t].partitions) for t in (f"{name}.events", f"{name}.alerts", f"{name}.dlq")} == {
        f"{name}.events": 4, f"{name}.alerts": 3, f"{name}.dlq": 3}
    resources = [ConfigResource(ResourceType.TOPIC, f"{name}.{t}") for t in ("alerts", "dlq")]
    configs = {r.name: c for r, f in admin.describe_configs(resources).items() for c in [f.result(30)]}
    assert configs[f"{name}.alerts"]["cleanup.policy"].value == "compact"
    assert configs[f"{name}.dlq"]["retention.ms"].value == str(14 * 24 * 3600 * 1000)

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    bindings = {(b.principal, b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name)
                for b in admin.describe_acls(everything).result(30)}
    assert ("User:ew-job", "TOPIC", f"{name}.alerts", "LITERAL", "READ") in bindings
    assert ("User:ew-job", "GROUP", "epochwatch-", "PREFIXED", "READ") in bindings
    assert ("User:ew-collector", "BROKER", "kafka-cluster", "LITERAL", "DESCRIBE") in bindings

    # the collector's principal produces events ...
    producer = Producer({"bootstrap.servers": cluster.sasl_bootstrap_servers, **sasl("ew-collector")})
    producer.produce(f"{name}.events", key=b"c/broker-1", value=b"event")
    assert producer.flush(30) == 0
    # ... the job's reads them the way the job does (its own group id, assigned partitions) ...
    consumer = Consumer({"bootstrap.servers": cluster.sasl_bootstrap_servers, **sasl("ew-job"),
                         "group.id": "epochwatch-kafka-source-test", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(f"{name}.events", p, 0) for p in range(4)])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
        assert message is not None and message.error() is None and message.value() == b"event", message
    finally:
        consumer.close()
    # ... and writes alerts, but may not write events
    job = Producer({"bootstrap.servers": cluster.sasl_bootstrap_servers, **sasl("ew-job"),
                    "message.timeout.ms": 10000})
    errors = {}
    for topic in (f"{name}.alerts", f"{name}.events"):
        # a compacted topic takes keyed records only: alert records are keyed by fingerprint
        job.produce(topic, key=b"0123456789abcdef", value=b"x",
                    on_delivery=lambda err, msg, topic=topic: errors.setdefault(topic, err))
    job.flush(30)
    assert errors[f"{name}.alerts"] is None
    assert errors[f"{name}.events"] is not None and "AUTHORIZATION" in errors[f"{name}.events"].name()
    with pytest.raises(KafkaException):  # nor delete or create anything
        AdminClient({"bootstrap.servers": cluster.sasl_bootstrap_servers, **sasl("ew-job")}).delete_topics(
            [f"{name}.dlq"])[f"{name}.dlq"].result(30)


def test_create_makes_the_topics_and_finds_one_set_up_wrong(cluster, tmp_path, capsys):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    name = f"c{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path / "epochwatch.yaml", cluster, name)
    args = ["topics", "--config", config, "--create", "--replication-factor", "1"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == [f"{name}.{t}: created" for t in ("events", "alerts", "dlq")]
    assert main(args) == 0, "a second run changes nothing"
    assert "created" not in capsys.readouterr().out

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    alerts = ConfigResource(ResourceType.TOPIC, f"{name}.alerts", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alerts])[alerts].result(30)
    plain = ConfigResource(ResourceType.TOPIC, f"{name}.alerts")
    wait_until(lambda: admin.describe_configs([plain])[plain].result(30)["cleanup.policy"].value == "delete", 30,
               what="the altered cleanup.policy visible")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"{name}.alerts: exists with cleanup.policy=delete; wanted cleanup.policy=compact" in err
    assert f"kafka-configs.sh --bootstrap-server {cluster.bootstrap_servers} --alter --entity-type topics " \
           f"--entity-name {name}.alerts --add-config cleanup.policy=compact" in err
