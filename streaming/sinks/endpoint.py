"""The driver's HTTP endpoint on ``sinks.metrics.port``: ``/metrics`` for Prometheus (prometheus_client's
own WSGI app, so content negotiation, gzip and ``name[]`` filters stay the library's) and the status
view, ``/status`` and ``/status/<cluster>`` (streaming.sinks.status), answered as Burrow's HTTP API
answers: ``{"error": false, "message": ..., "status": {...}, "request": {"url": ..., "host": ...}}``,
errors with ``"error": true`` and a 4xx code. One small threaded server on a daemon thread: a
request reads a copy of the board, it never waits for a micro-batch."""

from __future__ import annotations

import json
import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

STATUS_PATH = "/status"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        """Scrapes and status requests are not logged (every few seconds, for ever)."""


class MetricsEndpoint:
    """``/metrics`` of ``registry``, and the status view when given a ``board`` (the collector's
    endpoint has none)."""

    def __init__(self, registry, board=None):
        self.metrics_app = make_wsgi_app(registry)
        self.board = board
        self.host = socket.gethostname()
        self._server = None

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Start serving on a daemon thread; returns the bound port (0 picks a free one)."""
        family, address = _family(address, port)
        server_class = type("EndpointServer", (ThreadingWSGIServer,), {"address_family": family})
        self._server = make_server(address, port, self.app, server_class, handler_class=_QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="epochwatch-endpoint", daemon=True).start()
        return self._server.server_port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def app(self, environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if self.board is not None and (path == STATUS_PATH or path.startswith(STATUS_PATH + "/")):
            code, body = self.status(environ.get("REQUEST_METHOD", "GET"), path)
            data = json.dumps(body, indent=1).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
            start_response(code, headers + ([("Allow", "GET")] if code.startswith("405") else []))
            return [data]
        return self.metrics_app(environ, start_response)

    def status(self, method: str, path: str) -> tuple[str, dict]:
        """(HTTP status line, JSON body) of a status request."""
        request = {"url": path, "host": self.host}
        if method != "GET":
            return "405 Method Not Allowed", _error(f"{method} is not supported: the status view is read with GET",
                                                    request)
        cluster = _wsgi_text(path[len(STATUS_PATH) + 1:])
        if not cluster:
            view = self.board.overview()
            return "200 OK", {"error": False, "message": f"status of {len(view['clusters'])} cluster(s) returned",
                              "status": view, "request": request}
        view = self.board.cluster(cluster)
        if view is None:
            known = self.board.clusters()
            return "404 Not Found", _error(f"cluster {cluster!r} not found: the job knows "
                                           + (", ".join(known) if known else "no cluster yet"), request)
        return "200 OK", {"error": False, "message": "cluster status returned", "status": view, "request": request}


def _wsgi_text(text: str) -> str:
    """PEP 3333 hands the path over as latin-1 text: a cluster id in UTF-8 is read back as UTF-8."""
    return text.encode("latin-1", "replace").decode("utf-8", "replace")


def _error(message: str, request: dict) -> dict:
    return {"error": True, "message": message, "request": request}


def _family(address: str, port: int) -> tuple[int, str]:
    """IPv4 or IPv6, as the address says (``::`` binds IPv6), as prometheus_client's own server does."""
    family, _, _, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, sockaddr[0]
