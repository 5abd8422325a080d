"""A simulator scenario's events through the single-process detector, as the sinks get them: the
alert records of each micro-batch of events, in the order foreachBatch hands them over."""

from __future__ import annotations

from streaming.config import RuleSettings
from streaming.engine.local import LocalDetector


def alert_batches(events: list[dict], settings: RuleSettings, batch: int, until: int) -> list[list[dict]]:
    """``batch`` events per micro-batch, then time advanced to ``until`` (the scenario's end)."""
    detector = LocalDetector(settings)
    steps = [detector.feed(events[i:i + batch]) for i in range(0, len(events), batch)] + [detector.advance(until)]
    return [sorted((a for r in results for a in r.alerts),
                   key=lambda a: (a["event_time"], a["alertname"], a["fingerprint"], a["status"]))
            for results in steps]
