"""Driver-side questions to the broker: which partitions are subscribed, and their earliest and
latest offsets (one batched ListOffsets request each, whatever the number of partitions).

The latest offset honours ``isolation.level``: read_committed (librdkafka's default) gives the
last stable offset, so a batch never waits for an open transaction.
"""

from __future__ import annotations

from typing import Iterable

from udfs.kafka_options import SourceOptions, shared_settings
from udfs.offsets import TopicPartition

METADATA_TIMEOUT_S = 30.0
_GONE = (3, -190)  # UNKNOWN_TOPIC_OR_PART, _UNKNOWN_PARTITION


class BrokerOffsets:
    """One AdminClient per stream reader on the driver (created lazily, never pickled)."""

    def __init__(self, options: SourceOptions):
        self._options = options
        self._admin = None

    def _client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(shared_settings(self._options.client))
        return self._admin

    def partitions(self) -> list[TopicPartition]:
        """Subscribed partitions that exist right now (a missing topic simply has none yet)."""
        metadata = self._client().list_topics(timeout=METADATA_TIMEOUT_S)
        found: list[TopicPartition] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not self._options.matches(name) or name.startswith("__"):
                continue
            for partition in topic.partitions:
                if not self._options.assign or (name, partition) in self._options.assign:
                    found.append((name, partition))
        return sorted(found)

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.latest())

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec) -> dict[TopicPartition, int]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition as KafkaTopicPartition

        wanted = {KafkaTopicPartition(t, p): spec for t, p in partitions}
        if not wanted:
            return {}
        committed_only = self._options.client.get("isolation.level", "read_committed") == "read_committed"
        level = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        futures = self._client().list_offsets(wanted, isolation_level=level,
                                              request_timeout=METADATA_TIMEOUT_S)
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(timeout=METADATA_TIMEOUT_S).offset
            except KafkaException as exc:  # e.g. the topic was deleted since it was listed
                if exc.args and getattr(exc.args[0], "code", lambda: None)() not in _GONE:
                    raise
        return found

    def close(self) -> None:
        self._admin = None
