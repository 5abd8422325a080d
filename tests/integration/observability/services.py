"""The real Alertmanager / Prometheus binaries as test processes, and a loopback webhook receiver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml

from streaming.tools.embedded import LOOPBACK, free_port
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[3]
ALERTMANAGER_BIN = os.environ.get("EPOCHWATCH_ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager")
PROMETHEUS_BIN = os.environ.get("EPOCHWATCH_PROMETHEUS_BIN", "/usr/bin/prometheus")
AMTOOL_BIN = os.environ.get("EPOCHWATCH_AMTOOL_BIN", "/usr/bin/amtool")
PROMTOOL_BIN = os.environ.get("EPOCHWATCH_PROMTOOL_BIN", "/usr/bin/promtool")
AM_TEMPLATE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
AM_RENDER = REPO / "deploy" / "alertmanager" / "render.py"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"


@dataclass
class ServiceProcess:
    """A binary listening on 127.0.0.1:port; ready when GET ready_path answers 200.

    ``probe``: what a request needs to get through (requests' ``auth``, ``verify``, ``cert``),
    for a service behind basic auth or TLS."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    ready_path: str = "/-/ready"
    scheme: str = "http"
    probe: dict = field(default_factory=dict, repr=False)
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{LOOPBACK}:{self.port}"

    def get(self, path: str) -> requests.Response:
        """GET path with the probe's credentials and CA."""
        return requests.get(self.url + path, timeout=5, **self.probe)

    def start(self, timeout_s: float = 30.0) -> "ServiceProcess":
        log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_until(self._ready, timeout_s=timeout_s, what=f"{self.name} ready on {self.url} (log: {self.log_path})")
        return self

    def _ready(self) -> bool:
        if self._proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self._proc.returncode}: {self.log_path.read_text()[-2000:]}")
        try:
            return requests.get(self.url + self.ready_path, timeout=1, **self.probe).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(sig)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


