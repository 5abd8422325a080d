"""Options of the Kafka data sources, parsed once into frozen objects.

Spark hands options over as a case-insensitive dict of strings; names follow Spark's Kafka
connector (``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets``, ...). Every
``kafka.*`` option is passed to librdkafka without the prefix (SASL/SSL included). Errors name
the option and the fix.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from typing import Mapping

from udfs.kafka_retry import MAX_WAIT_OPTION, RetryPolicy
from udfs.offsets import OffsetSpecError, StartingOffsets, TopicPartition

DECODE_MODES = ("none", "avro", "avro-schemaless")
OUTPUT_MODES = ("events", "packs")
KAFKA_PREFIX = "kafka."
REGISTRY_PREFIX = "schema.registry."

# librdkafka settings the source controls itself, with the option to use instead.
_SOURCE_OWNED_KAFKA_SETTINGS = {
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.commit": "the source keeps offsets in Spark's checkpoint and never commits them",
    "enable.auto.offset.store": "the source keeps offsets in Spark's checkpoint and never commits them",
}


class OptionError(ValueError):
    """A bad data source option: ``option`` is its name, the message says how to fix it."""

    def __init__(self, option: str, problem: str, fix: str):
        super().__init__(f"option '{option}': {problem}. Fix: {fix}")
        self.option, self.problem, self.fix = option, problem, fix


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def client_settings(options: Mapping[str, str], owned: Mapping[str, str] = {}) -> dict[str, str]:
    """librdkafka settings from the ``kafka.*`` options (prefix removed)."""
    settings = {}
    for key, value in _lower(options).items():
        if not key.startswith(KAFKA_PREFIX):
            continue
        name = key[len(KAFKA_PREFIX):]
        if name in owned:
            raise OptionError(key, "is set by the data source itself", owned[name])
        settings[name] = value
    if not settings.get("bootstrap.servers"):
        raise OptionError("kafka.bootstrap.servers", "is missing",
                          'pass .option("kafka.bootstrap.servers", "host1:9092,host2:9092")')
    return settings


# Consumer-only librdkafka settings: an admin client or producer would warn about each of them.
_CONSUMER_ONLY = ("isolation.level", "group.", "fetch.", "max.partition.fetch.bytes", "queued.",
                  "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
                  "partition.assignment.strategy", "check.crcs", "enable.partition.eof")


def shared_settings(client: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``client`` that apply to admin clients and producers too (connection,
    security): consumer-only ones are left out."""
    return {k: v for k, v in client.items() if not k.startswith(_CONSUMER_ONLY)}


