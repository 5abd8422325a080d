"""The durable sink: alert records to the alerts topic, dead letters to the dead-letter topic."""

from __future__ import annotations

from streaming.config import Settings
from streaming.sinks.base import OutputBatch
from streaming.sinks.labels import presented


class KafkaOutputSink:
    """Alert records to the alerts topic (key = fingerprint), labelled as in Alertmanager
    (``sinks.labels``, streaming.sinks.labels), dead letters to the DLQ topic with the reason and
    source coordinates in headers; flushes before the batch counts as done.

    With kafka.schema.registry.url the alert records carry the registry's id of the alert schema
    (registered if absent, udfs.registry_catalog), asked for once, when the sink is built: a
    registry that does not answer holds the start as an unreachable broker does, one that refuses
    stops it."""

    def __init__(self, settings: Settings):
        from udfs.dead_letters import DeadLetterPublisher
        from udfs.kafka_sink import EventProducer

        k = settings.kafka
        client = {**dict(k.client), "bootstrap.servers": k.bootstrap_servers}
        self.alerts_topic = k.alerts_topic
        self.labels = settings.sinks.labels
        # a broker away while a batch flushes is waited out as the source does (kafka.fetchOffset.*,
        # kafka.brokerUnavailable.maxWaitMs), not a failed batch that ends the query
        catalog = k.registry_catalog(k.alerts_topic)
        if catalog is not None:
            # the alert schema's id is asked for now, at start-up: a registry that refuses the
            # credentials stops the start, not the first alert, which may come at 3 a.m.
            catalog.id_for("alert")
        self.producer = EventProducer(k.bootstrap_servers, k.client, catalog=catalog,
                                      encoding="avro" if k.encoding == "confluent" else "avro-schemaless",
                                      retry=k.retry_policy(), what=f"producing alert records to {k.alerts_topic}")
        self.dead_letters = DeadLetterPublisher(client, k.dlq_topic, retry=k.retry_policy())

    def write(self, batch: OutputBatch) -> None:
        from udfs.dead_letters import DeadLetter

        # the per-client records before the roll-ups that count them: a roll-up in the topic always
        # has its clients there (what a restart rebuilds the roll-ups from, streaming.rules.rollup)
        for records in (batch.alerts, batch.rollups):
            if records:
                self.producer.send([presented(a, self.labels) for a in records], self.alerts_topic)
                self.producer.flush()
        # "published": the source produced it from its read task already (kafka_packs)
        letters = [d for d in batch.dead_letters if not d.get("published")]
        if letters:
            self.dead_letters.publish(DeadLetter(
                topic=d.get("kafka_topic") or "", partition=-1 if d.get("kafka_partition") is None else int(d["kafka_partition"]),
                offset=-1 if d.get("kafka_offset") is None else int(d["kafka_offset"]),
                timestamp_ms=d.get("kafka_timestamp"), key=d.get("raw_key"), value=d.get("raw_value"),
                reason=d["reason"], detail=d.get("detail") or "") for d in letters)

    def close(self) -> None:
        self.producer.flush()
        # drop the librdkafka handles now, not at garbage collection, so that they stop
        # reconnecting (and logging) once the job is done
        self.producer = self.dead_letters = None
