"""Push dashboards to Grafana's HTTP API with grafana-client.

Credentials come only from the environment: ``GRAFANA_TOKEN`` (a service-account token, sent as
``Authorization: Bearer``) or ``GRAFANA_USER`` + ``GRAFANA_PASSWORD`` (basic auth). They are
never printed: every error text that leaves this module has them replaced by ``***``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlsplit

from streaming.config import ConfigError

TOKEN_ENV, USER_ENV, PASSWORD_ENV = "GRAFANA_TOKEN", "GRAFANA_USER", "GRAFANA_PASSWORD"
DEFAULT_FOLDER_TITLE = "epochwatch"
DEFAULT_MESSAGE = "epochwatch dashboards as code"
REDACTED = "***"


class PushError(RuntimeError):
    """Grafana refused or could not be reached; the text is already free of credentials."""


@dataclass(frozen=True)
class Credentials:
    token: str | None = None
    user: str | None = None
    password: str | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.token, self.password) if s)

    def for_client(self):
        return self.token if self.token else (self.user, self.password)


@dataclass(frozen=True)
class Pushed:
    uid: str
    title: str
    version: int | None
    url: str | None


def credentials_from_env(environ: Mapping[str, str] = os.environ) -> Credentials:
    token = environ.get(TOKEN_ENV, "").strip()
    if token:
        return Credentials(token=token)
    user, password = environ.get(USER_ENV, ""), environ.get(PASSWORD_ENV, "")
    if user and password:
        return Credentials(user=user, password=password)
    if user or password:
        missing = PASSWORD_ENV if user else USER_ENV
        raise ConfigError(missing, "is not set while the other basic-auth variable is",
                          f"export both {USER_ENV} and {PASSWORD_ENV}, or use {TOKEN_ENV} instead")
    raise ConfigError(TOKEN_ENV, "is not set (no Grafana credentials in the environment)",
                      f"export {TOKEN_ENV}=<service account token> (or {USER_ENV} and {PASSWORD_ENV}); "
                      "credentials are never read from files or flags")


def check_url(url: str) -> str:
    """The Grafana base URL, or a ConfigError naming ``--url`` and the fix."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("--url", f"{url!r} is not an http(s) URL",
                          "pass Grafana's base URL, e.g. --url http://127.0.0.1:3000")
    if parts.username or parts.password:
        raise ConfigError("--url", "carries credentials (user:password@host)",
                          f"remove them from the URL and export {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}")
    if parts.query or parts.fragment:
        raise ConfigError("--url", "has a query string or fragment", "pass only scheme, host, port and path prefix")
    return url.rstrip("/")


def check_folder_uid(uid: str) -> str:
    # Grafana uids: up to 40 characters of letters, digits, '-' and '_'.
    if not uid or len(uid) > 40 or not all(ch.isalnum() or ch in "-_" for ch in uid):
        raise ConfigError("--folder-uid", f"{uid!r} is not a valid Grafana uid",
                          "use 1-40 letters, digits, '-' or '_', e.g. --folder-uid epochwatch")
    return uid


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def make_client(url: str, credentials: Credentials, timeout_s: float = 10.0):
    from grafana_client import GrafanaApi

    return GrafanaApi.from_url(url, credential=credentials.for_client(), timeout=timeout_s)


def push_all(dashboards: Mapping[str, Mapping], *, url: str, folder_uid: str,
             folder_title: str = DEFAULT_FOLDER_TITLE, message: str = DEFAULT_MESSAGE,
             credentials: Credentials, timeout_s: float = 10.0,
             client_factory: Callable = make_client) -> list[Pushed]:
    """Ensure the folder exists (by uid), then save every dashboard into it with overwrite."""
    url, folder_uid = check_url(url), check_folder_uid(folder_uid)
    secrets = credentials.secrets
    try:
        api = client_factory(url, credentials, timeout_s)
        _ensure_folder(api, folder_uid, folder_title)
        return [_save(api, dashboard, folder_uid, message) for dashboard in dashboards.values()]
    except PushError as exc:
        raise PushError(redact(str(exc), secrets)) from None
    except Exception as exc:  # grafana-client / niquests errors: rewrite without secrets, drop the chain
        raise PushError(redact(_describe(exc, url), secrets)) from None


def _ensure_folder(api, uid: str, title: str) -> None:
    from grafana_client.client import GrafanaClientError

    try:
        api.folder.get_folder(uid)
        return
    except GrafanaClientError as exc:
        if exc.status_code != 404:
            raise
    api.folder.create_folder(title, uid=uid)


def _save(api, dashboard: Mapping, folder_uid: str, message: str) -> Pushed:
    body = {k: v for k, v in dashboard.items() if k != "id"}
    if not body.get("uid") or not body.get("title"):
        raise PushError("a dashboard without uid or title cannot be pushed (render it with epochwatch)")
    answer = api.dashboard.update_dashboard({
        "dashboard": body, "folderUid": folder_uid, "overwrite": True, "message": message,
    })
    return Pushed(uid=answer.get("uid", body["uid"]), title=body["title"],
                  version=answer.get("version"), url=answer.get("url"))


def _describe(exc: Exception, url: str) -> str:
    status = getattr(exc, "status_code", None)
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if status == 401:
        return (f"Grafana at {url} refused the credentials (401: {detail}). "
                f"Fix: check {TOKEN_ENV} (or {USER_ENV}/{PASSWORD_ENV}) and that it is not expired")
    if status == 403:
        return (f"Grafana at {url} denied the request (403: {detail}). "
                "Fix: give the service account the Editor role on the folder (or Admin to create it)")
    if status:
        return f"Grafana at {url} answered {status}: {detail}"
    return f"cannot reach Grafana at {url}: {detail}. Fix: check --url and that Grafana is running"