def registry_settings(options: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(url, client conf) of the Schema Registry from ``schema.registry.*`` options."""
    url, conf = None, {}
    for key, value in _lower(options).items():
        if key == "schema.registry.url":
            url = value
        elif key.startswith(REGISTRY_PREFIX):
            conf[key[len(REGISTRY_PREFIX):]] = value
    return url, conf


def positive_int(options: Mapping[str, str], name: str, default: int | None = None,
                 fix: str | None = None) -> int | None:
    raw = _lower(options).get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(name, f"{raw!r} is not a whole number",
                          fix or f"pass a positive integer, e.g. {default or 100000}") from None
    if value <= 0:
        raise OptionError(name, f"{value} is not positive", fix or "pass a number above 0, or leave the option out")
    return value


def boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _lower(options).get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(name, f"{raw!r} is not a boolean", "pass true or false")


# Options Spark itself adds to a writer's options.
_SPARK_WRITER_OPTIONS = ("checkpointlocation", "path", "queryname")


def check_known(options: Mapping[str, str], known: tuple[str, ...], source: str, strict: bool = True) -> None:
    """Reject misspelt options (Spark would silently ignore them); ``strict=False`` only logs."""
    by_lower = {k.lower(): k for k in known}
    for key in _lower(options):
        if key.startswith((KAFKA_PREFIX, REGISTRY_PREFIX)) or key in by_lower or key in _SPARK_WRITER_OPTIONS:
            continue
        close = difflib.get_close_matches(key, list(by_lower), n=1, cutoff=0.6)
        hint = f"did you mean '{by_lower[close[0]]}'?" if close else f"{source} knows {', '.join(known)} and kafka.*"
        if strict:
            raise OptionError(key, "is not an option of " + source, hint)
        logging.getLogger("epochwatch.kafka_options").warning("option '%s' is ignored by %s: %s", key, source, hint)


SOURCE_OPTIONS = (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "maxOffsetsPerTrigger", "rampUpBatches",
    "minPartitions", "recordsPerTask", "failOnDataLoss", "decode", "deadLetterTopic", "kafkaConsumer.pollTimeoutMs",
    "arrowBatchSize", "fetchOffset.retryIntervalMs", "fetchOffset.timeoutMs", MAX_WAIT_OPTION,
    "output", "packs.clientShards", "packs.maxFutureMs", "packs.maxPastMs", "packs.maxEpoch", "packs.clock",
    "packs.holdShards", "packs.maxClusters", "packs.clusterRegistry",
)
PACK_CLOCKS = ("wall", "events")


@dataclass(frozen=True)
class SourceOptions:
    client: Mapping[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting_offsets: StartingOffsets = field(default_factory=lambda: StartingOffsets("latest"))
    max_offsets_per_trigger: int | None = None
    ramp_up_batches: int = 0
    min_partitions: int | None = None
    records_per_task: int | None = None
    fail_on_data_loss: bool = True
    decode: str = "none"
    registry_url: str | None = None
    registry_client: Mapping[str, str] = field(default_factory=dict)
    dead_letter_topic: str | None = None
    poll_timeout_ms: int = 120_000
    arrow_batch_size: int = 20_000
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    output: str = "events"
    pack_client_shards: int = 16
    pack_max_future_ms: int = 300_000
    pack_max_past_ms: int = 604_800_000
    pack_max_epoch: int = 2**53
    pack_clock: str = "wall"
    pack_hold_shards: tuple[int, ...] = ()  # streaming.spark.hold_keys
    pack_max_clusters: int | None = None  # streaming.spark.cluster_gate
    pack_cluster_registry: str | None = None

    @property
    def decoded(self) -> bool:
        return self.decode != "none"

    def __repr__(self) -> str:  # SASL / SSL passwords, registry userinfo: never in a log line
        from udfs.redact import redacted_repr

        return redacted_repr(self)

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to the subscription (pattern: the whole name must match)."""
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.subscribe


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    check_known(options, SOURCE_OPTIONS, "the epochwatch-kafka source")
    lowered = _lower(options)
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in lowered]
    if len(chosen) != 1:
        raise OptionError("subscribe", f"{'none' if not chosen else ' and '.join(chosen)} given",
                          "pass exactly one of subscribe (topic1,topic2), subscribePattern (a regex) "
                          'or assign ({"topic": [0, 1]})')
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: tuple[TopicPartition, ...] = ()
    if "subscribe" in lowered:
        subscribe = tuple(t.strip() for t in lowered["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("subscribe", "is empty", "list topic names separated by commas")
    elif "subscribepattern" in lowered:
        pattern = lowered["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("subscribePattern", f"{pattern!r} is not a valid regex ({exc})",
                              "write a Python regular expression, e.g. epochwatch\\..*") from None
    else:
        assign = _parse_assign(lowered["assign"])
    try:
        starting = StartingOffsets.parse(lowered.get("startingoffsets", "latest"))
    except OffsetSpecError as exc:
        raise OptionError("startingOffsets", exc.problem, exc.fix) from None
    decode = lowered.get("decode", "none").strip().lower()
    if decode not in DECODE_MODES:
        raise OptionError("decode", f"{decode!r} is not supported", f"use one of {', '.join(DECODE_MODES)}")
    registry_url, registry_client = registry_settings(options)
    if registry_url and decode != "avro":
        raise OptionError("schema.registry.url", f"only applies with decode=avro (decode is {decode})",
                          "set decode=avro, or drop schema.registry.url")
    dead_letter_topic = lowered.get("deadlettertopic", "").strip() or None
    if dead_letter_topic and not decode.startswith("avro"):
        raise OptionError("deadLetterTopic", "only applies when records are decoded",
                          "set decode=avro or decode=avro-schemaless, or drop deadLetterTopic")
    output = lowered.get("output", "events").strip().lower()
    if output not in OUTPUT_MODES:
        raise OptionError("output", f"{output!r} is not supported", f"use one of {', '.join(OUTPUT_MODES)}")
    if output == "packs" and not decode.startswith("avro"):
        raise OptionError("output", "packs are made of decoded events",
                          "set decode=avro or decode=avro-schemaless, or leave output at events")
    pack_clock = lowered.get("packs.clock", "wall").strip().lower()
    if pack_clock not in PACK_CLOCKS:
        raise OptionError("packs.clock", f"{pack_clock!r} is not supported",
                          "wall (event times judged by the wall clock) or events (by the batch's own times)")
    try:
        hold_shards = tuple(int(s) for s in lowered.get("packs.holdshards", "").split(",") if s.strip())
    except ValueError:
        raise OptionError("packs.holdShards", f"{lowered['packs.holdshards']!r} is not a list of shards",
                          "leave it to epochwatch (streaming.spark.hold_keys), or pass comma-separated integers"
                          ) from None
    return SourceOptions(
        client=client_settings(options, _SOURCE_OWNED_KAFKA_SETTINGS),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        max_offsets_per_trigger=positive_int(options, "maxOffsetsPerTrigger"),
        ramp_up_batches=_ramp_up_batches(options),
        min_partitions=positive_int(options, "minPartitions"),
        records_per_task=positive_int(options, "recordsPerTask"),
        fail_on_data_loss=boolean(options, "failOnDataLoss", True),
        decode=decode,
        registry_url=registry_url,
        registry_client=registry_client,
        dead_letter_topic=dead_letter_topic,
        poll_timeout_ms=positive_int(options, "kafkaConsumer.pollTimeoutMs", 120_000),
        arrow_batch_size=positive_int(options, "arrowBatchSize", 20_000),
        retry_policy=_retry_policy(options),
        output=output,
        pack_client_shards=positive_int(options, "packs.clientShards", 16),
        pack_max_future_ms=positive_int(options, "packs.maxFutureMs", 300_000),
        pack_max_past_ms=positive_int(options, "packs.maxPastMs", 604_800_000),
        pack_max_epoch=positive_int(options, "packs.maxEpoch", 2**53),
        pack_clock=pack_clock,
        pack_hold_shards=hold_shards,
        pack_max_clusters=positive_int(options, "packs.maxClusters"),
        pack_cluster_registry=lowered.get("packs.clusterregistry", "").strip() or None,
    )


# each step halves the cap: beyond this a run would start with batches of a few records
MAX_RAMP_UP_BATCHES = 10


def _ramp_up_batches(options: Mapping[str, str]) -> int:
    raw = _lower(options).get("rampupbatches")
    if raw is None:
        return 0
    if not raw.strip().isdigit() or int(raw) > MAX_RAMP_UP_BATCHES:
        raise OptionError("rampUpBatches", f"{raw!r} is not a whole number from 0 to {MAX_RAMP_UP_BATCHES}",
                          "pass 0 to read maxOffsetsPerTrigger records from the first batch, or e.g. 3 "
                          "(the first batches take 1/8, 1/4 and 1/2 of it)")
    return int(raw)


def _retry_policy(options: Mapping[str, str]) -> RetryPolicy:
    default = RetryPolicy()
    return RetryPolicy(
        retry_interval_ms=positive_int(options, "fetchOffset.retryIntervalMs", default.retry_interval_ms),
        attempt_timeout_ms=positive_int(options, "fetchOffset.timeoutMs", default.attempt_timeout_ms),
        max_wait_ms=positive_int(options, MAX_WAIT_OPTION, None,
                                 fix="pass how long to wait for an unreachable broker in milliseconds, e.g. "
                                     "600000, or leave the option out to wait forever"),
    )


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    import json

    try:
        doc = json.loads(text)
        pairs = tuple(sorted((str(t), int(p)) for t, parts in doc.items() for p in parts))
    except (ValueError, TypeError, AttributeError):
        raise OptionError("assign", f"{text!r} is not a JSON object of topic -> partition list",
                          'write it as {"topicA": [0, 1], "topicB": [2]}') from None
    if not pairs:
        raise OptionError("assign", "lists no partitions", 'write it as {"topicA": [0, 1]}')
    return pairs
