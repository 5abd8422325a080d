"""``epochwatch dashboards push`` against a loopback server that checks Grafana's HTTP API contract."""

from __future__ import annotations

import pytest

from dashboards import build_all
from dashboards.push import Credentials, PushError, credentials_from_env, push_all, redact
from streaming.commands import main
from streaming.config import ConfigError

FOLDER = "epochwatch-prod"
UIDS = list(build_all())


def push(grafana, **kwargs):
    return push_all(build_all(), url=grafana.url, folder_uid=FOLDER, folder_title="Kafka / epochwatch",
                    message="deploy 42", credentials=Credentials(token=grafana.token), **kwargs)


def test_first_push_creates_the_folder_then_saves_every_dashboard(fake_grafana):
    pushed = push(fake_grafana)

    calls = [(r.method, r.path, r.status) for r in fake_grafana.requests]
    assert calls == [("GET", f"/api/folders/{FOLDER}", 404), ("POST", "/api/folders", 200)] + \
        [("POST", "/api/dashboards/db", 200)] * len(UIDS)
    requests = fake_grafana.requests
    assert requests[1].body == {"uid": FOLDER, "title": "Kafka / epochwatch"}
    expected = build_all()
    for request, uid in zip(requests[2:], UIDS):
        assert request.body == {"dashboard": expected[uid], "folderUid": FOLDER, "overwrite": True, "message": "deploy 42"}
        assert "id" not in request.body["dashboard"]
    for request in requests:
        assert request.headers["Authorization"] == f"Bearer {fake_grafana.token}"
        if request.method == "POST":
            assert request.headers["Content-Type"].startswith("application/json")
    assert [(p.uid, p.version) for p in pushed] == [(uid, 1) for uid in UIDS]
    assert pushed[0].url == "/d/epochwatch-fleet/epochwatch-fleet-overview"


def test_second_push_keeps_the_folder_and_overwrites_with_a_new_version(fake_grafana):
    push(fake_grafana)
    before = len(fake_grafana.requests)
    pushed = push(fake_grafana)

    calls = [(r.method, r.path, r.status) for r in fake_grafana.requests[before:]]
    assert calls == [("GET", f"/api/folders/{FOLDER}", 200)] + [("POST", "/api/dashboards/db", 200)] * len(UIDS)
    assert [p.version for p in pushed] == [2] * len(UIDS)
    assert set(fake_grafana.state.folders) == {FOLDER}
    assert fake_grafana.state.dashboards["epochwatch-monitor"]["version"] == 2


