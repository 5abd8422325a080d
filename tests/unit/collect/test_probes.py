"""The collector's protocol client settings: the watched cluster's security, given in librdkafka's
names as the job's are, reaches kafka-python under its own names, and nothing is silently lost."""

import pytest

from streaming.collect.probes import client_options
from streaming.config import ConfigError


def test_sasl_and_ssl_settings_pass_through_under_kafka_pythons_names():
    got = client_options({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                          "sasl.username": "epochwatch", "sasl.password": "hunter2",
                          "ssl.ca.location": "/etc/kafka/ca.pem"})
    assert got == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                   "sasl_plain_username": "epochwatch", "sasl_plain_password": "hunter2",
                   "ssl_cafile": "/etc/kafka/ca.pem"}


def test_a_setting_the_protocol_client_does_not_know_is_refused_with_the_key_and_the_fix():
    with pytest.raises(ConfigError) as refused:
        client_options({"sasl.kerberos.service.name": "kafka"})
    assert refused.value.key == "collect.client.sasl.kerberos.service.name"
    assert "sasl.username" in refused.value.fix


def test_validate_config_refuses_it_too():
    from streaming import config

    with pytest.raises(ConfigError, match="collect.client.sasl.kerberos.service.name"):
        config.load(overrides={"collect.client.sasl.kerberos.service.name": "kafka"})
