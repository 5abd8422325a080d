"""What `epochwatch collect` costs the cluster it watches, and itself.

Starts a real KRaft cluster (1 controller, 3 brokers), reads every broker's request counters
(kafka.network RequestMetrics RequestsPerSec, through the JMX exporter) over a quiet period
without the collector, then over the same period with `epochwatch collect` running at its
default interval, and prints the difference per broker per second, by request type; plus the
collector process's CPU seconds and peak RSS.

    .venv/bin/python bench/collector_load.py --seconds 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streaming.embedded import EmbeddedBroker, create_topics  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="epochwatch-collector-load-"))
    with KafkaCluster(work / "cluster", controllers=1, brokers=3) as cluster, EmbeddedBroker() as bus:
        create_topics(cluster.bootstrap_servers, {"orders": 6}, replication_factor=3)
        create_topics(bus.bootstrap_servers, {"epochwatch.events": 4})
        config = work / "epochwatch.yaml"
        config.write_text(yaml.safe_dump({
            "kafka": {"bootstrap.servers": bus.bootstrap_servers},
            "collect": {"bootstrap.servers": cluster.bootstrap_servers, "metrics.port": 0,
                        "exporter.urls": ",".join(cluster.metrics_urls.values())}}))
        baseline = rates(cluster, args.seconds)
        proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "collect", "--config", str(config), "--quiet"],
                                cwd=REPO, stdin=subprocess.DEVNULL)
        try:
            time.sleep(5)  # its start-up (imports, first connections) is not the steady load
            cpu0, _ = proc_usage(proc.pid)
            loaded = rates(cluster, args.seconds)
            cpu1, peak = proc_usage(proc.pid)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
