"""``spark.readStream.format("epochwatch-kafka")``: Kafka as a Spark Python streaming data source.

Options follow Spark's Kafka connector (which needs a jar this deployment cannot install):

    kafka.bootstrap.servers   required; every other kafka.* option goes to librdkafka (SASL, SSL...)
    subscribe | subscribePattern | assign   topics "a,b" | a regex | {"topic": [0, 1]}
    startingOffsets           latest (default) | earliest | {"topic": {"0": 23, "1": -2}}  (-2/-1)
    maxOffsetsPerTrigger      at most N records per micro-batch (shared by backlog)
    rampUpBatches             with maxOffsetsPerTrigger: a query run's first K batches that read
                              records take at most N/2^K, N/2^(K-1), ... N/2 (default 0: N from the
                              first): a run's first batch carries its start-up, and each of its
                              records waits for the batch's end
    minPartitions             split big offset ranges into more Spark partitions
    recordsPerTask            read small offset ranges together, about this many records per Spark
                              task, in at least minPartitions tasks (default: one task per range)
    failOnDataLoss            true (default): fail when offsets were deleted or reset;
                              false: log and continue from the earliest available offset
    decode                    none (Spark's Kafka columns) | avro (Confluent wire format, built-in
                              catalog or schema.registry.url) | avro-schemaless (event_type header)
    deadLetterTopic           with decode: produce malformed records there from the read task itself
                              instead of emitting rows (output=packs: a notice without the bytes,
                              marked dlq_published, goes on for the counts)
    output                    events (default: one row per decoded record) | packs (with decode:
                              the records already routed and packed by state key, the input of
                              epochwatch's stateful stage, see streaming.spark.packs; saves Spark turning
                              every event into a row and back into Arrow for the packing step)
    packs.clientShards        with output=packs: client and consumer-group shards (default 16)
    packs.maxFutureMs         with output=packs: events further ahead of the clock are dead letters
                              (default 300000)
    packs.maxPastMs           with output=packs: events further behind it too (default 604800000)
    packs.maxEpoch            with output=packs: incarnations and metadata epochs above it too
                              (default 2^53; streaming.spark.validity)
    packs.clock               with output=packs: wall (default: event times are judged by the wall
                              clock) or events (by the batch's own times: event-time runs)
    kafkaConsumer.pollTimeoutMs   executors: how long one read waits for a record before it
                              checks the time spent waiting against brokerUnavailable.maxWaitMs
                              (default 120000)
    arrowBatchSize            rows per Arrow batch
    fetchOffset.retryIntervalMs   first pause before asking an unreachable broker again; doubles
                              up to 2 s (default 10, as Spark)
    fetchOffset.timeoutMs     deadline of one metadata / offsets request of the driver (default 30000)
    brokerUnavailable.maxWaitMs   how long the driver and the executors wait for an unreachable
                              broker before the query fails; default: wait forever

An unreachable broker (timeouts, transport errors, all brokers down, leaders moving) is waited
out: the next micro-batch is planned only once the broker answers, with one WARNING at most
every 30 s saying for how long it has been unreachable, and ``query.stop()`` still returns at
once. Authentication, TLS, ACL and configuration errors fail at once, naming the fix.

Offsets are ``{"topic": {"partition": next_offset, "topicId": id}}`` kept in Spark's checkpoint:
a restarted query continues exactly after the last committed batch. New partitions, and new
topics matching subscribePattern, are read from their earliest offset. A topic whose id changed
(deleted and created again, KIP-516) is data loss even when it is already longer than the job's
position. Offsets are never committed to Kafka.

Known limit: the Python data source API does not expose the checkpoint directory, so a query
that stops before its first batch commits re-resolves ``startingOffsets`` on restart (Spark's
own Kafka source stores them under ``sources/0``).
"""

from __future__ import annotations

import logging
from collections import Counter
from functools import cache

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from udfs import event_columns
from udfs.kafka_options import OptionError, SourceOptions, parse_source_options
from udfs.offsets import (
    DataLoss,
    OffsetRange,
    admit,
    cap_at,
    group_ranges,
    parse_source_offset,
    plan_ranges,
    ramped,
    recreated_topics,
    resolve_starting,
    split_ranges,
    to_json_dict,
)

log = logging.getLogger("epochwatch.kafka_source")