def test_missing_token_is_a_clear_error_and_sends_nothing(fake_grafana, monkeypatch, capsys):
    for name in ("GRAFANA_TOKEN", "GRAFANA_USER", "GRAFANA_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    code = main(["dashboards", "push", "--url", fake_grafana.url, "--folder-uid", FOLDER])
    err = capsys.readouterr().err
    assert code == 2
    assert "GRAFANA_TOKEN" in err and "is not set" in err and "export GRAFANA_TOKEN=" in err
    assert fake_grafana.requests == []


def test_rejected_token_is_named_but_never_shown(fake_grafana, monkeypatch, capsys):
    wrong = "glsa_wrong_token_must_not_leak"
    monkeypatch.setenv("GRAFANA_TOKEN", wrong)
    code = main(["dashboards", "push", "--url", fake_grafana.url, "--folder-uid", FOLDER])
    out, err = capsys.readouterr()
    assert code == 1
    assert "401" in err and "GRAFANA_TOKEN" in err
    assert wrong not in out + err
    assert [r.status for r in fake_grafana.requests] == [401], "stops at the first refusal"


def test_token_never_appears_in_output_of_a_successful_push(fake_grafana, monkeypatch, capsys):
    monkeypatch.setenv("GRAFANA_TOKEN", fake_grafana.token)
    code = main(["dashboards", "push", "--url", fake_grafana.url, "--folder-uid", FOLDER, "--message", "ci run 7"])
    out, err = capsys.readouterr()
    assert code == 0
    assert fake_grafana.token not in out + err
    lines = out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == UIDS
    assert all("version 1" in line for line in lines)
    assert fake_grafana.state.dashboards["epochwatch-fleet"]["message"] == "ci run 7"


def test_errors_that_carry_a_secret_are_redacted_and_unchained():
    secret = "glsa_inside_an_exception"

    def exploding_client(url, credentials, timeout_s):
        raise RuntimeError(f"proxy said: Authorization: Bearer {secret}")

    with pytest.raises(PushError) as exc:
        push_all(build_all(), url="http://127.0.0.1:1", folder_uid=FOLDER, credentials=Credentials(token=secret),
                 client_factory=exploding_client)
    assert secret not in str(exc.value) and "***" in str(exc.value)
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_unreachable_grafana_names_the_fix_without_the_token(fake_grafana):
    url, token = fake_grafana.url, fake_grafana.token
    fake_grafana.__exit__(None, None, None)   # nothing listens on the port any more
    with pytest.raises(PushError) as exc:
        push_all(build_all(), url=url, folder_uid=FOLDER, credentials=Credentials(token=token), timeout_s=5)
    assert "cannot reach Grafana" in str(exc.value) and "--url" in str(exc.value)
    assert token not in str(exc.value)


@pytest.mark.parametrize("url, problem", [
    ("ftp://127.0.0.1:3000", "is not an http(s) URL"),
    ("127.0.0.1:3000", "is not an http(s) URL"),
    ("http://", "is not an http(s) URL"),
    ("http://admin:secret@127.0.0.1:3000", "carries credentials"),
    ("http://127.0.0.1:3000/?orgId=2", "has a query string"),
])
def test_bad_url_names_the_flag_and_sends_nothing(fake_grafana, monkeypatch, capsys, url, problem):
    monkeypatch.setenv("GRAFANA_TOKEN", fake_grafana.token)
    assert main(["dashboards", "push", "--url", url, "--folder-uid", FOLDER]) == 2
    err = capsys.readouterr().err
    assert "'--url'" in err and problem in err and "Fix:" in err
    assert "secret" not in err
    assert fake_grafana.requests == []


def test_bad_folder_uid_names_the_flag(monkeypatch, capsys):
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_unused")
    assert main(["dashboards", "push", "--url", "http://127.0.0.1:3000", "--folder-uid", "a/b"]) == 2
    assert "'--folder-uid'" in capsys.readouterr().err


@pytest.mark.parametrize("env, expected, why", [
    ({"GRAFANA_TOKEN": "t"}, Credentials(token="t"), "1: a token is used as Bearer"),
    ({"GRAFANA_TOKEN": "t", "GRAFANA_USER": "u", "GRAFANA_PASSWORD": "p"}, Credentials(token="t"),
     "2: the token wins over basic auth"),
    ({"GRAFANA_USER": "u", "GRAFANA_PASSWORD": "p"}, Credentials(user="u", password="p"), "3: basic auth"),
    ({"GRAFANA_TOKEN": "  ", "GRAFANA_USER": "u", "GRAFANA_PASSWORD": "p"}, Credentials(user="u", password="p"),
     "4: a blank token counts as unset"),
])
def test_credentials_from_env(env, expected, why):
    assert credentials_from_env(env) == expected, why


@pytest.mark.parametrize("env, key", [
    ({}, "GRAFANA_TOKEN"),
    ({"GRAFANA_USER": "u"}, "GRAFANA_PASSWORD"),
    ({"GRAFANA_PASSWORD": "p"}, "GRAFANA_USER"),
])
def test_incomplete_credentials_name_the_missing_variable(env, key):
    with pytest.raises(ConfigError) as exc:
        credentials_from_env(env)
    assert exc.value.key == key
    assert "export" in exc.value.fix


def test_redact():
    assert redact("a tok b tok", ("tok",)) == "a *** b ***"
    assert Credentials(user="u", password="pw").secrets == ("pw",)
