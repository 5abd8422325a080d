"""Compact event builders for rule tables (times are ms from an arbitrary zero)."""

from __future__ import annotations

import itertools

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine

CLUSTER = "c1"
_ids = itertools.count()


def _base(kind: str, t: int, **fields) -> dict:
    return {"event_type": kind, "event_id": f"e{next(_ids)}", "cluster_id": CLUSTER, "event_time": t, **fields}


def hb(t, broker, inc=1, target="ACTIVE", error=0, current=None, controller=100, controller_epoch=1, **extra):
    return _base("broker_heartbeat", t, controller_id=controller, controller_epoch=controller_epoch, broker_id=broker,
                 incarnation_id=inc, incarnation_uuid=None, target_state=target, want_fence=extra.get("want_fence"),
                 want_shutdown=extra.get("want_shutdown"), current_metadata_offset=None, error_code=error,
                 current_state=current)


def heartbeats(brokers, start, end, every=2000, skip=lambda b, t: False, **kw):
    return [hb(t + b, b, **kw) for t in range(start, end, every) for b in brokers if not skip(b, t)]


def update(t, broker, epoch, controller=100, controller_epoch=1):
    return _base("metadata_update", t, controller_id=controller, controller_epoch=controller_epoch,
                 metadata_epoch=epoch, broker_id=broker)


def response(t, client, broker, epoch, error=0, brokers=3, cluster="kc-1"):
    return _base("metadata_response", t, client_id=client, broker_id=broker, metadata_epoch=epoch, error_code=error,
                 broker_count=brokers, response_cluster_id=cluster)


def failed(t, client, reason="NO_NODE_AVAILABLE", node=None):
    return _base("metadata_request_failed", t, client_id=client, node_id=node, reason=reason)


def rebootstrap(t, client, reason="NO_NODE_AVAILABLE", before="kc-1", after="kc-1"):
    return _base("client_rebootstrap", t, client_id=client, reason=reason, cluster_id_before=before,
                 cluster_id_after=after)


def attempt(t, client, node, outcome="SETUP_TIMEOUT", timeout=10000, failures=0):
    return _base("connection_attempt", t, client_id=client, node_id=node, outcome=outcome,
                 setup_timeout_ms=timeout, consecutive_failures=failures)


def commit(t, group, epoch, topic="orders", partition=0, offset=1):
    return _base("offset_commit", t, group_id=group, topic=topic, partition=partition, offset=offset,
                 metadata_epoch=epoch)


def reset(t):
    """epochwatch reset-cluster's control record."""
    return _base("cluster_reset", t)


def run(kind: str, events: list[dict], until: int, settings: RuleSettings | None = None, batch: int = 0):
    """Feed events through one key's engine (in batches of ``batch`` events, 0 = one step) and
    advance the horizon to ``until``; returns (alert records, engine)."""
    engine = KeyEngine.new(kind, CLUSTER, 0, settings or RuleSettings())
    events = sorted(events, key=lambda e: e["event_time"])
    alerts = []
    chunks = [events[i:i + batch] for i in range(0, len(events), batch)] if batch else [events]
    for chunk in chunks:
        if chunk:
            alerts += engine.step(chunk, chunk[-1]["event_time"] - 2000).alerts
    alerts += engine.step([], until).alerts
    return alerts, engine


def summary(alerts: list[dict]) -> list[tuple]:
    """(status, alertname, entity label) in order: what a table case states."""
    out = []
    for a in alerts:
        labels = a["labels"]
        entity = next((labels[k] for k in ("client_id", "group_id", "node_id", "broker_id") if k in labels), None)
        out.append((a["status"], a["alertname"], entity))
    return out


def batchings(cut: int, tail_ms: int):
    """Steps of ``cut`` events for exactness properties: every other step's horizon 300 ms short
    of its newest event (some events wait, some come late), then one step ``tail_ms`` past the
    end with no events (every deadline left fires)."""
    def batches(events):
        chunks = [events[i:i + cut] for i in range(0, len(events), cut)]
        for n, chunk in enumerate(chunks):
            yield chunk, max(e["event_time"] for e in chunk) - (300 if n % 2 else 0)
        yield [], max((e["event_time"] for e in events), default=0) + tail_ms
    return batches
