"""Options of the Kafka source and sink (udfs.kafka_options): parsed once, errors name option and fix."""

from __future__ import annotations

import pytest

from udfs.kafka_options import OptionError, parse_source_options, shared_settings
from udfs.kafka_sink import parse_sink_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b"}


def test_defaults_follow_sparks_kafka_source():
    options = parse_source_options(BASE)
    assert options.subscribe == ("a", "b") and options.starting_offsets.kind == "latest"
    assert options.fail_on_data_loss and options.max_offsets_per_trigger is None and not options.decoded
    assert options.client == {"bootstrap.servers": "127.0.0.1:9092"}


def test_kafka_options_pass_through_to_librdkafka_and_keys_are_case_insensitive():
    options = parse_source_options({**BASE, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                                    "kafka.sasl.password": "S3cr3t", "STARTINGOFFSETS": "earliest",
                                    "maxoffsetspertrigger": "500", "kafka.isolation.level": "read_uncommitted"})
    assert options.client["sasl.password"] == "S3cr3t" and options.client["security.protocol"] == "SASL_SSL"
    assert options.starting_offsets.kind == "earliest" and options.max_offsets_per_trigger == 500
    assert "isolation.level" not in shared_settings(options.client), "consumer-only: not for producers"


@pytest.mark.parametrize("extra, option, why", [
    ({"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers", "required"),
    ({"subscribePattern": "a.*"}, "subscribe", "subscribe and subscribePattern together"),
    ({"maxOffsetsPerTrigger": "lots"}, "maxOffsetsPerTrigger", "not a number"),
    ({"minPartitions": "0"}, "minPartitions", "must be positive"),
    ({"rampUpBatches": "-1"}, "rampUpBatches", "a count of halvings, not negative"),
    ({"rampUpBatches": "40"}, "rampUpBatches", "a run would start with batches of a few records"),
    ({"recordsPerTask": "-5"}, "recordsPerTask", "must be positive"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "boolean"),
    ({"decode": "json"}, "decode", "unsupported decoding"),
    ({"startingOffsets": "first"}, "startingOffsets", "bad offsets"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "the source owns it: use startingOffsets"),
    ({"startingOffset": "earliest"}, "startingoffset", "typo gets a did-you-mean"),
    ({"deadLetterTopic": "dlq"}, "deadLetterTopic", "dead letters need decoding"),
    ({"schema.registry.url": "http://127.0.0.1:8081"}, "schema.registry.url", "registry needs decode=avro"),
    ({"brokerUnavailable.maxWaitMs": "0"}, "brokerUnavailable.maxWaitMs", "leave it out to wait forever"),
    ({"brokerUnavailable.maxWaitMs": "forever"}, "brokerUnavailable.maxWaitMs", "forever is the default"),
    ({"fetchOffset.retryIntervalMs": "-5"}, "fetchOffset.retryIntervalMs", "must be positive"),
    ({"fetchOffset.numRetries": "3"}, "fetchoffset.numretries", "Spark's retry count: this source waits by time"),
    ({"output": "rows"}, "output", "events or packs"),
    ({"output": "packs"}, "output", "packs are made of decoded events"),
    ({"output": "packs", "decode": "avro", "packs.clientShards": "0"}, "packs.clientShards", "must be positive"),
    ({"output": "packs", "decode": "avro", "packs.holdShards": "1,x"}, "packs.holdShards", "integers"),
])
def test_bad_options_name_the_option_and_the_fix(extra, option, why):
    with pytest.raises(OptionError) as err:
        parse_source_options({**BASE, **extra})
    assert err.value.option == option, why
    assert "Fix:" in str(err.value), why


def test_packs_take_the_jobs_sharding_and_future_limit():
    options = parse_source_options({**BASE, "decode": "avro", "output": "packs", "packs.clientShards": "32",
                                    "packs.maxFutureMs": "60000"})
    assert (options.output, options.pack_client_shards, options.pack_max_future_ms) == ("packs", 32, 60_000)
    assert parse_source_options({**BASE, "decode": "avro", "output": "packs", "packs.holdShards": "3, 0,7"}
                                ).pack_hold_shards == (3, 0, 7)
    default = parse_source_options({**BASE, "decode": "avro"})
    assert default.pack_hold_shards == ()
    assert (default.output, default.pack_client_shards, default.pack_max_future_ms) == ("events", 16, 300_000)


def test_typo_suggests_the_right_name():
    with pytest.raises(OptionError, match="did you mean 'startingOffsets'"):
        parse_source_options({**BASE, "startingOffset": "earliest"})


def test_subscribe_pattern_matches_whole_topic_names_and_assign_lists_partitions():
    options = parse_source_options({"kafka.bootstrap.servers": "x", "subscribePattern": r"ev\..*"})
    assert options.matches("ev.a") and not options.matches("xev.a")
    options = parse_source_options({"kafka.bootstrap.servers": "x", "assign": '{"t": [1, 0]}'})
    assert options.assign == (("t", 0), ("t", 1)) and options.matches("t")
    with pytest.raises(OptionError, match="assign"):
        parse_source_options({"kafka.bootstrap.servers": "x", "assign": "t:0"})


def test_sink_options():
    options = parse_sink_options({"kafka.bootstrap.servers": "x", "topic": "alerts", "kafka.group.id": "g"})
    assert options.topic == "alerts" and options.encode == "avro" and "group.id" not in options.client
    with pytest.raises(OptionError, match="encode"):
        parse_sink_options({"kafka.bootstrap.servers": "x", "encode": "json"})


def test_waiting_for_an_unreachable_broker_defaults_to_forever():
    policy = parse_source_options(BASE).retry_policy
    assert (policy.retry_interval_ms, policy.attempt_timeout_ms, policy.max_wait_ms) == (10, 30_000, None)
    policy = parse_source_options({**BASE, "fetchOffset.retryIntervalMs": "250", "fetchOffset.timeoutMs": "3000",
                                   "brokerUnavailable.maxWaitMs": "600000"}).retry_policy
    assert (policy.retry_interval_ms, policy.attempt_timeout_ms, policy.max_wait_ms) == (250, 3000, 600_000)
    with pytest.raises(OptionError, match="leave the option out to wait forever"):
        parse_source_options({**BASE, "brokerUnavailable.maxWaitMs": "forever"})


def test_the_jobs_config_keys_are_options_the_source_knows():
    """streaming.spark.job passes KafkaSettings.source_options() to the source under the keys' names."""
    from streaming import config

    settings = config.load(overrides={"kafka.fetchOffset.retryIntervalMs": "100", "kafka.fetchOffset.timeoutMs": 2000,
                                      "kafka.kafkaConsumer.pollTimeoutMs": 4000,
                                      "kafka.brokerUnavailable.maxWaitMs": "60000"})
    passed = settings.kafka.source_options()
    assert passed == {"fetchOffset.retryIntervalMs": "100", "fetchOffset.timeoutMs": "2000",
                      "kafkaConsumer.pollTimeoutMs": "4000", "brokerUnavailable.maxWaitMs": "60000"}
    options = parse_source_options({**BASE, **passed})
    assert options.poll_timeout_ms == 4000 and options.retry_policy.max_wait_ms == 60_000
    assert config.load().kafka.source_options() == {}, "unset keys leave the source's defaults"
    with pytest.raises(config.ConfigError, match="kafka.brokerUnavailable.maxWaitMs.*wait forever"):
        config.load(overrides={"kafka.brokerUnavailable.maxWaitMs": 0})
