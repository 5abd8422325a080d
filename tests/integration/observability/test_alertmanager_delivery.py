"""AlertmanagerSink against real Alertmanagers as a platform team runs them, configured through
streaming.config as `epochwatch run` is: an HA pair (every instance gets every alert, also while
the other is down and after it returns; one that hangs holds back nothing), basic auth and TLS
served by Alertmanager itself (--web.config.file), a client certificate, and a bearer token
checked by a proxy in front (Alertmanager has no token auth of its own); a password or token file
rotated while the sink runs. Wrong credentials or an unknown CA are counted, retried and lose nothing."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

import pytest

from streaming import config
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.labels import presented
from streaming.sinks.metrics import Metrics
from tests.integration.observability.services import (
    BearerTokenProxy,
    WebhookReceiver,
    alertmanager_process,
    render_alertmanager_config,
    write_web_config,
)
from tests.support.alerts import rec
from tests.support.polling import wait_until
from tests.support.tls import make_pki

pytestmark = pytest.mark.integration

PASSWORD = "pw-4-alertmanager"
TOKEN = "token-4-alertmanager"


def now_ms() -> int:
    return int(time.time() * 1000)


def alert(fp: str, alertname: str = "BrokerMetadataLag", severity: str = "critical", broker_id: str = "1") -> dict:
    return rec(fp, severity=severity, alertname=alertname, starts=now_ms(), broker_id=broker_id)


def resolution(record: dict) -> dict:
    ends = now_ms()
    return {**record, "status": "resolved", "event_id": f"{record['fingerprint']}:resolved", "event_time": ends,
            "ends_at": ends}


def shown(record: dict) -> dict:
    """The record's labels as the sink sends them (sinks.labels' defaults: streaming.sinks.labels)."""
    return presented(record)["labels"]


def find(am, record: dict) -> dict | None:
    """The record's alert as the Alertmanager holds it (active or suppressed), None if it holds none."""
    return next((a for a in am.get("/api/v2/alerts").json() if a["labels"] == shown(record)), None)


def notifications_done(am) -> float:
    """Webhook notifications the Alertmanager has finished (and so logged in its nflog)."""
    webhook = 'alertmanager_notification_latency_seconds_count{integration="webhook"'
    lines = am.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(webhook))


def sample(metrics: Metrics, name: str, url: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"alertmanager": url})


def failures(metrics: Metrics, url: str) -> float:
    return sample(metrics, "epochwatch_alertmanager_delivery_failures_total", url)


def settings(**sinks) -> config.SinkSettings:
    """The sinks section as `epochwatch run` loads it (secrets through ${VAR})."""
    return config.load(overrides={f"sinks.{k}": v for k, v in sinks.items()}).sinks


def sending_one_alert(sinks, keys: dict, **options) -> tuple[AlertmanagerSink, Metrics, dict]:
    """A sink as ``sinks.*`` keys describe it (made through the ``sinks`` fixture; ``options`` as
    AlertmanagerSink takes them), its metrics, and the one alert it was just given to deliver."""
    metrics = Metrics()
    sink = sinks(AlertmanagerSink.from_settings(settings(**keys), metrics, **options))
    lag = alert("lag")
    sink.add([lag])
    sink.flush()
    return sink, metrics, lag


@pytest.fixture
def sinks():
    """Make sinks that are closed at the end of the test (their threads are daemons, but a test
    must not leave one posting into the next)."""
    made = []

    def make(sink: AlertmanagerSink) -> AlertmanagerSink:
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.close(timeout_s=3)


@pytest.fixture
def start_alertmanager(tmp_path):
    """start_alertmanager(name, **alertmanager_process options) -> a started Alertmanager routing to
    its own webhook receiver (``.hook``); all stopped at the end."""
    started = []

    def start(name: str, **options):
        workdir = tmp_path / name
        workdir.mkdir()
        hook = WebhookReceiver()
        am = alertmanager_process(workdir, render_alertmanager_config(workdir / "alertmanager.yml", hook), **options)
        am.hook = hook
        started.append(am)
        return am.start()

    yield start
    for am in started:
        am.stop()
        am.hook.close()


# --- an HA pair --------------------------------------------------------------------------------

