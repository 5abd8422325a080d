"""The state keys, described once. A state key is (cluster_id, kind, shard): each kind runs one
rules table over its entities, owns some event types (their invalid events are dead-lettered by
it alone), and may spread its entities over ``rules.client.shards`` keys by one of their ids.
Besides the rules' kinds, the packs carry rows that are no rules key (dead letters, the batch's
clock, data losses, the hold: streaming.spark.packs)."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable

from streaming.events import CLUSTER_RESET
from streaming.rules import records
from streaming.rules.brokers import BrokerFleet
from streaming.rules.clients import ClientShard
from streaming.rules.commits import CommitShard
from streaming.rules.nodes import NodeTable


@dataclass(frozen=True)
class KeyKind:
    name: str                     # the key's kind (its table is the ``table`` state variable)
    table: type                   # the rules table one key runs
    record: type                  # one entity's record in that table (streaming.rules.records)
    id_fields: tuple[str, ...]    # the record's fields that name its entity
    owns: frozenset[str]          # the event types whose owner this kind is
    sharded_by: str | None = None      # the event field that spreads entities over shards
    entity_label: str | None = None    # the alert label that names an entity (expiry summaries)
    # the rules mark each record they change as touched, so a step re-reads only those rows and
    # stores only those, in the table's log (streaming.spark.json_tables)
    incremental_json: bool = False

    @property
    def entity_id(self) -> Callable[[object], object]:
        return attrgetter(*self.id_fields)


BROKERS = KeyKind("brokers", BrokerFleet, records.BrokerRecord, ("broker_id",),
                  frozenset({"broker_heartbeat", "metadata_update", CLUSTER_RESET}), entity_label="broker_id")
CLIENTS = KeyKind("clients", ClientShard, records.ClientRecord, ("client_id",),
                  frozenset({"metadata_response", "metadata_request_failed", "client_rebootstrap"}),
                  sharded_by="client_id", entity_label="client_id", incremental_json=True)
NODES = KeyKind("nodes", NodeTable, records.NodeRecord, ("node_id",), frozenset({"connection_attempt"}),
                entity_label="node_id")
# A commit shard holds every partition its groups commit and a live micro-batch commits a few of
# them: written whole, it was ~240 KB a shard every batch of the latency benchmark's fleet
# (bench/HISTORY.md, session 43), and a cluster's groups can have far more partitions.
COMMITS = KeyKind("commits", CommitShard, records.CommitRecord, ("group_id", "topic", "partition"),
                  frozenset({"offset_commit"}), sharded_by="group_id", incremental_json=True)

KINDS: dict[str, KeyKind] = {k.name: k for k in (BROKERS, CLIENTS, NODES, COMMITS)}
OWNER_KIND: dict[str, str] = {event_type: k.name for k in KINDS.values() for event_type in k.owns}

# pack rows that are no rules key
DEAD_LETTER = "dead_letter"   # a record the source could not decode, or an implausible event
CLOCK = "clock"               # the batch's newest event time and its record count
# records the source skipped as lost (failOnDataLoss=false): one row, ``events`` = how many times,
# summed into the progress's observedMetrics like the records (streaming.sinks.metrics: data loss)
DATA_LOSS = "data_loss"
# while a partition of the events topic is behind, one row per state partition carries the clock
# it is held at to the keys that only a timer steps there (streaming.spark.hold_keys)
HOLD = "hold"
