"""A single-process detector over the same pure rules: routes events to key engines and steps
them with an event-time horizon, as the Spark job does. Used as the head-to-head baseline
(what a team would hand-write instead) and for quick checks of simulator scenarios."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine, StepResult
from streaming.spark.routing import routes


@dataclass
class LocalDetector:
    settings: RuleSettings
    engines: dict[tuple[str, str, int], KeyEngine] = field(default_factory=dict)
    newest: int | None = None

    def feed(self, events: list[dict]) -> list[StepResult]:
        """One micro-batch: every key steps to the batch's horizon (newest event - lateness)."""
        by_key: dict[tuple[str, str, int], list[dict]] = {}
        for ev in events:
            for kind, shard in routes(ev, self.settings.client_shards):
                by_key.setdefault((ev["cluster_id"], kind, shard), []).append(ev)
            if self.newest is None or ev["event_time"] > self.newest:
                self.newest = ev["event_time"]
        if self.newest is None:
            return []
        return self.advance(self.newest - self.settings.allowed_lateness_ms, by_key)

    def advance(self, horizon: int, by_key: dict | None = None) -> list[StepResult]:
        by_key = by_key or {}
        results = []
        for key in sorted(set(self.engines) | set(by_key)):
            engine = self.engines.get(key)
            if engine is None:
                engine = self.engines[key] = KeyEngine.new(key[1], key[0], key[2], self.settings)
            results.append(engine.step(by_key.get(key, []), horizon))
        return results


def detect_all(events: list[dict], settings: RuleSettings, batch: int = 5000, until: int | None = None) -> list[dict]:
    """Alert records for a whole event list, fed in batches, then time advanced to ``until``."""
    detector = LocalDetector(settings)
    alerts: list[dict] = []
    for i in range(0, len(events), batch):
        for r in detector.feed(events[i:i + batch]):
            alerts.extend(r.alerts)
    if until is not None:
        for r in detector.advance(until):
            alerts.extend(r.alerts)
    alerts.sort(key=lambda a: (a["event_time"], a["alertname"], a["fingerprint"], a["status"]))
    return alerts