def test_both_instances_of_an_ha_pair_get_every_alert_while_one_is_down_and_after_it_returns(
        start_alertmanager, sinks):
    am1, am2 = start_alertmanager("am1"), start_alertmanager("am2")
    metrics = Metrics()
    sink = sinks(AlertmanagerSink.from_settings(
        settings(**{"alertmanager.url": f"{am1.url},{am2.url}", "external.url": "https://epochwatch.example.com"}),
        metrics))
    lag = alert("lag", broker_id="4")
    sink.add([lag])
    sink.flush()
    for am in (am1, am2):
        found = wait_until(lambda: find(am, lag), timeout_s=10, what=f"the alert on {am.url}")
        assert found["generatorURL"] == "https://epochwatch.example.com"      # sinks.external.url
        wait_until(lambda: ("firing", shown(lag)) in am.hook.alerts("/pager"), timeout_s=15,
                   what=f"{am.url} paging")
    # am2 keeps its notification log over a stop: it will know to page the resolution
    wait_until(lambda: notifications_done(am2) >= 1, timeout_s=15, what="am2 to finish its notification")

    am2.stop()
    duplicate = alert("dup", alertname="DuplicateBrokerId", broker_id="7")
    sink.add([resolution(lag), duplicate])
    sink.flush()
    wait_until(lambda: find(am1, duplicate) and find(am1, lag) is None, timeout_s=10,
               what="am1 to get the new alert and the resolution while am2 is down")
    wait_until(lambda: ("firing", shown(duplicate)) in am1.hook.alerts("/pager")
               and ("resolved", shown(lag)) in am1.hook.alerts("/pager"), timeout_s=15, what="am1 paging both")
    wait_until(lambda: failures(metrics, am2.url) >= 2, timeout_s=15,
               what="am2's failed deliveries retried and counted")
    assert sample(metrics, "epochwatch_alertmanager_backlog", am2.url) == 2     # both kept for am2
    wait_until(lambda: sample(metrics, "epochwatch_alertmanager_backlog", am1.url) == 0, timeout_s=5,
               what="am1's backlog at 0")
    assert failures(metrics, am1.url) == 0

    am2.start()            # the same port and storage: the instance is back
    wait_until(lambda: sample(metrics, "epochwatch_alertmanager_backlog", am2.url) == 0, timeout_s=15,
               what="am2's backlog to drain")
    assert find(am2, duplicate) is not None and find(am2, lag) is None
    wait_until(lambda: ("firing", shown(duplicate)) in am2.hook.alerts("/pager")
               and ("resolved", shown(lag)) in am2.hook.alerts("/pager"), timeout_s=15,
               what="am2 paging what it missed: the new alert and the resolution")
    assert sink.backlogs == {am1.url: 0, am2.url: 0}


def test_an_instance_that_hangs_does_not_hold_back_the_other(alertmanager, sinks):
    metrics = Metrics()
    with socket.socket() as hanging:          # accepts TCP connections, never answers HTTP
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        stuck = f"http://127.0.0.1:{hanging.getsockname()[1]}"
        sink = sinks(AlertmanagerSink([stuck, alertmanager.url], timeout_s=10, metrics=metrics))
        lag = alert("lag")
        sink.add([lag])
        sink.flush()
        wait_until(lambda: find(alertmanager, lag) and sink.backlogs[alertmanager.url] == 0, timeout_s=9,
                   what="the alert accepted by the answering Alertmanager")
        assert failures(metrics, stuck) == 0, "the hanging POST has not even timed out: nothing waited for it"
        assert sink.backlogs == {stuck: 1, alertmanager.url: 0}
        sink.close(timeout_s=0.5)


# --- credentials -------------------------------------------------------------------------------

