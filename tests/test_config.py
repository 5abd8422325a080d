"""Config errors name the key and the fix; the shipped config is valid; secrets come from the env."""

import ssl
from pathlib import Path

import pytest

from streaming import config
from streaming.commands import main

SHIPPED = Path(__file__).resolve().parents[1] / "deploy" / "config" / "epochwatch.yaml"

BAD = [
    ({"rules.controller.heartbeat.timout.ms": 1}, "rules.controller.heartbeat.timout.ms",
     "did you mean 'rules.controller.heartbeat.timeout.ms'", "1-a typo gets the nearest real key"),
    ({"rules.controller.heartbeat.timeout.ms": "abc"}, "rules.controller.heartbeat.timeout.ms", "integer",
     "2-not a number"),
    ({"rules.controller.heartbeat.timeout.ms": 1000}, "rules.controller.heartbeat.timeout.ms", "several heartbeat",
     "3-a timeout below the heartbeat interval would page constantly"),
    ({"kafka.encoding": "xml"}, "kafka.encoding", "confluent, schemaless", "4-enumerated choice"),
    ({"sinks.alertmanager.url": "127.0.0.1:9093"}, "sinks.alertmanager.url", "http://", "5-URL without scheme"),
    ({"rules.socket.connection.setup.timeout.max.ms": 1}, "rules.socket.connection.setup.timeout.max.ms",
     "at least as large", "6-KIP-601 max below base"),
    ({"kafka.client.sasl.password": "${EPOCHWATCH_NOT_SET_ANYWHERE}"}, "EPOCHWATCH_NOT_SET_ANYWHERE", "export",
     "7-a secret reference to an unset variable"),
    ({"alerting.url": "x"}, "alerting", "one of", "8-unknown section"),
    ({"kafka.maxOffsetsPerTrigger": 0}, "kafka.maxOffsetsPerTrigger", "null for no cap",
     "9-a batch cap of 0 would have meant no cap at all"),
    ({"rules.event.max.epoch.jump": 0}, "rules.event.max.epoch.jump", "default (1099511627776)",
     "10-a jump limit of 0 would refuse every new epoch"),
    ({"rules.event.max.epoch.jump": 2**60}, "rules.event.max.epoch.jump", "above event.max.epoch",
     "11-a jump larger than the largest epoch allowed means nothing"),
    ({"rules.event.max.past.ms": 1000}, "rules.event.max.past.ms", "late, not implausible",
     "12-events within the allowed lateness must not be refused as too old"),
    ({"rules.event.max.controller.epoch.jump": 0}, "rules.event.max.controller.epoch.jump", "above 0",
     "13-no controller failover could ever be accepted"),
    ({"collect.offset.commits": "yes"}, "collect.offset.commits", "off, on", "14-the commit log source is on or off"),
    ({"collect.offset.commits": "on", "collect.kafka.libs": "/nonexistent/kafka/libs"}, "collect.kafka.libs",
     "kafka-tools", "15-the commit log reader runs Kafka's own console consumer: without its jar it cannot start"),
    ({"rules.state.max.clusters": 0}, "rules.state.max.clusters", "default (10000)",
     "16-a job that may hold no cluster would refuse every event"),
    ({"rules.runbook.base.url": "wiki/alerts#top"}, "rules.runbook.base.url", "docs/alerts.md",
     "17-runbook links are <base>#<alertname>: the base must be an absolute URL without a fragment"),
    ({"rules.client.alerts": "per-broker"}, "rules.client.alerts", "per_client, per_broker, per_cluster",
     "18-how per-client alerts are delivered is one of three modes"),
    ({"rules.client.alerts.examples": 1000}, "rules.client.alerts.examples", "at most 100",
     "19-a roll-up listing a thousand clients would be as large as the volume it avoids"),
    ({"sinks.labels.cluster.name": "kafka-cluster"}, "sinks.labels.cluster.name", "letters, digits and _",
     "20-Alertmanager refuses a label name that is not Prometheus' (every alert would be a 400)"),
    ({"sinks.labels.static.severity": "high"}, "sinks.labels.static.severity", "pick another name",
     "21-a static label must not override what routing reads from the rules (severity pages)"),
    ({"sinks.labels.static.broker_id": "1"}, "sinks.labels.static.broker_id", "pick another name",
     "22-nor an entity label of a rule: alerts of different brokers would look alike"),
    ({"sinks.labels.cluster.name": "alertname"}, "sinks.labels.cluster.name", "e.g. kafka_cluster",
     "23-the cluster id's label must not replace the alert's name"),
    ({"sinks.labels.static.kafka_cluster": "x"}, "sinks.labels.static.kafka_cluster", "sinks.labels.cluster.name",
     "24-a static label must not override the cluster id"),
    ({"sinks.labels.static.team": None}, "sinks.labels.static.team", "give it one",
     "25-YAML reads `team:` without a value as null: not the text 'None'"),
    ({"sinks.labels.static.__name__": "x"}, "sinks.labels.static.__name__", "not starting with a digit or __",
     "26-names starting with __ are Prometheus' own"),
    ({"sinks.labels.aliases.a": "payments", "sinks.labels.aliases.b": "payments"}, "sinks.labels.aliases.b",
     "own alias", "27-one alias for two clusters would page for both under one name"),
    ({"sinks.labels.static.env": True}, "sinks.labels.static.env", "quote", "28-YAML reads an unquoted on/yes as true"),
]


