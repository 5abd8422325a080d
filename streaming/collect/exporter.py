"""What one node's Prometheus JMX exporter says, reduced to the few values the collector reads.

The exporter is configured by each team, and names differ between configs: the catch-all rule
gives ``kafka_controller_kafkacontroller_value{name="BrokerRegistrationState",broker="1"}`` and
``kafka_server_broker_metadata_metrics_last_applied_record_offset``, Strimzi-style rules give
``kafka_controller_kafkacontroller_brokerregistrationstate{broker="1"}`` and
``kafka_server_brokermetadatametrics_last_applied_record_offset``. So a ``*_value`` sample with a
``name`` label is folded into the second form, and names are compared without their
underscores: one table serves every config seen. Parsing is prometheus-client's, not ours.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Kafka's numbers for a broker's registration at the controller (KAFKA-18666, Kafka 4.1+).
REGISTRATION_FENCED, REGISTRATION_CONTROLLED_SHUTDOWN, REGISTRATION_ACTIVE = 10, 20, 30
# kafka.server:type=KafkaServer,name=BrokerState (org.apache.kafka.metadata.BrokerState)
BROKER_RUNNING, BROKER_PENDING_CONTROLLED_SHUTDOWN, BROKER_SHUTTING_DOWN = 3, 6, 7

# names without underscores (see above)
_CONTROLLER = "kafkacontrollerkafkacontroller"
_NAMES = {
    "registration": _CONTROLLER + "brokerregistrationstate",
    "since_heartbeat": _CONTROLLER + "timesincelastheartbeatreceivedms",
    "active_controller": _CONTROLLER + "activecontrollercount",
    "broker_state": "kafkaserverkafkaserverbrokerstate",
    "applied_offset": "kafkaserverbrokermetadatametricslastappliedrecordoffset",
    "applied_timestamp": "kafkaserverbrokermetadatametricslastappliedrecordtimestamp",
    "current_controller": "kafkaservermetadataloadercurrentcontrollerid",
    "raft_leader": "kafkaserverraftmetricscurrentleader",
    "raft_epoch": "kafkaserverraftmetricscurrentepoch",
    "high_watermark": "kafkaserverraftmetricshighwatermark",
}
_START_TIME = "kafkaserverappinfostarttimems"


class ScrapeError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeMetrics:
    """One scrape of one node. ``None``: the exporter did not show that value."""

    node_id: int | None
    start_time_ms: int | None           # app-info: changes with every process start
    broker_state: int | None
    applied_offset: int | None          # the metadata offset the broker has applied ...
    applied_timestamp_ms: int | None    # ... and the time the controller wrote that record
    current_controller_id: int | None
    raft_leader: int | None
    raft_epoch: int | None
    high_watermark: int | None
    is_active_controller: bool = False
    # the active controller's view of every broker (empty elsewhere)
    registration: dict[int, int] = field(default_factory=dict)
    since_heartbeat_ms: dict[int, int] = field(default_factory=dict)


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NAME_LABEL = re.compile(r'[{,]\s*name="([^"]*)"')
_WANTED = frozenset((*_NAMES.values(), _START_TIME))
# what a wanted name can start with: a ``*_value`` sample's name before its ``name`` label
_WANTED_STARTS = frozenset(n[:i] for n in _WANTED for i in range(1, len(n) + 1))


def _wanted_lines(text: str) -> str:
    """The page's sample lines that can hold a value the collector reads. A broker's page has
    ~3,000 samples and the collector wants a dozen: the parser reads only these (its time is
    most of the collector's CPU, and a round waits for its slowest page)."""
    keep = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip()[0] == "#":
            continue  # HELP and TYPE: the collector reads values by sample name
        name = (line.split("{", 1)[0].split(None, 1) or [""])[0]
        folded = name.lower().replace("_", "")
        if folded.endswith("value") and folded[:-5] in _WANTED_STARTS:
            label = _NAME_LABEL.search(line)
            folded = folded[:-5] + label.group(1).lower().replace("_", "") if label else folded
        if folded in _WANTED or not _METRIC_NAME.fullmatch(name):  # not a sample: the parser says why
            keep.append(line)
    keep.append("")
    return "\n".join(keep)


def _samples(text: str):
    """(folded name without underscores, labels, value) for every sample."""
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            name, labels = sample.name, dict(sample.labels)
            if name.endswith("_value") and "name" in labels:
                name = name[: -len("value")] + labels.pop("name").lower()
            yield name.lower().replace("_", ""), labels, sample.value


def parse(text: str) -> NodeMetrics:
    """The collector's values from one exporter page (the text format)."""
    single: dict[str, float] = {}
    per_broker: dict[str, dict[int, int]] = {"registration": {}, "since_heartbeat": {}}
    node_id = start_time = None
    by_name = {v: k for k, v in _NAMES.items()}
    for name, labels, value in _samples(text):
        if name == _START_TIME:
            if "id" in labels and labels["id"].lstrip("-").isdigit():
                node_id, start_time = int(labels["id"]), int(value)
            elif start_time is None:
                start_time = int(value)
            continue
        key = by_name.get(name)
        if key is None or value != value:  # unknown, or NaN
            continue
        if key in per_broker:
            if labels.get("broker", "").lstrip("-").isdigit():
                per_broker[key][int(labels["broker"])] = int(value)
        else:
            single[key] = value

    def num(key: str) -> int | None:
        return int(single[key]) if key in single else None

    leader = num("raft_leader")
    if "active_controller" in single:
        active = single["active_controller"] == 1
    else:  # an exporter that drops ActiveControllerCount: the raft leader is the active controller
        active = node_id is not None and leader == node_id and bool(per_broker["registration"])
    return NodeMetrics(node_id=node_id, start_time_ms=start_time, broker_state=num("broker_state"),
                       applied_offset=num("applied_offset"), applied_timestamp_ms=num("applied_timestamp"),
                       current_controller_id=num("current_controller"), raft_leader=leader, raft_epoch=num("raft_epoch"),
                       high_watermark=num("high_watermark"), is_active_controller=bool(active),
                       registration=per_broker["registration"] if active else {},
                       since_heartbeat_ms=per_broker["since_heartbeat"] if active else {})


def scrape(url: str, timeout_s: float, fetch=None) -> NodeMetrics:
    """One exporter page. The standard library's client: the collector scrapes every node at once
    from a thread pool, where requests (over urllib3-future here) time out on pages that urllib
    reads in time."""
    try:
        text = (fetch or _fetch)(url, timeout_s)
    except (OSError, ValueError) as exc:  # URLError, HTTPError and timeouts are OSErrors
        raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}") from None
    try:
        return parse(text)
    except ValueError as exc:
        raise ScrapeError(f"{url}: not the Prometheus text format ({exc})") from None


def _fetch(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode("utf-8", errors="replace")
