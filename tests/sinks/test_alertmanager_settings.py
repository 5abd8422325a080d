"""The Alertmanager sink's settings (sinks.alertmanager.*, sinks.external.url): several URLs,
credentials from the environment, TLS files; every error names the key, no secret is ever shown.
Delivery itself is tested against real Alertmanagers (tests/integration/observability)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming import config
from streaming.commands import main
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.alertmanager_http import UNAVAILABLE, AlertmanagerClient, HttpOptions

AM = "http://am-1:9093"


@pytest.fixture
def secret_file(tmp_path):
    """A file holding a secret, as a key of a Kubernetes Secret mounted as a volume is."""
    path = tmp_path / "password"
    path.write_text("pw-from-file\n")
    return str(path)


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


def test_credentials_from_files_are_read_at_every_request(secret_file, tmp_path):
    """As Prometheus reads password_file / credentials_file: a rotated secret is used from the next
    request on. The delivery through a real Alertmanager while the file rotates:
    tests/integration/observability/test_alertmanager_delivery.py."""
    basic = HttpOptions.from_settings(load(**{"alertmanager.url": AM, "alertmanager.basic.auth.username": "epochwatch",
                                              "alertmanager.basic.auth.password.file": secret_file}))
    assert basic == HttpOptions(username="epochwatch", password_file=secret_file)
    assert basic.credentials() == (("epochwatch", "pw-from-file"), {})   # the newline `echo` leaves, dropped
    Path(secret_file).write_text("rotated-pw")
    assert basic.credentials() == (("epochwatch", "rotated-pw"), {})
    token_file = tmp_path / "token"
    token_file.write_text("token-from-file")
    bearer = HttpOptions.from_settings(load(**{"alertmanager.url": AM,
                                               "alertmanager.bearer.token.file": str(token_file)}))
    assert bearer.credentials() == (None, {"Authorization": "Bearer token-from-file"})
    assert "pw-from-file" not in repr(basic) and "token-from-file" not in repr(bearer)


def test_a_secret_file_gone_at_send_time_is_retried_like_an_outage(secret_file):
    """Between a Secret's removal and its return, nothing is sent with a stale or empty secret: the
    POST is not made (the URL is a closed loopback port, never reached) and the alert waits."""
    client = AlertmanagerClient("http://127.0.0.1:9", HttpOptions(username="epochwatch", password_file=secret_file))
    try:
        Path(secret_file).unlink()
        outcome, detail = client.post([])
    finally:
        client.close()
    assert outcome == UNAVAILABLE and secret_file in detail and "sinks.alertmanager" in detail


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
    ({"alertmanager.basic.auth.username": "u", "alertmanager.basic.auth.password": "p",
      "alertmanager.basic.auth.password.file": "SECRET"}, "sinks.alertmanager.basic.auth.password.file", "keep one",
     "12-a password inline and in a file: which one is sent would be a guess"),
    ({"alertmanager.bearer.token": "t", "alertmanager.bearer.token.file": "SECRET"},
     "sinks.alertmanager.bearer.token.file", "keep one", "13-likewise a token"),
    ({"alertmanager.basic.auth.username": "u", "alertmanager.basic.auth.password.file": "/nonexistent/password"},
     "sinks.alertmanager.basic.auth.password.file", "/nonexistent/password cannot be read",
     "14-a secret file that is not there (a volume not mounted) would fail every delivery"),
    ({"alertmanager.bearer.token.file": "EMPTY"}, "sinks.alertmanager.bearer.token.file", "is empty",
     "15-an empty token would be sent as `Bearer ` and refused for ever"),
    ({"alertmanager.bearer.token.file": "DIR"}, "sinks.alertmanager.bearer.token.file", "is a directory",
     "16-the Secret's mount point instead of its key's file"),
    ({"alertmanager.basic.auth.password.file": "SECRET"}, "sinks.alertmanager.basic.auth.username",
     "basic.auth.password.file is set", "17-a password file alone: basic auth still needs its username"),
    ({"alertmanager.basic.auth.username": "u", "alertmanager.basic.auth.password": "p",
      "alertmanager.bearer.token.file": "SECRET"}, "sinks.alertmanager.bearer.token.file", "one kind of credentials",
     "18-one Authorization header, whether the token is inline or in a file"),
]


@pytest.mark.parametrize("overrides, key, words, why", BAD, ids=[b[3] for b in BAD])
def test_errors_name_the_key_and_the_fix(overrides, key, words, why, pem, secret_file, tmp_path, monkeypatch):
    monkeypatch.delenv("EPOCHWATCH_TEST_UNSET_PASSWORD", raising=False)
    (tmp_path / "empty").write_text("\n")
    files = {"PEM": pem, "SECRET": secret_file, "EMPTY": str(tmp_path / "empty"), "DIR": str(tmp_path)}
    overrides = {k: files.get(v, v) for k, v in overrides.items()}
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
    assert "sinks.alertmanager.basic.auth.password.file = null" in out


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
    with pytest.raises(ValueError, match="not both"):
        HttpOptions(username="u", password="p", password_file="/run/secrets/pw")
