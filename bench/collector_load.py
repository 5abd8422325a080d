"""What `epochwatch collect` costs the cluster it watches, and itself.

Starts a real KRaft cluster (1 controller, 3 brokers), reads every broker's request counters
(kafka.network RequestMetrics RequestsPerSec, through the JMX exporter) over a quiet period
without the collector, then over the same period with `epochwatch collect` running at its
default interval, and prints the difference per broker per second, by request type; plus the
collector process's CPU seconds and peak RSS.

    .venv/bin/python bench/collector_load.py --seconds 60
    .venv/bin/python bench/collector_load.py --seconds 60 --commits 60

``--commits N``: the commit log source on (``collect.offset.commits``), with N offset commits a
second (10 groups, 6 partitions) made during both periods, so that the difference is the
source's own load; its JVM's CPU and peak RSS are printed beside the collector's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streaming.tools.embedded import EmbeddedBroker, create_topics  # noqa: E402
from streaming.tools.kafka_cluster import KafkaCluster  # noqa: E402


def request_counts(url: str) -> Counter:
    """Requests served so far by request type (every version summed)."""
    import urllib.request

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    counts: Counter = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name.replace("_", "").lower()
            if "requestmetrics" in name and "requests" in name and name.endswith(("total", "count")) \
                    and "request" in s.labels and "error" not in s.labels:
                counts[s.labels["request"]] += s.value
    return counts


def rates(cluster: KafkaCluster, seconds: float) -> dict[int, Counter]:
    before = {b: request_counts(cluster.metrics_urls[b]) for b in cluster.broker_ids}
    time.sleep(seconds)  # the measured period
    after = {b: request_counts(cluster.metrics_urls[b]) for b in cluster.broker_ids}
    return {b: Counter({k: (after[b][k] - before[b][k]) / seconds for k in after[b]}) for b in cluster.broker_ids}


def proc_usage(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and peak RSS in bytes of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    return cpu, peak


def children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


class Committer:
    """``per_second`` offset commits a second, spread over 10 groups and the 6 partitions of orders,
    from a thread, as busy consumer groups make them."""

    def __init__(self, bootstrap: str, per_second: int):
        from confluent_kafka import Consumer

        self.per_second, self.done, self._stop = per_second, 0, threading.Event()
        self._consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{g}",
                                     "enable.auto.commit": False}) for g in range(10)]
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from confluent_kafka import TopicPartition

        offset, started = 0, time.monotonic()
        while not self._stop.is_set():
            offset += 1
            consumer = self._consumers[offset % 10]
            try:
                consumer.commit(offsets=[TopicPartition("orders", offset % 6, offset, leader_epoch=0)],
                                asynchronous=False)
            except Exception:  # noqa: BLE001 - NOT_COORDINATOR while __consumer_offsets is created: again
                self._stop.wait(0.2)
                continue
            self.done += 1
            self._stop.wait(max(0.0, started + self.done / self.per_second - time.monotonic()))  # the pace

    def __enter__(self):
        if self.per_second:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for c in self._consumers:
            c.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--commits", type=int, default=0, metavar="N",
                        help="turn the commit log source on, with N offset commits a second on the cluster")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="epochwatch-collector-load-"))
    with KafkaCluster(work / "cluster", controllers=1, brokers=3) as cluster, EmbeddedBroker() as bus:
        create_topics(cluster.bootstrap_servers, {"orders": 6}, replication_factor=3)
        create_topics(bus.bootstrap_servers, {"epochwatch.events": 4})
        config = work / "epochwatch.yaml"
        config.write_text(yaml.safe_dump({
            "kafka": {"bootstrap.servers": bus.bootstrap_servers},
            "collect": {"bootstrap.servers": cluster.bootstrap_servers, "metrics.port": 0,
                        "offset.commits": "on" if args.commits else "off",
                        "exporter.urls": ",".join(cluster.metrics_urls.values())}}))
        events = work / "events.jsonl"
        with Committer(cluster.bootstrap_servers, args.commits) as committer:
            deadline = time.monotonic() + 60
            while args.commits and committer.done < args.commits and time.monotonic() < deadline:
                time.sleep(0.2)  # until the groups' coordinator answers: the load must be steady in both periods
            baseline = rates(cluster, args.seconds)
            proc = subprocess.Popen([sys.executable, "-m", "streaming.commands", "collect", "--config", str(config),
                                     "--quiet", "--events-out", str(events)], cwd=REPO, stdin=subprocess.DEVNULL)
            try:
                # its start-up (imports, connections, a JVM) is not the steady load
                time.sleep(15 if args.commits else 5)
                jvm = children(proc.pid)
                cpu0, _ = proc_usage(proc.pid)
                jvm0 = sum(proc_usage(j)[0] for j in jvm)
                commits0, sent0 = committer.done, _commit_events(events)
                loaded = rates(cluster, args.seconds)
                cpu1, peak = proc_usage(proc.pid)
                jvm1, jvm_peak = (sum(u[0] for u in usage), max(u[1] for u in usage)) if (
                    usage := [proc_usage(j) for j in jvm]) else (0.0, 0)
                commits1, sent1 = committer.done, _commit_events(events)
            finally:
                proc.terminate()
                proc.wait(30)
    print(f"collector load over {args.seconds:.0f} s at the default interval (2 s), 1 controller + 3 brokers, "
          f"{os.cpu_count()} cores")
    print(f"{'broker':>6} {'req/s without':>14} {'req/s with':>11} {'collector req/s':>16}  by request type")
    for b in sorted(loaded):
        extra = loaded[b] - baseline[b]
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(extra.items()) if v > 0.005)
        print(f"{b:>6} {sum(baseline[b].values()):>14.2f} {sum(loaded[b].values()):>11.2f} "
              f"{sum(loaded[b].values()) - sum(baseline[b].values()):>16.2f}  {kinds}")
    print(f"collector process: {(cpu1 - cpu0) / args.seconds * 100:.1f}% of a core, peak RSS {peak / 2**20:.0f} MiB")
    if args.commits:
        print(f"commit log reader (JVM): {(jvm1 - jvm0) / args.seconds * 100:.1f}% of a core, peak RSS "
              f"{jvm_peak / 2**20:.0f} MiB; commits made {(commits1 - commits0) / args.seconds:.1f}/s, "
              f"offset_commit events sent {(sent1 - sent0) / args.seconds:.1f}/s")
    return 0


def _commit_events(path: Path) -> int:
    return path.read_text().count('"offset_commit"') if path.exists() else 0


if __name__ == "__main__":
    sys.exit(main())
