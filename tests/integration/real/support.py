"""The whole monitor around a real Kafka cluster: the cluster (streaming.tools.kafka_cluster),
`epochwatch collect` and `epochwatch run` as real processes sharing one YAML config, the
alerts topic read back, and the questions the incident tests ask of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.integration.faults.support import JobProcess, TopicTail
from tests.integration.observability.services import GatedProxy
from tests.support.polling import wait_until

PAGING = ("warning", "critical")


@dataclass
class CollectorProcess:
    """`epochwatch collect` in a process of its own, its status lines in a log."""

    config: Path
    log_path: Path
    stopped_on_purpose: bool = False
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> "CollectorProcess":
        assert self._proc is None, "already running"
        self.stopped_on_purpose = False
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen([sys.executable, "-m", "streaming.commands", "collect",
                                           "--config", str(self.config),
                                           "--events-out", str(self.log_path.with_suffix(".events.jsonl"))],
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        self.stopped_on_purpose = True
        if self._proc is None:
            return None
        self._proc.terminate()
        try:
            code = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait(timeout=10)
        self._proc = None
        return code

    def events(self) -> list[dict]:
        """Every event the collector sent (its --events-out copy), across its restarts."""
        path = self.log_path.with_suffix(".events.jsonl")
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]  # whole lines only

    def status_lines(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if line.startswith("epochwatch collect:")]


def write_config(path: Path, *, cluster, bus: str, topics: dict[str, str], checkpoint: Path, rules: dict,
                 alertmanager_url: str, job_metrics_port: int, collector_metrics_port: int) -> Path:
    """One YAML for the job and the collector, as a user would keep it."""
    doc = {
        "kafka": {"bootstrap.servers": bus, "topics": topics, "encoding": "confluent", "startingOffsets": "earliest"},
        "rules": rules,
        "sinks": {"metrics.port": job_metrics_port, "alertmanager.url": alertmanager_url,
                  "console": "on"},  # alerts with their descriptions in the job log
        "collect": {"bootstrap.servers": cluster.bootstrap_servers, "metrics.port": collector_metrics_port,
                    "exporter.urls": ",".join(cluster.metrics_urls[n] for n in sorted(cluster.metrics_urls))},
        "checkpoint_location": str(checkpoint),
        "trigger_interval": "500 milliseconds",
        "spark": {"spark.sql.shuffle.partitions": "2"},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Monitor:
    """A running collector + job over one real cluster, and the alerts they produced; Prometheus
    scrapes both and Alertmanager gets the job's alerts and Prometheus's."""

    cluster: object
    collector: CollectorProcess
    job: JobProcess
    alerts: TopicTail
    alertmanager: object = None
    prometheus: object = None

    def records(self) -> list[dict]:
        return [r for _, r in self.alerts.poll(0.2)]

    def wait_alert(self, alertname: str, status: str = "firing", since_ms: int = 0, timeout_s: float = 120.0,
                   **labels) -> dict:
        def found():
            self.check_alive()
            return next((r for r in self.records() if r["alertname"] == alertname and r["status"] == status
                         and r["event_time"] >= since_ms
                         and all(r["labels"].get(k) == str(v) for k, v in labels.items())), None)
        try:
            return wait_until(found, timeout_s=timeout_s, interval_s=0.5, what=f"{alertname} {status} {labels}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; alerts since the fault: {self.summary(since_ms)}") from None

    def pages(self, since_ms: int, until_ms: int | None = None) -> list[tuple[str, dict]]:
        """(alertname, labels) of every warning or critical that fired in the window."""
        return [(r["alertname"], r["labels"]) for r in self.records()
                if r["status"] == "firing" and r["severity"] in PAGING and r["event_time"] >= since_ms
                and (until_ms is None or r["event_time"] <= until_ms)]

    def fired_at(self, alertname: str, labels: dict) -> int:
        """When the job wrote the firing record of that alert (its event time, the job's clock)."""
        return next(r["event_time"] for r in self.records()
                    if r["alertname"] == alertname and r["labels"] == labels and r["status"] == "firing")

    def summary(self, since_ms: int = 0) -> list[str]:
        return [f"{r['status']} {r['alertname']} {dict(r['labels'])}" for r in self.records() if r["event_time"] >= since_ms]

    def check_alive(self) -> None:
        if self.collector.stopped_on_purpose:
            pass
        elif not self.collector.alive():
            raise AssertionError(f"the collector exited:\n{self.collector.log_path.read_text()[-3000:]}")
        if not self.job.alive():
            raise AssertionError(f"the job exited with {self.job.returncode()}:\n{self.job.log(True)[-3000:]}")

    def collector_rounds(self) -> int:
        return len(self.collector.status_lines())

    def restart_collector(self, extra_urls: tuple[str, ...] = (), instead: dict[int, str] | None = None) -> None:
        """The collector again, scraping the cluster's exporters and ``extra_urls`` (as a team adds
        a host to its list); ``instead`` gives other URLs for some nodes' exporters."""
        self.collector.stop()
        doc = yaml.safe_load(self.collector.config.read_text())
        urls = [{**self.cluster.metrics_urls, **(instead or {})}[n] for n in sorted(self.cluster.metrics_urls)]
        doc["collect"]["exporter.urls"] = ",".join([*urls, *extra_urls])
        self.collector.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.collector.start()


class ExporterGate(GatedProxy):
    """A node's exporter page behind a gate on 127.0.0.1: 503 while shut (an exporter that fails,
    as pages did for several rounds on a crowded host), the exporter's own page once opened."""

    def __init__(self, metrics_url: str):
        self.opened = threading.Event()
        parts = urllib.parse.urlsplit(metrics_url)
        self._path = parts.path
        super().__init__(f"{parts.scheme}://{parts.netloc}")

    def refusal(self, headers) -> tuple[int, str] | None:
        return None if self.opened.is_set() else (503, "the gate is shut\n")

    @property
    def url(self) -> str:
        return super().url + self._path


def now_ms() -> int:
    return int(time.time() * 1000)


def prometheus_config(out: Path, *, job_port: int, collector_port: int, alertmanager_port: int) -> Path:
    """deploy/prometheus/prometheus.yml as shipped, at 1 s intervals, pointed at this test's job,
    collector and Alertmanager."""
    from tests.integration.observability.services import PROMETHEUS_CONFIG

    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROMETHEUS_CONFIG.parent / pattern) for pattern in config["rule_files"]]
    config["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]
    ports = {"epochwatch": job_port, "epochwatch-collector": collector_port}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports[job['job_name']]}"]}]
        job["scrape_interval"] = "1s"
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def alertmanager_alert(alertmanager, alertname: str, cluster: str) -> dict | None:
    import requests

    return next((a for a in requests.get(alertmanager.url + "/api/v2/alerts", timeout=5).json()
                 if a["labels"].get("alertname") == alertname and a["labels"].get("kafka_cluster") == cluster), None)