def test_basic_auth_from_the_environment(start_alertmanager, sinks, tmp_path, monkeypatch, caplog):
    web = write_web_config(tmp_path / "web.yml", users={"epochwatch": PASSWORD})
    am = start_alertmanager("am", web_config=web, probe={"auth": ("epochwatch", PASSWORD)})
    keys = {"alertmanager.url": am.url, "alertmanager.basic.auth.username": "epochwatch",
            "alertmanager.basic.auth.password": "${EPOCHWATCH_TEST_AM_PASSWORD}"}
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_PASSWORD", PASSWORD)
    right = sinks(AlertmanagerSink.from_settings(settings(**keys), Metrics()))
    lag = alert("lag")
    right.add([lag])
    right.flush()
    wait_until(lambda: find(am, lag), timeout_s=10, what="the alert delivered with the right password")

    monkeypatch.setenv("EPOCHWATCH_TEST_AM_PASSWORD", "not-the-password")
    metrics = Metrics()
    wrong = sinks(AlertmanagerSink.from_settings(settings(**keys), metrics))
    duplicate = alert("dup", alertname="DuplicateBrokerId")
    with caplog.at_level(logging.WARNING, logger="streaming.sinks.alertmanager"):
        wrong.add([duplicate])
        wrong.flush()
        wait_until(lambda: failures(metrics, am.url) >= 2, timeout_s=15, what="refused deliveries retried and counted")
    assert find(am, duplicate) is None and wrong.backlog == 1        # kept, not dropped
    assert "HTTP 401" in caplog.text and "basic.auth" in caplog.text
    assert "not-the-password" not in caplog.text and PASSWORD not in caplog.text
    assert wrong.close(timeout_s=3) == 1

    # The fix: the right secret and a restart, which re-seeds from the alerts topic what waited.
    monkeypatch.setenv("EPOCHWATCH_TEST_AM_PASSWORD", PASSWORD)
    fixed = sinks(AlertmanagerSink.from_settings(settings(**keys), Metrics()))
    fixed.seed([duplicate])
    fixed.flush()
    wait_until(lambda: find(am, duplicate), timeout_s=10, what="what waited, delivered after the fix")


def test_no_credentials_against_an_alertmanager_that_wants_them(start_alertmanager, sinks, tmp_path):
    web = write_web_config(tmp_path / "web.yml", users={"epochwatch": PASSWORD})
    am = start_alertmanager("am", web_config=web, probe={"auth": ("epochwatch", PASSWORD)})
    metrics = Metrics()
    sink = sinks(AlertmanagerSink(am.url, metrics=metrics, backoff_max_s=1))
    lag = alert("lag")
    sink.add([lag])
    sink.flush()
    wait_until(lambda: failures(metrics, am.url) >= 2, timeout_s=15, what="refused deliveries retried and counted")
    assert find(am, lag) is None and sink.backlog == 1


@pytest.mark.parametrize("token, delivered", [(TOKEN, True), ("a-revoked-token", False)], ids=["right", "wrong"])
def test_bearer_token_through_the_proxy_in_front(alertmanager, sinks, monkeypatch, token, delivered):
    proxy = BearerTokenProxy(alertmanager.url, TOKEN)
    try:
        monkeypatch.setenv("EPOCHWATCH_TEST_AM_TOKEN", token)
        sink, metrics, lag = sending_one_alert(
            sinks, {"alertmanager.url": proxy.url, "alertmanager.bearer.token": "${EPOCHWATCH_TEST_AM_TOKEN}"})
        if delivered:
            wait_until(lambda: find(alertmanager, lag), timeout_s=10, what="the alert through the proxy")
            assert proxy.refused == 0
        else:
            wait_until(lambda: failures(metrics, proxy.url) >= 2, timeout_s=15, what="refused deliveries counted")
            assert find(alertmanager, lag) is None and sink.backlog == 1 and proxy.refused >= 2
    finally:
        proxy.close()


def mounted_secret(directory, key: str, value: str) -> str:
    """``directory/key`` as the kubelet lays out a Secret volume: ``key -> ..data/key`` and
    ``..data -> ..<version>``; called again, it rotates the secret the way the kubelet does, by
    swapping ``..data`` in one rename. Returns the path a config names."""
    version = directory / f"..{uuid.uuid4().hex[:8]}"
    version.mkdir(parents=True)
    (version / key).write_text(value + "\n")
    swap = directory / "..data_tmp"
    swap.symlink_to(version.name)
    os.replace(swap, directory / "..data")
    if not (directory / key).is_symlink():
        (directory / key).symlink_to(f"..data/{key}")
    return str(directory / key)