class KafkaRangePartition(InputPartition):
    """One Spark partition: offset ranges [start, end) of Kafka partitions, read in this order.
    ``losses``: data losses the planner found (failOnDataLoss=false), for this task to report;
    ``clock_cap_ms``: how far the batch's clock may go (udfs.read_progress); ``admitted_clusters``:
    the clusters the job holds (streaming.spark.cluster_gate)."""

    def __init__(self, spans: list[OffsetRange], losses: int = 0, clock_cap_ms: int | None = None):
        super().__init__(spans)
        self.spans = spans
        self.losses = losses
        # the event time of the earliest unread record of a partition behind (udfs.read_progress)
        self.clock_cap_ms = clock_cap_ms
        self.admitted_clusters: frozenset[str] = frozenset()


class KafkaEventSource(DataSource):
    # What turns a task's decoded batches into packs (``output=packs``): handed in by the job's
    # subclass (streaming.spark.source_packs): the source knows the event contract, not the job's keys.
    # It has ``schema``, ``admitted(options)`` on the planner and ``pack(options, batches, ...)``.
    packer = None

    @classmethod
    def name(cls) -> str:
        return "epochwatch-kafka"

    def schema(self):
        options = parse_source_options(self.options)
        if options.output == "packs":
            return self._packer().schema
        return event_columns.spark_schema(options.decoded)

    def streamReader(self, schema) -> "KafkaStreamReader":
        options = parse_source_options(self.options)
        return KafkaStreamReader(options, self._packer() if options.output == "packs" else None)

    def _packer(self):
        if self.packer is None:
            raise OptionError("output", "packs need the job's packer, and this source class has none",
                              "register streaming.spark.source_packs.PackingKafkaSource as epochwatch-kafka "
                              "(streaming.spark.session does)")
        return self.packer


