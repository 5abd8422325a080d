"""Driver-side questions to the broker: which partitions are subscribed, the topic ids of their
topics, and their earliest and latest offsets (one batched request each, whatever the number of
partitions).

Every question waits out an unreachable broker (udfs.kafka_retry): a micro-batch is planned only
on real answers, never on a guess, and ``query.stop()`` still ends the wait at once (Spark kills
the source's Python process). The latest offset honours ``isolation.level``: read_committed
(librdkafka's default) gives the last stable offset, so a batch never waits for an open
transaction.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from udfs.kafka_options import SourceOptions, shared_settings
from udfs.kafka_retry import call_with_retry, is_permanent, kafka_error, log
from udfs.offsets import TopicPartition

_GONE = (3, -190)  # UNKNOWN_TOPIC_OR_PART, _UNKNOWN_PARTITION
# Answers that say the client's idea of a partition's leader is out of date: LEADER_NOT_AVAILABLE,
# NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, _NOENT
# ("no leaders found"). librdkafka's AdminClient does not refresh its metadata on them: once a
# leader's epoch moved on (a leader elected again, a broker fenced and back), its ListOffsets
# carried the old epoch and got FENCED_LEADER_EPOCH forever (seen on Kafka 4.1.2; Java's client
# refreshes, KAFKA-9535). A new client starts from fresh metadata.
_STALE_LEADER = (5, 6, 9, 74, 75, -156)
# A failed SASL handshake reaches list_topics only as its own timeout (fetchOffset.timeoutMs,
# 30 s by default); the real cause comes through error_cb meanwhile. Asking in slices this long
# lets a wrong password end the wait after about a second instead.
_ERROR_CHECK_S = 1.0
_NO_TOPIC_IDS = (35, -165)  # UNSUPPORTED_VERSION, _UNSUPPORTED_FEATURE: a broker older than KIP-516


def _code(exc: BaseException) -> int | None:
    found = kafka_error(exc)
    return None if found is None else found.code()


class BrokerOffsets:
    """One AdminClient per stream reader on the driver (created lazily, never pickled)."""

    def __init__(self, options: SourceOptions, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._options = options
        self._admin = None
        self._clock, self._sleep = clock, sleep
        self._reported = None   # a permanent error librdkafka reported through error_cb
        self._warned_no_ids = False

    def _client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({**shared_settings(self._options.client), "error_cb": self._on_client_error})
        return self._admin

    def _on_client_error(self, error) -> None:
        if is_permanent(error):
            self._reported = error

    def _blocking_error(self):
        if self._admin is not None:
            self._admin.poll(0)   # serves error_cb
        return self._reported

    def _ask(self, what: str, attempt: Callable[[float], object]):
        self._reported = None
        servers = self._options.client.get("bootstrap.servers", "?")
        return call_with_retry(attempt, self._options.retry_policy, f"{what} ({servers})", clock=self._clock,
                               sleep=self._sleep, blocking_error=self._blocking_error)

    def subscription(self) -> tuple[list[TopicPartition], dict[str, str]]:
        """Subscribed partitions, and the topic id of each of their topics (where the broker has one)."""
        partitions = self.partitions()
        return partitions, self.topic_ids(sorted({t for t, _ in partitions}))

    def partitions(self) -> list[TopicPartition]:
        """Subscribed partitions that exist right now (a missing topic simply has none yet)."""
        return self._ask("listing topics", self._list_partitions)

    def _list_partitions(self, timeout_s: float) -> list[TopicPartition]:
        from confluent_kafka import KafkaException

        metadata = self._metadata(timeout_s)
        found: list[TopicPartition] = []
        for name, topic in metadata.topics.items():
            if not self._options.matches(name) or name.startswith("__"):
                continue
            if topic.error is not None:
                if topic.error.code() in _GONE:
                    continue
                raise KafkaException(topic.error)   # a leader election is retried, an ACL problem is not
            for partition in topic.partitions:
                if not self._options.assign or (name, partition) in self._options.assign:
                    found.append((name, partition))
        return sorted(found)

    def _metadata(self, timeout_s: float):
        """list_topics within timeout_s, stopping early when the client reported a permanent error."""
        from confluent_kafka import KafkaException

        deadline = self._clock() + timeout_s
        while True:
            asked, left = self._clock(), deadline - self._clock()
            wait = max(0.001, min(_ERROR_CHECK_S, left))
            try:
                return self._client().list_topics(timeout=wait)
            except KafkaException:
                timed_out = self._clock() - asked >= 0.9 * wait   # anything quicker: call_with_retry's backoff
                if not timed_out or left <= _ERROR_CHECK_S or self._blocking_error() is not None:
                    raise   # call_with_retry sees a reported error and names its fix

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Topic name -> topic id (KIP-516): a re-created topic gets a new one. Topics deleted
        meanwhile, and brokers without topic ids, give none."""
        topics = sorted(topics)
        return self._ask("describing topics", lambda timeout_s: self._describe(topics, timeout_s)) if topics else {}

    def _describe(self, topics: list[str], timeout_s: float) -> dict[str, str]:
        from confluent_kafka import KafkaException, TopicCollection

        futures = self._client().describe_topics(TopicCollection(topics), request_timeout=timeout_s)
        ids = {}
        for name, future in futures.items():
            try:
                topic_id = future.result(timeout=timeout_s).topic_id
            except KafkaException as exc:
                if _code(exc) in _GONE:
                    continue
                if _code(exc) in _NO_TOPIC_IDS:
                    self._warn_no_topic_ids(exc)
                    return {}
                raise
            if topic_id is not None and (topic_id.get_most_significant_bits() or topic_id.get_least_significant_bits()):
                ids[name] = str(topic_id)
        return ids

    def _warn_no_topic_ids(self, exc: Exception) -> None:
        if not self._warned_no_ids:
            self._warned_no_ids = True
            log.warning("epochwatch-kafka: the broker gives no topic ids (%s): a re-created topic is detected only "
                        "when its offsets go back", exc)

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.earliest(), "listing earliest offsets")

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.latest(), "listing latest offsets")

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec, what: str) -> dict[TopicPartition, int]:
        partitions = list(partitions)
        if not partitions:
            return {}
        return self._ask(what, lambda timeout_s: self._list_offsets_once(partitions, spec, timeout_s))

    def _list_offsets_once(self, partitions: list[TopicPartition], spec, timeout_s: float) -> dict[TopicPartition, int]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition as KafkaTopicPartition

        wanted = {KafkaTopicPartition(t, p): spec for t, p in partitions}
        committed_only = self._options.client.get("isolation.level", "read_committed") == "read_committed"
        level = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        futures = self._client().list_offsets(wanted, isolation_level=level, request_timeout=timeout_s)
        found = {}
        for tp, future in futures.items():
            try:
                offset = future.result(timeout=timeout_s).offset
            except KafkaException as exc:  # e.g. the topic was deleted since it was listed
                if _code(exc) in _STALE_LEADER:
                    self._admin = None   # the retry asks with a new client, on fresh metadata
                if _code(exc) not in _GONE:
                    raise
                continue
            if offset < 0:
                # -1001 (OFFSET_INVALID) with no error: what librdkafka 2.16 answered for a
                # partition whose leader did not answer in time (seen with a broker paused); a
                # batch planned on it would read as data loss. No answer: asked again.
                raise TimeoutError(f"no offset for {tp.topic}-{tp.partition} (got {offset})")
            found[(tp.topic, tp.partition)] = offset
        return found

    def close(self) -> None:
        self._admin = None

