"""sinks.labels: the labels alerts carry where they leave the job (streaming.sinks.labels), on the
records the rules really emit (streaming.rules.catalog.alert_record)."""

from __future__ import annotations

import pytest

from streaming import config
from streaming.rules.catalog import RULES, alert_record
from streaming.sinks.labels import alert_labels, as_emitted, presented

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
T0 = 1_700_000_000_000


def emitted(alertname="BrokerHeartbeatTimeout", cluster=CLUSTER, status="firing", **labels) -> dict:
    """A record as the rules emit it."""
    labels = labels or ({"broker_id": "3"} if RULES[alertname].labels == ("broker_id",) else {})
    return alert_record(RULES[alertname], cluster, tuple(sorted(labels.items())), status, T0, T0 + 500, "why",
                        ends_at=T0 + 500 if status == "resolved" else None)


def policy(**overrides) -> config.AlertLabelSettings:
    """sinks.labels as `epochwatch run` reads it: through the config loader and its validation."""
    return config.load(overrides={f"sinks.labels.{k}": v for k, v in overrides.items()}).sinks.labels


CASES = [
    (1, "default: the id in kafka_cluster, no `cluster` label (Kubernetes / Thanos own that name)", {},
     {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "3", "kafka_cluster": CLUSTER}),
    (2, "another name for the id's label", {"cluster.name": "kafka_cluster_id"},
     {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "3", "kafka_cluster_id": CLUSTER}),
    (3, "cluster.name: cluster gives the labels of earlier versions", {"cluster.name": "cluster"},
     emitted()["labels"]),
    (4, "static labels on every alert, the platform's `cluster` among them next to the Kafka cluster's id",
     {"static.team": "kafka", "static.env": "prod", "static.cluster": "k8s-eu-1"},
     {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "3", "kafka_cluster": CLUSTER,
      "team": "kafka", "env": "prod", "cluster": "k8s-eu-1"}),
    (5, "an alias goes next to the id, in <cluster.name>_alias", {f"aliases.{CLUSTER}": "payments-prod"},
     {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "3", "kafka_cluster": CLUSTER,
      "kafka_cluster_alias": "payments-prod"}),
    (6, "another cluster's alias is not this cluster's", {"aliases.other-cluster": "payments-prod"},
     {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "3", "kafka_cluster": CLUSTER}),
]


@pytest.mark.parametrize("num, why, overrides, expected", CASES, ids=[f"{c[0]}" for c in CASES])
def test_alert_labels(num, why, overrides, expected):
    assert alert_labels(emitted(), policy(**overrides)) == expected, f"case {num}: {why}"


def test_a_presented_record_keeps_its_identity_and_names_the_cluster_by_its_alias():
    """Why: dedupe after a restart reads fingerprints back from the alerts topic; the labels a
    deployment configures must not make an open incident look new."""
    labels = policy(**{"static.team": "kafka", f"aliases.{CLUSTER}": "payments-prod"})
    for record in (emitted(), emitted(status="resolved"), emitted("ClusterSilent")):
        shown = presented(record, labels)
        assert {k: shown[k] for k in ("fingerprint", "event_id", "cluster_id", "starts_at", "ends_at", "status")} \
            == {k: record[k] for k in ("fingerprint", "event_id", "cluster_id", "starts_at", "ends_at", "status")}
        assert shown["annotations"]["summary"] == "payments-prod: " + record["annotations"]["summary"]
        assert shown["annotations"]["description"] == record["annotations"]["description"]
        assert record["labels"]["cluster"] == CLUSTER and "team" not in record["labels"]   # the input is untouched
    silent = presented(emitted("ClusterSilent"), labels)["annotations"]["summary"]
    assert silent == f"payments-prod: No broker heartbeat from cluster {CLUSTER}"   # the id stays in sight


def test_without_an_alias_the_summary_is_the_rules_own():
    record = emitted()
    assert presented(record, policy())["annotations"] == record["annotations"]


def test_every_summary_names_only_labels_its_rule_declares():
    """The rules' declared labels (catalog.RULE_LABELS) are what config validation keeps a
    deployment's own labels off; a summary naming another label would fail at alert_record.
    (That every record carries exactly its rule's labels is checked over every simulator
    scenario in tests/engine/test_scenarios_local.py.)"""
    import string

    for rule in RULES.values():
        placeholders = {name for _, name, _, _ in string.Formatter().parse(rule.summary) if name}
        assert placeholders <= {"cluster", *rule.labels}, rule.name


def test_a_record_read_back_is_the_rules_own_whatever_policy_wrote_it():
    """Why: a restart seeds the roll-up, the status board, the metrics and Alertmanager from the
    alerts topic, which holds records as sinks.labels presented them (perhaps under another
    policy, before an upgrade); seeded and new records must meet as equals, and every exit then
    presents both alike, or one incident would look like two."""
    policies = [policy(), policy(**{"cluster.name": "cluster"}),
                policy(**{"static.team": "kafka", "static.cluster": "k8s-eu-1", f"aliases.{CLUSTER}": "payments-prod"}),
                policy(**{"cluster.name": "kafka_cluster_id", f"aliases.{CLUSTER}": "payments-prod"})]
    records = [emitted(), emitted(status="resolved"), emitted("ClusterSilent"),
               emitted("StaleMetadataResponse", client_id="app-1", broker_id="3")]
    for written in policies:
        for record in records:
            assert as_emitted(presented(record, written)) == record
    # a roll-up (its client's labels less client_id) comes back the same way
    rollup = {**emitted("StaleMetadataResponse", client_id="app-1", broker_id="3")}
    rollup["labels"] = {k: v for k, v in rollup["labels"].items() if k != "client_id"}
    rollup["annotations"] = {**rollup["annotations"], "client_count": "2", "example_clients": "app-1, app-2"}
    assert as_emitted(presented(rollup, policies[2])) == rollup


def test_a_record_of_no_known_alert_is_left_for_the_book_to_refuse():
    odd = {"alertname": "NotOurs", "labels": {"x": "1"}}
    assert as_emitted(odd) == odd and as_emitted({"alertname": "ClusterSilent", "labels": None})["labels"] is None
