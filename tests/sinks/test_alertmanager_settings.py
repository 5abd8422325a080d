"""The Alertmanager sink's settings (sinks.alertmanager.*, sinks.external.url): several URLs,
credentials from the environment, TLS files; every error names the key, no secret is ever shown.
Delivery itself is tested against real Alertmanagers (tests/integration/observability)."""

from __future__ import annotations

import pytest

from streaming import config
from streaming.commands import main
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.alertmanager_http import HttpOptions

AM = "http://am-1:9093"


@pytest.fixture
def pem(tmp_path):
    """A file where a PEM file is expected (its content matters only to the TLS handshake)."""
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def load(**sinks):
    return config.load(overrides={f"sinks.{k}": v for k, v in sinks.items()}).sinks


def test_several_urls_as_a_yaml_list_or_comma_separated(tmp_path, monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_HOST", "am-2")
    file = tmp_path / "epochwatch.yaml"
    file.write_text("sinks:\n  alertmanager:\n    url:\n"
                    "      - http://am-1:9093\n      - http://${EPOCHWATCH_TEST_AM_HOST}:9093\n")
    assert config.load(file).sinks.alertmanager_urls() == ["http://am-1:9093", "http://am-2:9093"]
    commas = load(**{"alertmanager.url": "http://am-1:9093, http://am-2:9093"})
    assert commas.alertmanager_urls() == ["http://am-1:9093", "http://am-2:9093"]
    assert load().alertmanager_urls() == []


def test_credentials_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_PASSWORD", "pw-from-env")
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_TOKEN", "token-from-env")
    basic = load(**{"alertmanager.url": AM, "alertmanager.basic.auth.username": "epochwatch",
                    "alertmanager.basic.auth.password": "${EPOCHWATCH_TEST_AM_PASSWORD}"})
    assert HttpOptions.from_settings(basic) == HttpOptions(username="epochwatch", password="pw-from-env")
    bearer = load(**{"alertmanager.url": AM, "alertmanager.bearer.token": "${EPOCHWATCH_TEST_AM_TOKEN}"})
    assert HttpOptions.from_settings(bearer) == HttpOptions(bearer_token="token-from-env")
    for shown in (repr(basic), repr(bearer), repr(HttpOptions.from_settings(basic)),
                  repr(HttpOptions.from_settings(bearer))):
        assert "pw-from-env" not in shown and "token-from-env" not in shown


def test_tls_files(pem):
    sinks = load(**{"alertmanager.url": "https://am-1:9093", "alertmanager.tls.ca.file": pem,
                    "alertmanager.tls.cert.file": pem, "alertmanager.tls.key.file": pem})
    assert HttpOptions.from_settings(sinks) == HttpOptions(ca_file=pem, cert_file=pem, key_file=pem)


def test_the_generator_url_is_the_external_url_else_the_jobs_metrics():
    assert load().generator_url() == "http://127.0.0.1:9464/metrics"
    assert load(**{"metrics.address": "0.0.0.0", "metrics.port": 9500}).generator_url() == "http://0.0.0.0:9500/metrics"
    assert load(**{"external.url": "https://epochwatch.example.com/metrics"}).generator_url() == \
        "https://epochwatch.example.com/metrics"


# (overrides, the key the error names, a word of its fix or problem, why)
BAD = [
    ({"alertmanager.basic.auth.username": "epochwatch"}, "sinks.alertmanager.basic.auth.password", "set both",
     "1-a username alone would send requests Alertmanager refuses, for ever"),
    ({"alertmanager.basic.auth.password": "pw"}, "sinks.alertmanager.basic.auth.username", "set both",
     "2-a password alone likewise"),
    ({"alertmanager.basic.auth.username": "u", "alertmanager.basic.auth.password": "p",
      "alertmanager.bearer.token": "t"}, "sinks.alertmanager.bearer.token", "one kind of credentials",
     "3-one Authorization header: which one was meant is not ours to guess"),
    ({"alertmanager.basic.auth.password": "${EPOCHWATCH_TEST_UNSET_PASSWORD}", "alertmanager.basic.auth.username": "u"},
     "sinks.alertmanager.basic.auth.password", "EPOCHWATCH_TEST_UNSET_PASSWORD",
     "4-a secret's variable unset: the key and the variable named, not an empty password sent"),
    ({"alertmanager.url": "https://am-1:9093", "alertmanager.tls.ca.file": "/nonexistent/ca.pem"},
     "sinks.alertmanager.tls.ca.file", "/nonexistent/ca.pem", "5-a CA file that is not there fails every delivery"),
    ({"alertmanager.url": "https://am-1:9093", "alertmanager.tls.cert.file": "PEM"},
     "sinks.alertmanager.tls.key.file", "both", "6-a client certificate without its key cannot be presented"),
    ({"alertmanager.tls.ca.file": "PEM"}, "sinks.alertmanager.tls.ca.file", "https",
     "7-TLS settings with only http URLs would be silently unused"),
    ({"alertmanager.url": f"{AM},{AM}"}, "sinks.alertmanager.url", "twice",
     "8-the same instance twice would get every alert twice and count it as two"),
    ({"alertmanager.url": f"{AM},am-2:9093"}, "sinks.alertmanager.url", "http://",
     "9-every URL of the list is checked, not only the first"),
    ({"alertmanager.url": "http://u:p@am-1:9093", "alertmanager.bearer.token": "t"}, "sinks.alertmanager.url",
     "credentials", "10-credentials in the URL and in the keys: one of them would silently win"),
    ({"external.url": "epochwatch.example.com"}, "sinks.external.url", "http(s) URL",
     "11-Alertmanager refuses an alert whose generatorURL is not absolute"),
]


@pytest.mark.parametrize("overrides, key, words, why", BAD, ids=[b[3] for b in BAD])
def test_errors_name_the_key_and_the_fix(overrides, key, words, why, pem, monkeypatch):
    monkeypatch.delenv("EPOCHWATCH_TEST_UNSET_PASSWORD", raising=False)
    overrides = {k: pem if v == "PEM" else v for k, v in overrides.items()}
    overrides.setdefault("alertmanager.url", AM)
    with pytest.raises(config.ConfigError) as err:
        load(**overrides)
    problems = getattr(err.value, "problems", [err.value])
    assert any(p.key == key and words in str(p) for p in problems), f"{why}: {err.value}"


def test_validate_config_masks_the_password_and_the_token(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_PASSWORD", "pw-from-env")
    file = tmp_path / "epochwatch.yaml"
    file.write_text("sinks:\n  alertmanager.url: [http://am-1:9093, http://am-2:9093]\n"
                    "  alertmanager.basic.auth.username: epochwatch\n"
                    "  alertmanager.basic.auth.password: ${EPOCHWATCH_TEST_AM_PASSWORD}\n")
    assert main(["validate-config", "--config", str(file)]) == 0
    out = capsys.readouterr().out
    assert "sinks.alertmanager.url = http://am-1:9093,http://am-2:9093" in out
    assert "sinks.alertmanager.basic.auth.username = epochwatch" in out
    assert "sinks.alertmanager.basic.auth.password = ***" in out and "pw-from-env" not in out
    assert "sinks.alertmanager.bearer.token = null" in out


def test_the_sink_takes_every_url_and_names_each_without_credentials():
    sink = AlertmanagerSink("http://am-1:9093, https://pager:pw@am-2:9093/")
    try:
        assert sink.backlogs == {"http://am-1:9093": 0, "https://***@am-2:9093": 0}
    finally:
        sink.close(timeout_s=1)
    with pytest.raises(ValueError, match="at least one"):
        AlertmanagerSink(" , ")
    with pytest.raises(ValueError, match="not both"):
        HttpOptions(username="u", password="p", bearer_token="t")