def test_basic_auth_password_file_rotated_while_the_sink_runs(start_alertmanager, sinks, tmp_path):
    """The password is rotated on both sides: Alertmanager's web config first (it reads the file at
    every request), so the sink's next POSTs are refused and counted, then the mounted Secret; the
    alert that waited goes through with the new password, with the same sink, no restart."""
    web = write_web_config(tmp_path / "web.yml", users={"epochwatch": PASSWORD})
    am = start_alertmanager("am", web_config=web, probe={"auth": ("epochwatch", PASSWORD)})
    secret = tmp_path / "secret"
    keys = {"alertmanager.url": am.url, "alertmanager.basic.auth.username": "epochwatch",
            "alertmanager.basic.auth.password.file": mounted_secret(secret, "password", PASSWORD)}
    sink, metrics, lag = sending_one_alert(sinks, keys, backoff_max_s=1)
    wait_until(lambda: find(am, lag), timeout_s=10, what="the alert delivered with the first password")

    write_web_config(web, users={"epochwatch": "pw-rotated"})
    am.probe["auth"] = ("epochwatch", "pw-rotated")     # the test's own reads of Alertmanager
    duplicate = alert("dup", alertname="DuplicateBrokerId")
    sink.add([duplicate])
    sink.flush()
    wait_until(lambda: failures(metrics, am.url) >= 1, timeout_s=15, what="the old password refused")
    assert find(am, duplicate) is None and sink.backlog == 1

    mounted_secret(secret, "password", "pw-rotated")
    # Alertmanager stores the alert before the sink reads its answer: wait for both
    wait_until(lambda: find(am, duplicate) and sink.backlog == 0, timeout_s=10,
               what="the waiting alert sent with the new password, the backlog empty")
    later = alert("later", alertname="ControllerFlapping")
    sink.add([later])
    sink.flush()
    wait_until(lambda: find(am, later), timeout_s=10, what="the next alert, with the new password too")


def test_bearer_token_file_rotated_while_the_sink_runs(alertmanager, sinks, tmp_path):
    proxy = BearerTokenProxy(alertmanager.url, TOKEN)
    secret = tmp_path / "secret"
    keys = {"alertmanager.url": proxy.url, "alertmanager.bearer.token.file": mounted_secret(secret, "token", TOKEN)}
    try:
        sink, _, lag = sending_one_alert(sinks, keys, backoff_max_s=1)
        wait_until(lambda: find(alertmanager, lag), timeout_s=10, what="the alert with the first token")

        proxy.token = "token-rotated"
        duplicate = alert("dup", alertname="DuplicateBrokerId")
        sink.add([duplicate])
        sink.flush()
        wait_until(lambda: proxy.refused >= 1, timeout_s=15, what="the old token refused")
        assert find(alertmanager, duplicate) is None

        mounted_secret(secret, "token", "token-rotated")
        wait_until(lambda: find(alertmanager, duplicate) and sink.backlog == 0, timeout_s=10,
                   what="the waiting alert with the new token, the backlog empty")
    finally:
        proxy.close()


# --- TLS ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ca, delivered", [("ca", True), ("other_ca", False), (None, False)],
                         ids=["its-ca", "another-ca", "system-cas"])
def test_tls_verified_against_the_configured_ca(start_alertmanager, sinks, tmp_path, ca, delivered):
    pki = make_pki(tmp_path / "pki")
    web = write_web_config(tmp_path / "web.yml", cert=pki.server_cert, key=pki.server_key)
    am = start_alertmanager("am", web_config=web, scheme="https", probe={"verify": str(pki.ca)})
    keys = {"alertmanager.url": am.url}
    if ca is not None:
        keys["alertmanager.tls.ca.file"] = str(getattr(pki, ca))
    sink, metrics, lag = sending_one_alert(sinks, keys)
    if delivered:
        wait_until(lambda: find(am, lag), timeout_s=10, what="the alert over TLS")
        assert failures(metrics, am.url) == 0
    else:
        wait_until(lambda: failures(metrics, am.url) >= 2, timeout_s=15, what="unverifiable deliveries counted")
        assert find(am, lag) is None and sink.backlog == 1


@pytest.mark.parametrize("with_cert", [True, False], ids=["client-cert", "none"])
def test_client_certificate_for_an_alertmanager_that_requires_one(start_alertmanager, sinks, tmp_path, with_cert):
    pki = make_pki(tmp_path / "pki")
    web = write_web_config(tmp_path / "web.yml", cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca)
    am = start_alertmanager("am", web_config=web, scheme="https",
                            probe={"verify": str(pki.ca), "cert": (str(pki.client_cert), str(pki.client_key))})
    keys = {"alertmanager.url": am.url, "alertmanager.tls.ca.file": str(pki.ca)}
    if with_cert:
        keys.update({"alertmanager.tls.cert.file": str(pki.client_cert),
                     "alertmanager.tls.key.file": str(pki.client_key)})
    sink, metrics, lag = sending_one_alert(sinks, keys)
    if with_cert:
        wait_until(lambda: find(am, lag), timeout_s=10, what="the alert with a client certificate")
    else:
        wait_until(lambda: failures(metrics, am.url) >= 2, timeout_s=15, what="refused handshakes counted")
        assert find(am, lag) is None and sink.backlog == 1
