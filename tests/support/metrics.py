"""Reading what the metrics sink exposes, as Prometheus would scrape it."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.engine.key_engine import KeyEngine
from streaming.sinks.base import OutputBatch
from streaming.sinks.metrics import Metrics


def scrape(metrics: Metrics) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} from the exposition text."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class Batches:
    """Micro-batches as Spark runs them: a key steps when it has events or its timer is due
    (streaming.spark.processor), then the metrics sink takes the batch's output."""

    KIND_EVENTS = {"brokers": ("broker_heartbeat",), "clients": ("metadata_response",)}

    def __init__(self, engines: list[KeyEngine]):
        self.metrics = Metrics()
        self.timers: dict[int, int | None] = {i: None for i in range(len(engines))}
        self.engines = engines
        self.batch_id = 0

    def run(self, events: list[dict], now: int) -> None:
        batch = OutputBatch(self.batch_id)
        for i, engine in enumerate(self.engines):
            mine = [ev for ev in events if ev["cluster_id"] == engine.cluster_id
                    and ev["event_type"] in ("cluster_reset", *self.KIND_EVENTS[engine.kind])]
            if not mine and (self.timers[i] is None or self.timers[i] > now):
                continue
            result = engine.step(mine, now)
            self.timers[i] = result.deadline
            batch.alerts += result.alerts
            batch.broker_status += result.status
            batch.summaries += result.summaries
        self.metrics.write(batch)
        self.batch_id += 1


def series_of(metrics: Metrics, cluster: str) -> set[str]:
    return {name for name, labels in scrape(metrics) if ("kafka_cluster", cluster) in labels}