class WebhookReceiver:
    """Records every notification Alertmanager POSTs, by URL path (/pager, /team)."""

    def __init__(self):
        self.notifications: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with receiver._lock:
                    receiver.notifications.append((self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://{LOOPBACK}:{self._server.server_port}{path}"

    def alerts(self, path: str) -> list[tuple[str, dict]]:
        """(status, labels) of every alert notified on path, in order."""
        with self._lock:
            return [(a["status"], a["labels"]) for p, body in self.notifications if p == path for a in body["alerts"]]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def render_alertmanager_config(out: Path, webhook: WebhookReceiver, *, fast: bool = True) -> Path:
    """deploy/alertmanager/alertmanager.yml rendered by its own script, webhooks on the test receiver.

    ``fast`` divides every group_wait by 10 (at least 1 s), so notifications arrive within a test
    and the waits keep their order (ClusterSilent's route still waits longest), and sets
    group_interval to 1 s.
    """
    env = {**os.environ, "EPOCHWATCH_TEAM_WEBHOOK_URL": webhook.url("/team")}
    secret = out.with_name("pager-url")
    secret.write_text(webhook.url("/pager") + "\n")            # the pager URL comes from a secret file
    env["EPOCHWATCH_PAGER_WEBHOOK_URL_FILE"] = str(secret)
    env.pop("EPOCHWATCH_PAGER_WEBHOOK_URL", None)
    subprocess.run(["python3", str(AM_RENDER), "--out", str(out)], env=env, check=True, capture_output=True)
    if fast:
        config = yaml.safe_load(out.read_text())
        for route in [config["route"], *config["route"].get("routes", [])]:
            wait_s = max(1, seconds(route.get("group_wait", config["route"]["group_wait"])) // 10)
            route.update(group_wait=f"{wait_s}s", group_interval="1s", repeat_interval="1h")
        out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def seconds(duration: str) -> int:
    """An Alertmanager duration of whole seconds or minutes (what deploy/alertmanager uses)."""
    number, unit = int(duration[:-1]), duration[-1]
    return number * {"s": 1, "m": 60, "h": 3600}[unit]


def collector_down_within_s() -> int:
    """How long after a collector stopped Prometheus has EpochwatchCollectorDown firing, at worst:
    the collector's scrape interval (a failed scrape marks its series stale) + the rule group's
    interval + the rule's `for` (deploy/prometheus)."""
    scrape = next(j for j in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
                  if j["job_name"] == "epochwatch-collector")["scrape_interval"]
    rules = yaml.safe_load((PROMETHEUS_CONFIG.parent / "rules" / "epochwatch-meta.yml").read_text())
    group = next(g for g in rules["groups"] if any(r.get("alert") == "EpochwatchCollectorDown" for r in g["rules"]))
    down = next(r for r in group["rules"] if r.get("alert") == "EpochwatchCollectorDown")
    return seconds(scrape) + seconds(group["interval"]) + seconds(down["for"])


def alertmanager_process(workdir: Path, config: Path, port: int | None = None, *, web_config: Path | None = None,
                         scheme: str = "http", probe: dict | None = None) -> ServiceProcess:
    """Alertmanager on 127.0.0.1, clustering off (an HA pair here is two of these: each must get
    every alert from its senders, gossip or not). ``web_config``: its --web.config.file (TLS,
    basic auth), with ``scheme`` and ``probe`` to match."""
    port = port or free_port()
    storage = workdir / "am-data"
    storage.mkdir(parents=True, exist_ok=True)
    argv = [ALERTMANAGER_BIN, f"--config.file={config}", f"--storage.path={storage}",
            f"--web.listen-address={LOOPBACK}:{port}", "--cluster.listen-address="]
    if web_config is not None:
        argv.append(f"--web.config.file={web_config}")
    return ServiceProcess("alertmanager", argv, port, workdir / "alertmanager.log", scheme=scheme, probe=probe or {})


def write_web_config(out: Path, *, users: dict[str, str] | None = None, cert: Path | None = None,
                     key: Path | None = None, client_ca: Path | None = None) -> Path:
    """An exporter-toolkit web config (Alertmanager's --web.config.file): basic auth ``users``
    (name -> password, stored as bcrypt hashes as the format requires), TLS with ``cert`` / ``key``,
    client certificates required and verified against ``client_ca``."""
    import bcrypt

    config: dict = {}
    if cert is not None:
        config["tls_server_config"] = {"cert_file": str(cert), "key_file": str(key)}
        if client_ca is not None:
            config["tls_server_config"].update(client_auth_type="RequireAndVerifyClientCert",
                                               client_ca_file=str(client_ca))
    if users:
        config["basic_auth_users"] = {name: bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
                                      for name, password in users.items()}
    out.write_text(yaml.safe_dump(config))
    return out


class GatedProxy:
    """A reverse proxy on 127.0.0.1 in front of ``upstream`` (scheme, host and port; the request's
    path is kept) that answers a request itself when :meth:`refusal` says so, counted in
    ``refused``; an upstream that cannot be reached is a 502."""

    def __init__(self, upstream: str):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

            def _forward(self, method: str) -> None:
                refused = proxy.refusal(self.headers)
                if refused is not None:
                    proxy.refused += 1
                    self.send_response(refused[0])
                    self.end_headers()
                    self.wfile.write(refused[1].encode())
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    answer = requests.request(method, upstream + self.path, data=body or None, timeout=5,
                                              headers={"Content-Type": self.headers.get("Content-Type", "")})
                except requests.RequestException as exc:  # the upstream is down (a broker restarting)
                    self.send_error(502, str(exc))
                    return
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("Content-Type", "text/plain"))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args):
                pass

        self.refused = 0
        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def refusal(self, headers) -> tuple[int, str] | None:
        """(status, body) to answer instead of the upstream, or None to let the request through."""
        return None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class BearerTokenProxy(GatedProxy):
    """A reverse proxy on 127.0.0.1 that lets through only requests with ``Authorization: Bearer
    <token>``, the way platforms put token auth in front of Alertmanager (which has none of its
    own): Mimir's and Cortex's gateways, kube-rbac-proxy, oauth2-proxy. ``token`` may be changed
    while it runs (a rotated token)."""

    def __init__(self, upstream: str, token: str):
        self.token = token
        super().__init__(upstream)

    def refusal(self, headers) -> tuple[int, str] | None:
        return None if headers.get("Authorization") == f"Bearer {self.token}" else (401, "Unauthorized\n")


def prometheus_config_for_test(out: Path, metrics_port: int) -> Path:
    """deploy/prometheus/prometheus.yml with 1 s intervals, scraping the test's metrics server."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROMETHEUS_CONFIG.parent / pattern) for pattern in config["rule_files"]]
    config.pop("alerting", None)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "epochwatch"]
    job["static_configs"] = [{"targets": [f"{LOOPBACK}:{metrics_port}"]}]
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def prometheus_process(workdir: Path, config: Path) -> ServiceProcess:
    port = free_port()
    return ServiceProcess("prometheus", [
        PROMETHEUS_BIN, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address={LOOPBACK}:{port}",
    ], port, workdir / "prometheus.log")