@pytest.mark.parametrize("overrides,key,fix,why", BAD, ids=[b[3] for b in BAD])
def test_errors_name_the_key_and_the_fix(overrides, key, fix, why):
    with pytest.raises(config.ConfigError) as err:
        config.load(overrides=overrides)
    assert key in str(err.value) and fix in str(err.value)


def test_catch_up_batches_are_bounded_unless_asked_otherwise():
    assert config.load().kafka.max_offsets_per_trigger == 1_000_000
    assert config.load(overrides={"kafka.maxOffsetsPerTrigger": None}).kafka.max_offsets_per_trigger is None


def test_a_run_ramps_up_to_its_catch_up_batch_unless_told_not_to():
    assert config.load().kafka.ramp_up_batches == 3
    assert config.load(overrides={"kafka.rampUpBatches": 0}).kafka.ramp_up_batches == 0
    with pytest.raises(config.ConfigError, match="kafka.rampUpBatches"):
        config.load(overrides={"kafka.rampUpBatches": 11})


def test_shipped_config_is_valid_and_uses_kafka_defaults():
    settings = config.load(SHIPPED)
    assert settings.rules.controller_heartbeat_timeout_ms == 9000
    assert settings.rules.rebootstrap_trigger_ms == 300_000
    assert settings.rules.connection_setup_timeout_max_ms == 30_000


def test_secrets_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_SECRET", "s3cret")
    settings = config.load(overrides={"kafka.client": {"sasl.password": "${EPOCHWATCH_TEST_SECRET}"}})
    assert settings.kafka.client["sasl.password"] == "s3cret"


def test_validate_config_command_exit_codes(tmp_path, capsys):
    assert main(["validate-config", "--config", str(SHIPPED), "--quiet"]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  controller.heartbeat.timeout.ms: nine\n")
    assert main(["validate-config", "--config", str(bad)]) == 2
    assert "controller.heartbeat.timeout.ms" in capsys.readouterr().err


def test_missing_file_is_a_clear_error():
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load("/nonexistent/epochwatch.yaml")


def test_the_commit_log_source_is_off_unless_asked_for_and_an_unquoted_on_counts():
    """Reading __consumer_offsets is extra load and needs extra ACLs: never by surprise. YAML 1.1
    reads an unquoted `on` as true, which must still mean on."""
    assert config.load().collect.offset_commits == "off"
    assert config.load(None, {"collect.offset.commits": True}).collect.offset_commits == "on"
    assert config.load(None, {"sinks.console": False}).sinks.console == "off"


def test_every_problem_is_reported_at_once_in_the_yamls_own_names(tmp_path, monkeypatch):
    """Why: a team fixing a config one error per run finds the fifth problem after four restarts."""
    monkeypatch.delenv("EPOCHWATCH_UNSET_FOR_TEST", raising=False)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kafka:\n"
        "  bootstrap.servers: ''\n"
        "  startingOffsets: earliestt\n"
        "  client:\n"
        "    security.protocol: plaintextt\n"
        "    sasl.password: ${EPOCHWATCH_UNSET_FOR_TEST}\n"
        "rules:\n"
        "  controller.heartbeat.timeout.ms: yes\n"
        "  connection.storm.window.ms: 0\n"
        "sinks:\n"
        "  metrics.port: 70000\n"
        "collect:\n"
        "  client:\n"
        "    no.such.setting: 1\n"
        "trigger_interval: every second\n")
    with pytest.raises(config.ConfigErrors) as err:
        config.load(bad)
    keys = {p.key for p in err.value.problems}
    assert keys == {"kafka.bootstrap.servers", "kafka.startingOffsets", "kafka.client.security.protocol",
                    "kafka.client.sasl.password", "rules.controller.heartbeat.timeout.ms",
                    "rules.connection.storm.window.ms", "sinks.metrics.port", "collect.client.no.such.setting",
                    "trigger_interval"}, keys
    text = str(err.value)
    assert text.startswith(f"{len(keys)} problems in the config") and "whole number" in text and "earliestt" in text


