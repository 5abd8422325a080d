"""The alert catalog's records: fingerprints stay those of earlier versions."""

from streaming.rules.catalog import RULES, alert_record

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
T0 = 1_700_000_000_000

# Computed by the code before sinks.labels existed (the cluster id's label was then named
# `cluster` everywhere). A restarted job matches the open incidents it reads back from the alerts
# topic by fingerprint: a new fingerprint for the same incident would page it a second time and
# never resolve the first copy.
PINNED = [
    (1, "a broker's alert", "BrokerHeartbeatTimeout", (("broker_id", "3"),), "firing", "4cddd657faf7be63"),
    (2, "a cluster's alert, resolved", "ClusterSilent", (), "resolved", "41d04d8e80e80b1b"),
]


def test_fingerprints_are_those_of_earlier_versions():
    for num, why, alertname, labels, status, fingerprint in PINNED:
        record = alert_record(RULES[alertname], CLUSTER, labels, status, T0, T0 + 9000, "d",
                              ends_at=T0 + 9000 if status == "resolved" else None)
        assert (record["fingerprint"], record["event_id"]) == (fingerprint, f"{fingerprint}:{status}"), \
            f"case {num}: {why}"
