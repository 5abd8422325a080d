"""Waiting out an unreachable broker (udfs.kafka_retry): classification, backoff, warnings, the
wait's bound. Pure: the clock is passed in, and "sleeping" only moves that clock."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.support.fake_time import FakeTime
from udfs.kafka_retry import (
    MAX_RETRY_INTERVAL_MS,
    WARN_EVERY_MS,
    BrokerUnavailableError,
    KafkaClientError,
    Outage,
    RetryPolicy,
    call_with_retry,
    fix_for,
    is_permanent,
    is_transient,
)


def err(code: int, fatal: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, f"reason of {code}", fatal=fatal, retriable=retriable))


@pytest.mark.parametrize("error, transient, why", [
    (err(KafkaError._TIMED_OUT), True, "metadata request to a paused broker (measured: list_topics)"),
    (TimeoutError(), True, "future.result(timeout) of list_offsets / describe_topics to a paused broker"),
    (err(KafkaError._TRANSPORT), True, "connection refused or reset (measured: list_topics to a dead port)"),
    (err(KafkaError._NOENT), True, "'no leaders found': list_offsets while every broker is down (measured)"),
    (err(KafkaError._ALL_BROKERS_DOWN), True, "all brokers down"),
    (err(KafkaError.LEADER_NOT_AVAILABLE), True, "leader election: a topic is not gone"),
    (err(KafkaError.NOT_LEADER_FOR_PARTITION), True, "leadership moved"),
    (err(KafkaError.UNKNOWN, retriable=True), True, "anything librdkafka marks retriable"),
    (err(KafkaError._AUTHENTICATION), False, "wrong credentials never heal by waiting"),
    (err(KafkaError.SASL_AUTHENTICATION_FAILED, retriable=True), False, "auth stays permanent even if retriable"),
    (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), False, "missing ACL"),
    (err(KafkaError._SSL), False, "TLS misconfiguration"),
    (err(KafkaError._INVALID_ARG), False, "bad client configuration"),
    (err(KafkaError._TRANSPORT, fatal=True), False, "a fatal error is never retried"),
    (err(KafkaError.UNKNOWN_TOPIC_OR_PART), False, "a missing topic is the data-loss path's business"),
    (ValueError("bug"), False, "not a Kafka error: propagate"),
])
def test_classification(error, transient, why):
    assert is_transient(error) is transient, why


@pytest.mark.parametrize("code, aborts_a_wait, words", [
    (KafkaError._AUTHENTICATION, True, "kafka.sasl.mechanism"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, True, "ACLs"),
    (KafkaError._SSL, True, "kafka.ssl."),
    (KafkaError._INVALID_ARG, False, "kafka.* option"),   # only ever the answer to a request, never retried
])
def test_permanent_errors_name_the_fix(code, aborts_a_wait, words):
    assert not is_transient(err(code))
    assert is_permanent(err(code)) is aborts_a_wait
    assert words in fix_for(err(code))


def test_backoff_doubles_from_the_retry_interval_up_to_the_cap():
    policy = RetryPolicy(retry_interval_ms=10)
    assert [policy.delay_ms(n) for n in range(1, 6)] == [10, 20, 40, 80, 160]
    assert policy.delay_ms(12) == MAX_RETRY_INTERVAL_MS
    assert policy.delay_ms(10_000) == MAX_RETRY_INTERVAL_MS, "no overflow after days of outage"
    assert RetryPolicy(retry_interval_ms=5000).delay_ms(3) == 5000, "an interval above the cap stays constant"


def test_outage_warns_after_blips_and_at_most_every_30_s():
    outage = Outage(RetryPolicy(retry_interval_ms=100), "listing topics", started_ms=0)
    assert outage.failed(200, "e").warning is None, "a 0.2 s blip (leader election) is not logged"
    first = outage.failed(1_500, "_TIMED_OUT: Local: Timed out").warning
    assert first and "unreachable for 1.5 s while listing topics" in first and "waiting forever" in first
    assert "_TIMED_OUT" in first, "names the last error"
    assert outage.failed(20_000, "e").warning is None, "less than 30 s since the last warning"
    later = outage.failed(1_500 + WARN_EVERY_MS, "e").warning
    assert later and "unreachable for 31.5 s" in later
    assert "reachable again after 40.0 s" in outage.recovered(40_000)


def test_a_silent_outage_has_no_closing_line():
    outage = Outage(RetryPolicy(), "x", started_ms=0)
    outage.failed(100, "e")
    assert outage.recovered(300) is None


def test_max_wait_bounds_the_outage_and_names_the_option():
    outage = Outage(RetryPolicy(retry_interval_ms=1000, attempt_timeout_ms=30_000, max_wait_ms=5_000), "x", 0)
    assert outage.failed(4_500, "e").delay_ms == 500, "the pause never runs past the allowed wait"
    assert outage.attempt_timeout_ms(4_600) == pytest.approx(400), "nor does the next attempt"
    with pytest.raises(BrokerUnavailableError) as failure:
        outage.failed(5_000, "_TRANSPORT: down")
    assert "brokerUnavailable.maxWaitMs=5000" in str(failure.value) and "Fix:" in str(failure.value)
    assert "_TRANSPORT: down" in str(failure.value)


def flaky(time_: FakeTime, failures: list, attempt_s: float = 0.0, result="answer"):
    """An attempt that raises the given errors one after the other (each taking attempt_s), then answers."""
    timeouts: list[float] = []

    def attempt(timeout_s: float):
        timeouts.append(timeout_s)
        time_.now += attempt_s
        if failures:
            raise failures.pop(0)
        return result

    return attempt, timeouts


def test_transient_failures_are_retried_until_the_broker_answers(caplog):
    time_ = FakeTime()
    attempt, timeouts = flaky(time_, [err(KafkaError._TIMED_OUT)] * 4, attempt_s=3.0)
    with caplog.at_level(logging.WARNING, logger="epochwatch.kafka_source"):
        result = call_with_retry(attempt, RetryPolicy(retry_interval_ms=100, attempt_timeout_ms=3000), "listing topics",
                                 clock=time_.clock, sleep=time_.sleep)
    assert result == "answer"
    assert timeouts == [3.0] * 5, "every attempt gets fetchOffset.timeoutMs"
    assert time_.sleeps == [0.1, 0.2, 0.4, 0.8]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines   # a 15 s outage: one warning (after the first 3 s attempt), one closing line
    assert "unreachable for 3.0 s" in lines[0] and "failed attempts: 1" in lines[0]
    assert "reachable again after 16.5 s" in lines[1] and "failed attempts: 4" in lines[1]


def test_warnings_stay_rare_during_a_long_outage(caplog):
    time_ = FakeTime()
    attempt, _ = flaky(time_, [err(KafkaError._TRANSPORT)] * 400, attempt_s=1.0)
    with caplog.at_level(logging.WARNING, logger="epochwatch.kafka_source"):
        call_with_retry(attempt, RetryPolicy(), "listing topics", clock=time_.clock, sleep=time_.sleep)
    outage_s = time_.now
    warnings = [r for r in caplog.records if "unreachable for" in r.getMessage()]
    assert outage_s > 600
    assert len(warnings) <= outage_s / (WARN_EVERY_MS / 1000) + 1, f"{len(warnings)} warnings in {outage_s:.0f} s"


def test_permanent_errors_fail_at_once_with_the_fix():
    time_ = FakeTime()
    attempt, timeouts = flaky(time_, [err(KafkaError.TOPIC_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaClientError, match="while listing topics.*Fix: grant"):
        call_with_retry(attempt, RetryPolicy(), "listing topics", clock=time_.clock, sleep=time_.sleep)
    assert len(timeouts) == 1 and time_.sleeps == []


def test_an_authentication_failure_reported_beside_the_request_stops_the_wait():
    """A failed SASL handshake reaches list_topics as _TRANSPORT or its own timeout (measured
    against tansu and Kafka 4.1.2): only the client's error_cb says _AUTHENTICATION. On the real
    broker: tests/integration/kafka/test_sasl.py."""
    time_ = FakeTime()
    attempt, timeouts = flaky(time_, [err(KafkaError._TRANSPORT)] * 10)
    reported = KafkaError(KafkaError._AUTHENTICATION, "SASL PLAIN mechanism handshake failed")
    with pytest.raises(KafkaClientError, match="_AUTHENTICATION.*Fix: check kafka.security.protocol"):
        call_with_retry(attempt, RetryPolicy(), "listing topics", clock=time_.clock, sleep=time_.sleep,
                        blocking_error=lambda: reported)
    assert len(timeouts) == 1


def test_other_exceptions_propagate_unchanged():
    time_ = FakeTime()
    attempt, _ = flaky(time_, [KeyError("bug")])
    with pytest.raises(KeyError):
        call_with_retry(attempt, RetryPolicy(), "x", clock=time_.clock, sleep=time_.sleep)


def test_max_wait_fails_the_call_after_the_bound():
    time_ = FakeTime()
    attempt, timeouts = flaky(time_, [err(KafkaError._TIMED_OUT)] * 100, attempt_s=2.0)
    policy = RetryPolicy(retry_interval_ms=500, attempt_timeout_ms=2000, max_wait_ms=7000)
    with pytest.raises(BrokerUnavailableError, match="brokerUnavailable.maxWaitMs=7000"):
        call_with_retry(attempt, policy, "listing latest offsets", clock=time_.clock, sleep=time_.sleep)
    assert 7.0 <= time_.now <= 9.0, time_.now