def test_validate_config_prints_the_effective_config_with_secrets_masked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_SECRET", "s3cret-value")
    good = tmp_path / "good.yaml"
    good.write_text("kafka:\n  client:\n    sasl.password: ${EPOCHWATCH_TEST_SECRET}\n"
                    "sinks:\n  alertmanager.url: https://pager:hunter2@am.example:9093\n")
    assert main(["validate-config", "--config", str(good)]) == 0
    out = capsys.readouterr().out
    assert "kafka.bootstrap.servers = 127.0.0.1:9092" in out and "rules.controller.heartbeat.timeout.ms = 9000" in out
    assert "kafka.client.sasl.password = ***" in out
    assert "s3cret-value" not in out and "hunter2" not in out and "sinks.alertmanager.url = " in out


def test_every_command_line_option_has_help_text():
    import argparse

    from streaming.commands import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "epochwatch")
    assert not missing, missing


def test_output_piped_into_head_ends_quietly_and_a_bad_path_is_one_line(tmp_path):
    import subprocess
    import sys

    piped = subprocess.run(f"{sys.executable} -m streaming.commands validate-config --config {SHIPPED} | head -1",
                           shell=True, capture_output=True, text=True, timeout=60)
    assert piped.stdout.strip().endswith(": valid") and piped.stderr == "", piped.stderr
    missing = subprocess.run([sys.executable, "-m", "streaming.commands", "report", "--alerts", str(tmp_path / "nope"),
                              "--transitions", str(tmp_path / "nope2"), "--out", str(tmp_path / "r.png")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "config key" not in missing.stderr, missing.stderr


# The Schema Registry's clients (kafka.schema.registry.*): what they would refuse later is refused
# at load, naming the key, and a secret's value is never quoted.
REGISTRY_URL = {"kafka.schema.registry.url": "https://registry.example:8081"}
REGISTRY_BAD = [
    ({**REGISTRY_URL, "kafka.schema.registry.basic.auth.user.info": "${EPOCHWATCH_UNSET_REGISTRY_AUTH}"},
     "kafka.schema.registry.basic.auth.user.info", "export EPOCHWATCH_UNSET_REGISTRY_AUTH",
     "1-the credentials come from a variable that is not set"),
    ({**REGISTRY_URL, "kafka.schema.registry.basic.auth.user.info": "only-a-pw-5e1d"},
     "kafka.schema.registry.basic.auth.user.info", "USER:PASSWORD", "2-basic auth needs a user and a password"),
    ({"kafka.schema.registry.url": "https://u:pw-5e1d@registry.example:8081",
      "kafka.schema.registry.basic.auth.user.info": "a:pw-5e1d"},
     "kafka.schema.registry.basic.auth.user.info", "keep one", "3-the client refuses credentials given twice"),
    ({**REGISTRY_URL, "kafka.schema.registry.ssl.ca.location": "/nonexistent/ca.pem"},
     "kafka.schema.registry.ssl.ca.location", "CA certificate", "4-a CA file that is not there"),
    ({"kafka.schema.registry.basic.auth.user.info": "a:pw-5e1d"}, "kafka.schema.registry.basic.auth.user.info",
     "set kafka.schema.registry.url", "5-credentials for no registry say so rather than do nothing"),
    ({**REGISTRY_URL, "kafka.encoding": "schemaless"}, "kafka.schema.registry.url", "kafka.encoding: confluent",
     "6-schemaless records carry no schema id: the source refuses the registry then"),
    ({"kafka.schema.registry.url": "registry:8081"}, "kafka.schema.registry.url", "http(s) URL", "7-no scheme"),
    ({**REGISTRY_URL, "kafka.schema.registry.ssl.certificate.location": str(SHIPPED)},
     "kafka.schema.registry.ssl.key.location", "needs both", "8-a client certificate without its key"),
    ({**REGISTRY_URL, "kafka.schema.registry.ssl.key.location": str(SHIPPED)},
     "kafka.schema.registry.ssl.certificate.location", "needs both",
     "9-a key without its certificate: the client refuses it when the job starts"),
    ({**REGISTRY_URL, "kafka.schema.registry.ssl.certificate.location": "/nonexistent/client.pem",
      "kafka.schema.registry.ssl.key.location": str(SHIPPED)},
     "kafka.schema.registry.ssl.certificate.location", "/nonexistent/client.pem is not a file",
     "10-a certificate file that is not there (a Secret not mounted)"),
    ({"kafka.schema.registry.ssl.certificate.location": str(SHIPPED), "kafka.schema.registry.ssl.key.location":
      str(SHIPPED)}, "kafka.schema.registry.ssl.certificate.location", "set kafka.schema.registry.url",
     "11-a client certificate for no registry says so rather than does nothing"),
]


@pytest.mark.parametrize("overrides,key,fix,why", REGISTRY_BAD, ids=[b[3] for b in REGISTRY_BAD])
def test_registry_settings_errors_name_the_key_and_hide_the_secret(overrides, key, fix, why):
    with pytest.raises(config.ConfigError) as err:
        config.load(overrides=overrides)
    assert key in str(err.value) and fix in str(err.value) and "pw-5e1d" not in str(err.value)


def test_registry_credentials_come_from_the_environment_and_never_show(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_REGISTRY_AUTH", "alerts:registry-pw-5e1d")
    path = tmp_path / "registry.yaml"
    path.write_text("kafka:\n  schema:\n    registry:\n      url: https://registry.example:8081\n"
                    "  schema.registry.basic.auth.user.info: ${EPOCHWATCH_TEST_REGISTRY_AUTH}\n")
    settings = config.load(path)
    assert settings.kafka.registry_conf() == {"basic.auth.user.info": "alerts:registry-pw-5e1d"}
    assert "registry-pw-5e1d" not in repr(settings)
    assert main(["validate-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "kafka.schema.registry.basic.auth.user.info = ***" in out and "registry-pw-5e1d" not in out

def test_registry_client_certificate_reaches_the_schema_registry_client(tmp_path):
    """The pair reaches confluent_kafka's SchemaRegistryClient, which loads it when it is made: a key
    that is not the certificate's is refused there, so the files really are the ones it presents."""
    from tests.support.tls import make_pki
    from udfs.registry_catalog import RegistryCatalog

    pki = make_pki(tmp_path)
    keys = {**REGISTRY_URL, "kafka.schema.registry.ssl.ca.location": str(pki.ca),
            "kafka.schema.registry.ssl.certificate.location": str(pki.client_cert),
            "kafka.schema.registry.ssl.key.location": str(pki.client_key)}
    kafka = config.load(overrides=keys).kafka
    assert kafka.registry_conf() == {"ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client_cert),
                                     "ssl.key.location": str(pki.client_key)}
    RegistryCatalog(kafka.schema_registry_url, "events", kafka.registry_conf())   # loads the pair: no error
    mismatched = config.load(overrides={**keys, "kafka.schema.registry.ssl.key.location": str(pki.server_key)})
    with pytest.raises(ssl.SSLError, match="KEY_VALUES_MISMATCH"):
        RegistryCatalog(kafka.schema_registry_url, "events", mismatched.kafka.registry_conf())


def test_per_client_alerts_roll_up_per_broker_unless_asked_otherwise(tmp_path):
    assert (config.load().rules.client_alerts, config.load().rules.client_alerts_examples) == ("per_broker", 5)
    path = tmp_path / "c.yaml"
    path.write_text("rules:\n  client.alerts: per_client\n  client.alerts.max.per.cluster: 50\n")
    rules = config.load(path).rules
    assert (rules.client_alerts, rules.client_alerts_max_per_cluster) == ("per_client", 50)


def test_alert_labels_in_the_yamls_own_shape(tmp_path):
    """sinks.labels as a team writes it: nested, with the alias of a cluster id; --set adds to it."""
    path = tmp_path / "labels.yaml"
    path.write_text("sinks:\n"
                    "  alertmanager.url: http://127.0.0.1:9093\n"
                    "  labels:\n"
                    "    cluster:\n"
                    "      name: kafka_cluster_id\n"
                    "    static: {team: kafka, env: prod}\n"
                    "    aliases:\n"
                    "      MkU3OEVBNTcwNTJENDM2Qg: payments-prod\n")
    labels = config.load(path, {"sinks.labels.static.region": "eu-1"}).sinks.labels
    assert labels == config.AlertLabelSettings(cluster_label="kafka_cluster_id",
                                               static={"team": "kafka", "env": "prod", "region": "eu-1"},
                                               aliases={"MkU3OEVBNTcwNTJENDM2Qg": "payments-prod"})
    assert labels.alias_label == "kafka_cluster_id_alias"
    assert config.load(path).sinks.alertmanager_url == "http://127.0.0.1:9093"   # the rest of sinks still read
    assert config.load().sinks.labels == config.AlertLabelSettings(cluster_label="kafka_cluster", static={}, aliases={})
