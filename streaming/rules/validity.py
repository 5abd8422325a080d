"""What an event must be for the rules to apply it, beyond what the Avro schema says (KIP-343's
INVALID_REQUEST): a key refuses any other as a dead letter with this reason. What no real
cluster sends (implausible times and epochs) is refused before, in routing
(streaming.spark.validity)."""

from __future__ import annotations


def invalid_reason(ev: dict) -> str | None:
    """Semantic checks the Avro schema cannot express (KIP-343: INVALID_REQUEST)."""
    kind = ev["event_type"]
    if not ev.get("cluster_id"):
        return "cluster_id is empty"
    if ev["event_time"] < 0:  # -1 is NO_TIME in the rules (and "no timestamp" in Kafka)
        return f"event_time {ev['event_time']} is before 1970"
    if kind in ("broker_heartbeat", "metadata_update") and ev["broker_id"] < 0:
        return f"broker_id {ev['broker_id']} is negative"
    if kind == "broker_heartbeat" and ev["incarnation_id"] < 0:
        return f"incarnation_id {ev['incarnation_id']} is negative"
    if kind in ("metadata_update", "metadata_response", "offset_commit") and ev["metadata_epoch"] < -1:
        return f"metadata_epoch {ev['metadata_epoch']} is below -1"
    if kind in ("broker_heartbeat", "metadata_update") and (ev["controller_epoch"] < 0 or ev["controller_id"] < 0):
        return "controller_id / controller_epoch is negative"
    if kind in ("metadata_response", "metadata_request_failed", "client_rebootstrap",
                "connection_attempt") and not ev.get("client_id"):
        return "client_id is empty"
    if kind == "offset_commit" and (ev["partition"] < 0 or not ev.get("group_id")):
        return "partition is negative or group_id empty"
    if kind == "connection_attempt" and (ev["setup_timeout_ms"] < 0 or ev["consecutive_failures"] < 0):
        return "setup_timeout_ms / consecutive_failures is negative"
    return None
