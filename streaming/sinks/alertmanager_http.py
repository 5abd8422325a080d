"""How the Alertmanager sink speaks HTTP: a client per Alertmanager URL with the credentials and TLS
of ``sinks.alertmanager.*``, and what one POST's answer means for delivery.

Nothing here writes a credential where it could be read: details quote URLs through
:func:`udfs.redact.redact`, and the password and token stay out of reprs.

A password or token given as a file (``*.file``) is read at every request, as Prometheus reads its
``password_file`` / ``credentials_file``: a rotated Kubernetes Secret is used from the next request
on, without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from udfs.redact import redact

if TYPE_CHECKING:
    from streaming.config import SinkSettings

ALERTS_PATH = "/api/v2/alerts"
# What a POST's answer means: accepted; refused as malformed (retrying cannot help); anything
# else (unreachable, slow, 5xx, wrong credentials, a certificate it cannot verify): retry later.
OK, INVALID, UNAVAILABLE = "ok", "invalid", "unavailable"


@dataclass(frozen=True)
class HttpOptions:
    """Credentials and TLS for every URL of the sink (instances of one Alertmanager share them)."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None      # verify the server against this CA only (None: the system's CAs)
    cert_file: str | None = None    # a client certificate, for an Alertmanager that asks for one
    key_file: str | None = None
    password_file: str | None = None       # instead of password / bearer_token: read at every request
    bearer_token_file: str | None = None

    def __post_init__(self):
        if self.password is not None and self.password_file is not None:
            raise ValueError("give the password or a password file, not both")
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise ValueError("give the bearer token or a token file, not both")
        password = self.password is not None or self.password_file is not None
        if (self.username is None) == password:
            raise ValueError("basic auth needs both a username and a password")
        if self.username is not None and (self.bearer_token is not None or self.bearer_token_file is not None):
            raise ValueError("give basic auth or a bearer token, not both")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both cert_file and key_file")

    @classmethod
    def from_settings(cls, sinks: SinkSettings) -> HttpOptions:
        return cls(username=sinks.alertmanager_username, password=sinks.alertmanager_password,
                   bearer_token=sinks.alertmanager_bearer_token, ca_file=sinks.alertmanager_ca_file,
                   cert_file=sinks.alertmanager_cert_file, key_file=sinks.alertmanager_key_file,
                   password_file=sinks.alertmanager_password_file,
                   bearer_token_file=sinks.alertmanager_bearer_token_file)

    def credentials(self) -> tuple[tuple[str, str] | None, dict[str, str]]:
        """(basic auth, headers) for one request, the files read now; OSError if one cannot be read."""
        if self.username is not None:
            return (self.username, _secret(self.password, self.password_file)), {}
        if self.bearer_token is not None or self.bearer_token_file is not None:
            return None, {"Authorization": f"Bearer {_secret(self.bearer_token, self.bearer_token_file)}"}
        return None, {}


def _secret(value: str | None, path: str | None) -> str:
    # Surrounding whitespace dropped, as Prometheus does: `echo secret > file` leaves a newline.
    return value if path is None else Path(path).read_text().strip()


class AlertmanagerClient:
    """POSTs alerts to one Alertmanager (``url`` is its base URL, ``http://127.0.0.1:9093``).

    ``name`` is the URL with any userinfo hidden: what logs and the ``alertmanager`` metric label show.
    Not thread-safe: one client per delivery thread.
    """

    def __init__(self, url: str, options: HttpOptions = HttpOptions(), timeout_s: float = 5.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager url {redact(url)!r}: give the base URL, e.g. http://127.0.0.1:9093")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s}: must be > 0 (a few seconds)")
        self.name = redact(url.rstrip("/"))
        self.endpoint = url.rstrip("/") + ALERTS_PATH
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._options = options
        # Passed with every request: a session-wide verify loses to REQUESTS_CA_BUNDLE from the environment.
        self._verify = options.ca_file or True
        self._cert = (options.cert_file, options.key_file) if options.cert_file else None

    def post(self, body: list[dict]) -> tuple[str, str]:
        """(outcome, detail): OK, INVALID or UNAVAILABLE, and what Alertmanager or the network said."""
        try:
            auth, headers = self._options.credentials()
        except OSError as exc:  # a file being rotated, or unmounted: retried like an outage
            return UNAVAILABLE, f"cannot read {exc.filename}: {exc.strerror} (check sinks.alertmanager.*.file)"
        try:
            response = self._session.post(self.endpoint, json=body, timeout=self.timeout_s, auth=auth,
                                          headers=headers, verify=self._verify, cert=self._cert)
        except requests.exceptions.SSLError as exc:
            return UNAVAILABLE, redact(f"TLS: {exc}") + " (check sinks.alertmanager.tls.*)"
        except requests.RequestException as exc:  # its text may quote the URL, credentials and all
            return UNAVAILABLE, redact(f"{type(exc).__name__}: {exc}")
        if response.status_code == 200:
            return OK, ""
        detail = redact(f"HTTP {response.status_code}: {response.text[:300]}")
        if response.status_code in (400, 422):
            return INVALID, detail
        if response.status_code in (401, 403):
            detail += " (check sinks.alertmanager.basic.auth.* / bearer.token)"
        return UNAVAILABLE, detail

    def close(self) -> None:
        self._session.close()
