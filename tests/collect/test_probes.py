"""The collector's protocol client settings: the watched cluster's security, given in librdkafka's
names as the job's are, reaches kafka-python under its own names, and nothing is silently lost."""

import asyncio
from types import SimpleNamespace

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


class _Admin:
    """A stand-in for kafka-python's admin client, down to the connection manager the probe sends
    through: bootstraps only from a server in ``up``; knows brokers 1 and 4; a broker in ``silent``
    (or every broker, once ``broken``) times out."""

    up: set = set()
    made: list = []
    silent: set = set()

    def __init__(self, bootstrap_servers, **config):
        _Admin.made.append(bootstrap_servers)
        if bootstrap_servers not in _Admin.up:
            raise TimeoutError(f"Unable to bootstrap from {bootstrap_servers}")
        assert config["bootstrap_timeout_ms"] == config["request_timeout_ms"] == 3000
        self.server, self.broken, self.closed, self.asked = bootstrap_servers, False, False, []
        self._manager = self
        self.config = {}
        self.cluster = self

    def brokers(self):
        return [SimpleNamespace(node_id=1), SimpleNamespace(node_id=4)]

    def run(self, fn, *args):
        return asyncio.run(fn(*args))

    async def send(self, request, node_id, request_timeout_ms):
        self.asked.append(node_id)
        assert request_timeout_ms == 3000
        if self.broken or node_id in _Admin.silent:
            raise TimeoutError("Request timed out")
        broker = lambda n: SimpleNamespace(broker_id=n, host=f"h{n}", port=n, is_fenced=False)  # noqa: E731
        return SimpleNamespace(error_code=0, error_message=None, cluster_id="c1", brokers=[broker(1), broker(4)])

    def close(self):
        self.closed = True


@pytest.fixture
def admins():
    _Admin.up, _Admin.made, _Admin.silent = set(), [], set()
    return _Admin


def test_a_server_that_does_not_answer_costs_one_request_timeout_then_the_next_one_is_tried(admins):
    from streaming.collect.probes import ClusterProbe

    admins.up = {"h2:2"}
    probe = ClusterProbe("h1:1,h2:2,h3:3", "epochwatch", 3000, admin_factory=admins)
    assert probe.cluster().cluster_id == "c1"
    assert admins.made == ["h1:1", "h2:2"]


def test_no_server_answering_is_no_node_available_naming_every_server_tried(admins):
    from streaming.collect.probes import ClusterProbe, ProbeError

    probe = ClusterProbe("h1:1,h2:2", "epochwatch", 3000, admin_factory=admins)
    with pytest.raises(ProbeError) as failed:
        probe.cluster()
    assert failed.value.reason == "NO_NODE_AVAILABLE"
    assert "h1:1" in failed.value.detail and "h2:2" in failed.value.detail


def test_a_client_failing_calls_in_a_row_is_replaced_bootstrapping_from_the_brokers_it_learned(admins):
    from streaming.collect.probes import ClusterProbe, ProbeError

    admins.up = {"h1:1", "h4:4"}
    probe = ClusterProbe("h1:1", "epochwatch", 3000, rebuild_after=3, admin_factory=admins)
    probe.cluster()
    first = probe._admin
    first.broken = True
    admins.up = {"h4:4"}  # the configured server is gone; broker 4 was learned from the answer
    for _ in range(2):
        with pytest.raises(ProbeError):
            probe.cluster()
    assert probe._admin is first and not first.closed, "kept through fewer failures than the bound"
    with pytest.raises(ProbeError):
        probe.cluster()
    assert first.closed and probe._admin is None
    assert probe.cluster().cluster_id == "c1"
    assert probe._admin.server == "h4:4" and probe.bootstraps == 2 and probe.failures_in_a_row == 0


def test_a_success_resets_the_count_of_failures(admins):
    from streaming.collect.probes import ClusterProbe, ProbeError

    admins.up = {"h1:1"}
    probe = ClusterProbe("h1:1", "epochwatch", 3000, rebuild_after=2, admin_factory=admins)
    probe.cluster()
    client = probe._admin
    for _ in range(3):
        client.broken = True
        with pytest.raises(ProbeError):
            probe.cluster()
        client.broken = False
        probe.cluster()
    assert probe._admin is client and probe.bootstraps == 1


def test_a_silent_broker_costs_one_request_timeout_and_the_one_that_answered_is_asked_first(admins):
    from streaming.collect.probes import ClusterProbe

    admins.up, admins.silent = {"h1:1"}, {1}
    probe = ClusterProbe("h1:1", "epochwatch", 3000, admin_factory=admins)
    probe.cluster()
    probe.cluster()
    assert probe._admin.asked == [1, 4, 4]
