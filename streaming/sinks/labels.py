"""The labels an alert carries where it leaves the job: one function for every exit.

The rules emit records keyed on the cluster id (``streaming.rules.catalog``: label ``cluster``,
the identity the fingerprint is computed from). How a deployment shows them is presentation,
decided here once, from ``sinks.labels`` (``streaming.config.AlertLabelSettings``), and applied by
the two sinks that hand alerts to other systems: the Kafka alerts topic and Alertmanager. Both
show the same labels, and the alerts topic keeps what Alertmanager was sent.

- The cluster id goes in ``sinks.labels.cluster.name`` (``kafka_cluster``), not ``cluster``:
  Kubernetes and Thanos stacks set ``cluster`` to their own cluster's name (Prometheus external
  labels, target labels), and an alert of ours carrying it would be routed, grouped and silenced
  as theirs. The id stays the key: routing, inhibition and what Kafka's tools print use it.
- A cluster's alias (``sinks.labels.aliases``) goes in ``<cluster.name>_alias`` and in front of
  the summary (``payments-prod: Broker 3 stopped heartbeating ...``): on-call reads the name they
  know, and the id is still there to act on.
- ``sinks.labels.static`` (team, env, ...) goes on every alert.

The fingerprint and event id do not change: dedupe after a restart reads them back from the
alerts topic, whatever the labels were then.
"""

from __future__ import annotations

from typing import Mapping

from streaming.config import AlertLabelSettings
from streaming.rules.catalog import CLUSTER_LABEL, RULES

DEFAULT_LABELS = AlertLabelSettings()
# The label of the Kafka cluster id on the per-cluster series of the job's and the collector's
# /metrics, for the same reason. Fixed, unlike the alerts' label: the dashboards and the
# Prometheus rules (deploy/prometheus) query the series by this name.
METRIC_CLUSTER_LABEL = "kafka_cluster"


def alert_labels(record: Mapping, policy: AlertLabelSettings = DEFAULT_LABELS) -> dict[str, str]:
    """The labels of an alert record as ``policy`` presents them.

    The record's own labels win over static ones (config validation keeps them apart anyway); a
    label without a value is left out, as Alertmanager would.
    """
    own = {str(k): str(v) for k, v in (record.get("labels") or {}).items() if v not in (None, "")}
    cluster_id = str(record.get("cluster_id") or own.get(CLUSTER_LABEL) or "")
    own.pop(CLUSTER_LABEL, None)
    labels = {**policy.static, **own}
    if cluster_id:
        labels[policy.cluster_label] = cluster_id
        alias = policy.aliases.get(cluster_id)
        if alias:
            labels[policy.alias_label] = alias
    return labels


def presented(record: Mapping, policy: AlertLabelSettings = DEFAULT_LABELS) -> dict:
    """The record as it leaves the job: its labels from :func:`alert_labels`, the cluster's alias in
    front of the summary; fingerprint, event id and everything else unchanged. Apply it once, to
    the records the rules emit (not again to records read back from the alerts topic)."""
    alias = policy.aliases.get(str(record.get("cluster_id") or ""))
    annotations = dict(record.get("annotations") or {})
    if alias and annotations.get("summary"):
        annotations["summary"] = f"{alias}: {annotations['summary']}"
    return {**record, "labels": alert_labels(record, policy), "annotations": annotations}


def as_emitted(record: Mapping) -> dict:
    """A record read back from the alerts topic in the form the rules emit it (the inverse of
    :func:`presented`, whatever policy wrote it): the identity labels only (``alertname``,
    ``severity``, ``cluster``, the rule's entity labels), the alias off the summary. What a
    restart seeds from the topic (the roll-up, the status board, the metrics, Alertmanager's book)
    then meets the records of the running job as equals, and each exit presents both alike."""
    rule = RULES.get(str(record.get("alertname") or ""))
    labels = record.get("labels")
    if rule is None or not isinstance(labels, Mapping):
        return dict(record)   # not one of ours: the book refuses it, naming the field
    identity = {"alertname", "severity", *rule.labels}
    emitted = {k: v for k, v in labels.items() if k in identity}
    emitted[CLUSTER_LABEL] = str(record.get("cluster_id") or labels.get(CLUSTER_LABEL) or "")
    annotations = dict(record.get("annotations") or {})
    summary = str(annotations.get("summary") or "")
    for name, value in labels.items():   # <cluster.name>_alias of whichever policy wrote it
        if name.endswith("_alias") and value and summary.startswith(f"{value}: "):
            annotations["summary"] = summary[len(value) + 2:]
    return {**record, "labels": emitted, "annotations": annotations}
