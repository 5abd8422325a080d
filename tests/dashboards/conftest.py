"""A loopback stand-in for Grafana's HTTP API, strict about the requests it accepts.

It implements the three calls ``epochwatch dashboards push`` makes, as documented in Grafana's
HTTP API reference (folder API, dashboard API):

- ``GET /api/folders/:uid`` -> 200 folder JSON, or 404 ``{"message": "folder not found"}``
- ``POST /api/folders`` ``{uid, title}`` -> 200 ``{uid, title, url, version}``; 409 when the uid exists
- ``POST /api/dashboards/db`` ``{dashboard, folderUid, overwrite, message}`` -> 200
  ``{id, uid, url, status: "success", version, slug}``; the version grows with every save

Every request needs ``Authorization: Bearer <token>`` (401 otherwise) and every POST a JSON
content type (415 otherwise); a body that breaks the contract gets 400 and is recorded, so a
test can assert on exactly what was sent. Saved dashboards are checked against the vendored
Grafana dashboard schema, as Grafana checks what it stores.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dashboards.validation import schema_errors


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict
    body: object
    status: int


@dataclass
class FakeGrafanaState:
    token: str
    folders: dict = field(default_factory=dict)
    dashboards: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


class _Handler(BaseHTTPRequestHandler):
    state: FakeGrafanaState  # set per server class

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def _serve(self, method: str):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        status, answer = self._answer(method, body)
        with self.state.lock:
            self.state.requests.append(Recorded(method, self.path, dict(self.headers), body, status))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, method: str, body):
        if self.headers.get("Authorization") != f"Bearer {self.state.token}":
            return 401, {"message": "Unauthorized"}
        if method == "POST" and not (self.headers.get("Content-Type") or "").startswith("application/json"):
            return 415, {"message": "content type must be application/json"}
        with self.state.lock:
            match = re.fullmatch(r"/api/folders/([A-Za-z0-9_-]{1,40})", self.path)
            if method == "GET" and match:
                folder = self.state.folders.get(match.group(1))
                return (200, folder) if folder else (404, {"message": "folder not found", "status": "not-found"})
            if method == "POST" and self.path == "/api/folders":
                return self._create_folder(body)
            if method == "POST" and self.path == "/api/dashboards/db":
                return self._save_dashboard(body)
        return 404, {"message": "not found"}

    def _create_folder(self, body):
        if not isinstance(body, dict) or set(body) - {"uid", "title", "parentUid"} or not body.get("title"):
            return 400, {"message": "bad request data: want {uid, title}"}
        uid = body.get("uid")
        if uid in self.state.folders:
            return 409, {"message": "a folder with the same uid already exists"}
        folder = {"id": len(self.state.folders) + 1, "uid": uid, "title": body["title"],
                  "url": f"/dashboards/f/{uid}/{_slug(body['title'])}", "version": 1}
        self.state.folders[uid] = folder
        return 200, folder

    def _save_dashboard(self, body):
        if not isinstance(body, dict) or set(body) != {"dashboard", "folderUid", "overwrite", "message"}:
            return 400, {"message": "bad request data: want {dashboard, folderUid, overwrite, message}"}
        dashboard = body["dashboard"]
        if not isinstance(dashboard, dict) or not dashboard.get("uid") or not dashboard.get("title"):
            return 400, {"message": "dashboard needs uid and title"}
        if dashboard.get("id") is not None:
            return 400, {"message": "dashboard id must be null or absent when saving by uid"}
        if body["folderUid"] not in self.state.folders:
            return 400, {"message": "folder not found"}
        errors = schema_errors(dashboard)
        if errors:
            return 400, {"message": "invalid dashboard: " + "; ".join(errors[:3])}
        uid = dashboard["uid"]
        previous = self.state.dashboards.get(uid)
        if previous and body["overwrite"] is not True:
            return 412, {"message": "A dashboard with the same uid already exists", "status": "name-exists"}
        version = previous["version"] + 1 if previous else 1
        internal_id = previous["id"] if previous else len(self.state.dashboards) + 1
        slug = _slug(dashboard["title"])
        self.state.dashboards[uid] = {"id": internal_id, "version": version, "folderUid": body["folderUid"],
                                      "message": body["message"], "dashboard": dashboard}
        return 200, {"id": internal_id, "uid": uid, "url": f"/d/{uid}/{slug}", "status": "success",
                     "version": version, "slug": slug}


class FakeGrafana:
    def __init__(self, token: str):
        self.state = FakeGrafanaState(token=token)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def token(self) -> str:
        return self.state.token

    @property
    def requests(self) -> list[Recorded]:
        with self.state.lock:
            return list(self.state.requests)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def fake_grafana():
    """A fake Grafana accepting only ``Bearer <fake_grafana.token>``."""
    with FakeGrafana("glsa_test_0123456789abcdef") as grafana:
        yield grafana