def report_data_loss(losses: list[DataLoss], fail: bool) -> None:
    if not losses:
        return
    if fail:
        from udfs.partition_reader import DataLossError

        raise DataLossError("; ".join(map(str, losses)) + ". Fix: set failOnDataLoss=false to continue from "
                            "the earliest available offsets, or start a new checkpoint")
    for loss in losses:
        log.warning("data loss (failOnDataLoss=false, continuing from the earliest offset): %s", loss)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, packer=None):
        self.options, self.packer = options, packer
        self._broker_offsets = None
        self._next_event_times = None
        self._available_now_target: dict | None = None
        self._latest_seen: dict | None = None
        self._batches_read = 0  # batches of this run that admitted records: the ramp's step

    def __getstate__(self):  # shipped to executors: without the driver's admin client
        state = dict(self.__dict__)
        state["_broker_offsets"] = state["_next_event_times"] = None
        return state

    def _broker(self):
        if self._broker_offsets is None:
            from udfs.broker_offsets import BrokerOffsets

            self._broker_offsets = BrokerOffsets(self.options)
        return self._broker_offsets

    # --- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> dict:
        broker = self._broker()
        partitions, topic_ids = broker.subscription()
        start, losses = resolve_starting(self.options.starting_offsets, partitions,
                                         broker.earliest(partitions), broker.latest(partitions))
        report_data_loss(losses, self.options.fail_on_data_loss)
        return to_json_dict(start, topic_ids)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        broker = self._broker()
        self._available_now_target = broker.latest(broker.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Blocks while the broker is unreachable: an empty batch planned meanwhile would move the
        processing-time horizon past data that is only late, not missing."""
        broker = self._broker()
        begin, recorded_ids = parse_source_offset(start)
        partitions, topic_ids = broker.subscription()
        latest = broker.latest(partitions)
        if self._available_now_target is not None:
            latest = cap_at(latest, self._available_now_target)
        self._latest_seen = latest
        recreated = recreated_topics(recorded_ids, topic_ids)
        # a re-created topic is read from its start, like a new one; partitions() reports the loss
        current = {tp: offset for tp, offset in begin.items() if tp in latest and tp[0] not in recreated}
        current.update(broker.earliest([tp for tp in latest if tp not in current]))
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_rows is not None:
            max_rows = ramped(max_rows, self._batches_read, self.options.ramp_up_batches)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else None
        end = admit(current, latest, max_rows=max_rows, min_rows=min_rows)
        if any(end[tp] > current.get(tp, end[tp]) for tp in end):
            self._batches_read += 1
        return to_json_dict(end, {**recorded_ids, **topic_ids})

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest_seen is None else to_json_dict(self._latest_seen)

    def partitions(self, start: dict, end: dict) -> list[KafkaRangePartition]:
        (begin, begin_ids), (until, until_ids) = parse_source_offset(start), parse_source_offset(end)
        earliest = self._broker().earliest(until)
        ranges, losses = plan_ranges(begin, until, earliest, recreated_topics(begin_ids, until_ids))
        report_data_loss(losses, self.options.fail_on_data_loss)
        spans = split_ranges(ranges, self.options.min_partitions)
        cap = self._clock_cap(until) if self.options.output == "packs" else None
        planned = [KafkaRangePartition(group, clock_cap_ms=cap) for group in
                   group_ranges(spans, self.options.records_per_task, self.options.min_partitions)]
        self._hand_out_clusters(planned)
        if losses and self.options.output == "packs":
            # counted by the job's metrics (streaming.engine.keys.DATA_LOSS), not only logged here: the
            # planner runs in a process of its own, so the count travels with a task
            if planned:
                planned[0].losses = len(losses)
            else:
                planned.append(KafkaRangePartition([], len(losses)))
        return planned

    def _clock_cap(self, until) -> int | None:
        """How far the batch's clock may go: not past a partition that is behind (udfs.read_progress)."""
        from udfs.read_progress import NextEventTimes, lagging

        latest = self._latest_seen if self._latest_seen is not None else self._broker().latest(list(until))
        if self._next_event_times is None:
            options = self.options
            self._next_event_times = NextEventTimes(options.client, lambda topic: _decoder(options, topic),
                                                    options.poll_timeout_ms)
        return self._next_event_times.clock_cap(lagging(until, latest))

    def _hand_out_clusters(self, planned: list[KafkaRangePartition]) -> None:
        """Hand the tasks the clusters the job holds (streaming.spark.cluster_gate)."""
        if self.packer is None or not (self.options.pack_max_clusters and self.options.pack_cluster_registry):
            return
        admitted = self.packer.admitted(self.options)
        for partition in planned:
            partition.admitted_clusters = admitted

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        if self._broker_offsets is not None:
            self._broker_offsets.close()
        if self._next_event_times is not None:
            self._next_event_times.close()

    # --- executor side -------------------------------------------------------------------

    def read(self, partition: KafkaRangePartition):
        from udfs import record_batches
        from udfs.partition_reader import fetch_ranges

        options = self.options
        losses = [partition.losses]
        fetched = fetch_ranges(options.client, partition.spans, chunk_size=options.arrow_batch_size,
                               poll_timeout_ms=options.poll_timeout_ms, fail_on_data_loss=options.fail_on_data_loss,
                               retry=options.retry_policy, on_loss=lambda: losses.append(1))
        if not options.decoded:
            for _, messages in fetched:
                yield record_batches.raw_batch(messages)
            return
        publisher = _dead_letter_publisher(options) if options.dead_letter_topic else None
        notices = publisher is not None and options.output == "packs"

        def decoded():
            decoders = {}  # one per topic for the whole task: each keeps the schemas it resolved
            for span, messages in fetched:
                if span.topic not in decoders:
                    decoders[span.topic] = _decoder(options, span.topic)
                batch, dead = record_batches.decoded_batch(messages, decoders[span.topic],
                                                           keep_dead_letters_as_rows=publisher is None or notices)
                if publisher is not None and dead:
                    publisher.add(dead)
                if batch is not None:
                    yield record_batches.as_notices(batch) if notices else batch
            if publisher is not None:
                _log_dead_letters(publisher.flush(), partition.spans, options.dead_letter_topic)

        if options.output == "packs":
            yield from self.packer.pack(options, decoded(), clock_cap_ms=partition.clock_cap_ms,
                                        admitted=partition.admitted_clusters, lost=lambda: sum(losses))
        else:
            yield from decoded()


def _decoder(options: SourceOptions, topic: str):
    from udfs import record_batches

    if options.decode == "avro":
        catalog = _registry_catalog(options.registry_url, tuple(sorted(options.registry_client.items())),
                                    topic, options.retry_policy) if options.registry_url else None
        return record_batches.confluent_decoder(catalog)
    return record_batches.schemaless_decoder()


def _log_dead_letters(counts: Counter, spans: list[OffsetRange], topic: str) -> None:
    if counts:
        from udfs.dead_letters import summary_line

        where = ", ".join(f"{span.topic}-{span.partition}[{span.start},{span.end})" for span in spans)
        log.warning(summary_line(counts, where, topic))


@cache
def _registry_catalog(url: str, settings: tuple, topic: str, retry):
    """One per executor process and topic: the registry waits as the broker does (``retry``)."""
    from udfs.registry_catalog import RegistryCatalog

    return RegistryCatalog(url, topic, dict(settings), retry=retry)


def _dead_letter_publisher(options: SourceOptions):
    from udfs.dead_letters import DeadLetterPublisher
    from udfs.kafka_options import shared_settings

    return DeadLetterPublisher(shared_settings(options.client), options.dead_letter_topic, retry=options.retry_policy)
