"""Secrets never show (issue #22): credentials inside the Alertmanager and Schema Registry URLs
are never printed or logged, and no settings object shows a password, a token or URL userinfo in
its repr. The secrets below are each checked against everything that could show them."""

from __future__ import annotations

import logging
import time

import pytest
import yaml

from streaming import config
from streaming.commands import main
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.base import OutputBatch
from streaming.tools.embedded import free_port
from tests.support.alerts import rec
from udfs.kafka_options import parse_source_options
from udfs.kafka_sink import parse_sink_options
from udfs.redact import is_secret, redact

SECRETS = ("hunter2", "pw-registry", "pw-am", "tok-3", "s3a-secret", "jaas-pw")
OVERRIDES = {
    "kafka.client.sasl.password": "hunter2",
    "kafka.client.sasl.oauthbearer.client.secret": "tok-3",
    "kafka.client.ssl.key.password": "jaas-pw",
    "kafka.schema.registry.url": "https://reader:pw-registry@registry.example:8081",
    "sinks.alertmanager.url": "https://pager:pw-am@alertmanager.example:9093",
    "spark.spark.hadoop.fs.s3a.secret.key": "s3a-secret",
}


def assert_hidden(text: str, what: str) -> None:
    shown = [s for s in SECRETS if s in text]
    assert not shown, f"{what} shows {shown}: {text[:2000]}"


def test_a_refused_client_setting_is_reported_without_its_secret():
    """A Java client's JAAS line pasted into kafka.client: librdkafka refuses it (validate-config
    says so), and the error must not carry the password in it."""
    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule password='jaas-pw';"
    with pytest.raises(config.ConfigError) as err:
        config.load(overrides={"kafka.client.sasl.jaas.config": jaas})
    assert "kafka.client.sasl.jaas.config" in str(err.value)
    assert_hidden(str(err.value), "the error")


def test_settings_show_no_secret_in_their_repr():
    settings = config.load(overrides=OVERRIDES)
    for what, obj in (("Settings", settings), ("KafkaSettings", settings.kafka), ("SinkSettings", settings.sinks)):
        assert_hidden(repr(obj), what)
        assert_hidden(str(obj), what)
        assert_hidden(f"{obj!r} {[obj]}", what)
    assert "registry.example:8081" in repr(settings.kafka), "what is not secret still shows"
    # the values themselves are untouched: the job needs them
    assert settings.kafka.client["sasl.password"] == "hunter2"


def test_data_source_options_show_no_secret():
    source = parse_source_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "decode": "avro",
                                   "kafka.sasl.password": "hunter2",
                                   "schema.registry.url": "https://reader:pw-registry@registry.example:8081"})
    sink = parse_sink_options({"kafka.bootstrap.servers": "b:9092", "topic": "t", "kafka.sasl.password": "hunter2",
                               "schema.registry.url": "https://reader:pw-registry@registry.example:8081"})
    assert_hidden(repr(source), "SourceOptions")
    assert_hidden(repr(sink), "SinkOptions")


def test_validate_config_prints_no_secret(tmp_path, capsys):
    path = tmp_path / "epochwatch.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap.servers": "b:9092", "schema.registry.url": OVERRIDES["kafka.schema.registry.url"],
                  "client": {k[len("kafka.client."):]: v for k, v in OVERRIDES.items() if k.startswith("kafka.client.")}},
        "sinks": {"alertmanager.url": OVERRIDES["sinks.alertmanager.url"]},
        "spark": {"spark.hadoop.fs.s3a.secret.key": "s3a-secret"}}))
    assert main(["validate-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "alertmanager.example" in out and "registry.example" in out
    assert_hidden(out, "validate-config")


def test_a_config_error_about_a_url_shows_no_credentials(capsys):
    assert main(["validate-config", "--config", "/nonexistent"]) == 2  # the usual path works
    with pytest.raises(config.ConfigError) as err:
        config.load(overrides={"sinks.alertmanager.url": "ftp://pager:pw-am@alertmanager.example"})
    assert_hidden(str(err.value), "ConfigError")
    with pytest.raises(ValueError) as err:
        AlertmanagerSink("ftp://pager:pw-am@alertmanager.example")
    assert_hidden(str(err.value), "AlertmanagerSink")


def test_a_failed_alertmanager_delivery_logs_no_credentials(caplog):
    sink = AlertmanagerSink(f"http://pager:pw-am@127.0.0.1:{free_port()}", timeout_s=0.5, backoff_initial_s=60)
    with caplog.at_level(logging.WARNING, logger="epochwatch"):
        sink.write(OutputBatch(1, alerts=[rec()]))
        deadline = time.monotonic() + 30
        while "delivery failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        sink.close(timeout_s=2)
    assert "delivery failed" in caplog.text
    assert_hidden(caplog.text, "the Alertmanager sink's log")


@pytest.mark.parametrize("text,expected", [
    ("https://user:pw@host:1/x", "https://***@host:1/x"),
    ("failed: http://a@b/c and https://x:y@z", "failed: http://***@b/c and https://***@z"),
    ("http://host:9093/api/v2/alerts", "http://host:9093/api/v2/alerts"),
    ("mail me: someone@example.com", "mail me: someone@example.com"),
])
def test_redact_hides_userinfo_only(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("name,secret", [("sasl.password", True), ("ssl.key.password", True),
                                         ("sasl.oauthbearer.client.secret", True), ("basic.auth.user.info", True),
                                         ("ssl.key.pem", True), ("bootstrap.servers", False),
                                         ("security.protocol", False), ("sasl.mechanism", False)])
def test_secret_setting_names(name, secret):
    assert is_secret(name) == secret
