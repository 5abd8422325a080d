"""Alert records as the job writes them, for the sinks' tests."""

from __future__ import annotations

T0 = 1_700_000_000_000


def rec(fp="a", status="firing", severity="warning", starts=T0, ends=None, event_time=None, summary="s",
        alertname="BrokerHeartbeatTimeout", **labels):
    labels = {"alertname": alertname, "cluster": "c1", "severity": severity, "broker_id": "1", **labels}
    return {"event_type": "alert", "event_id": f"{fp}:{status}", "cluster_id": "c1",
            "event_time": event_time if event_time is not None else (ends or starts),
            "alertname": alertname, "severity": severity, "status": status, "labels": labels,
            "annotations": {"summary": summary, "description": "d", "runbook_url": "docs/alerts.md#x"},
            "starts_at": starts, "ends_at": ends, "fingerprint": fp}
