"""The packer the Kafka source (udfs.kafka_source) is handed for ``output=packs``, so that udfs
imports nothing of streaming: it routes and packs each task's decoded batches
(streaming.spark.packs) behind the cluster cap's gate, then adds the hold rows and the data-loss
row, and tells the planner which clusters the job holds."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from streaming.spark.cluster_gate import ClusterGate, read_admitted
from streaming.spark.packs import PACK_SCHEMA, hold_rows, loss_row, route_and_pack
from streaming.spark.validity import Limits
from udfs.kafka_options import SourceOptions
from udfs.kafka_source import KafkaEventSource


class SourcePacker:
    schema = PACK_SCHEMA

    def admitted(self, options: SourceOptions) -> frozenset[str]:
        """On the planner: the clusters the job holds (streaming.spark.cluster_gate)."""
        return read_admitted(options.pack_cluster_registry) or frozenset()

    def pack(self, options: SourceOptions, batches: Iterable, *, clock_cap_ms: int | None,
             admitted: frozenset[str], lost: Callable[[], int]) -> Iterator:
        """In a read task: one packing pass over all its ranges (fewer, fuller packs to shuffle);
        ``lost`` counts the data losses once the batches are read."""
        limits = Limits(options.pack_max_future_ms, options.pack_max_past_ms, options.pack_max_epoch,
                        wall_clock=options.pack_clock == "wall")
        gate = ClusterGate(options.pack_max_clusters, admitted) if options.pack_max_clusters else None
        yield from route_and_pack(options.pack_client_shards, limits, clock_cap_ms=clock_cap_ms, gate=gate)(batches)
        if clock_cap_ms is not None and options.pack_hold_shards:
            yield hold_rows(clock_cap_ms, options.pack_hold_shards)
        if lost():
            yield loss_row(lost())


class PackingKafkaSource(KafkaEventSource):
    """``epochwatch-kafka`` as the job registers it: the Kafka source with its packer."""

    packer = SourcePacker()
