"""Waiting out an unreachable Kafka broker: which errors are transient, how long to wait between
attempts, when to warn and when to give up. Pure apart from :func:`call_with_retry`, which takes
its clock and sleep as arguments.

librdkafka marks almost nothing ``retriable()`` on the admin path (a timed-out metadata request is
``_TIMED_OUT``, a refused connection ``_TRANSPORT`` or ``_NOENT`` "no leaders found"), so transient
errors are listed by code. A failed SASL handshake also reaches the request as ``_TRANSPORT`` or
as its timeout: the real cause only arrives through the client's ``error_cb``, which callers pass in as
``blocking_error`` so that a wrong password fails at once instead of being retried forever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import cache
from typing import Callable, TypeVar

log = logging.getLogger("epochwatch.kafka_source")

T = TypeVar("T")

MAX_RETRY_INTERVAL_MS = 2_000   # backoff cap: a recovered broker is used again within ~2 s
WARN_AFTER_MS = 1_000           # leader elections and other blips stay out of the log
WARN_EVERY_MS = 30_000
MAX_WAIT_OPTION = "brokerUnavailable.maxWaitMs"

_TRANSIENT_NAMES = (
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "_MSG_TIMED_OUT", "_RESOLVE",
    "_NOENT", "_WAIT_COORD", "_WAIT_CACHE", "_IN_PROGRESS", "_PREV_IN_PROGRESS", "_NODE_UPDATE",
    "_UNKNOWN_BROKER", "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT",
    "BROKER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE", "NETWORK_EXCEPTION", "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "NOT_ENOUGH_REPLICAS", "NOT_CONTROLLER",
    "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE",
    "PREFERRED_LEADER_NOT_AVAILABLE", "THROTTLING_QUOTA_EXCEEDED", "REBOOTSTRAP_REQUIRED",
)
_AUTHENTICATION = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE",
                   "UNSUPPORTED_SASL_MECHANISM")
_AUTHORIZATION = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")
_CONFIGURATION = ("_INVALID_ARG", "_INVALID_TYPE", "_UNSUPPORTED_FEATURE", "_UNKNOWN_PROTOCOL")

_FIXES = (
    (_AUTHENTICATION, "check kafka.security.protocol, kafka.sasl.mechanism and the credentials "
                      "(kafka.sasl.username / kafka.sasl.password)"),
    (_AUTHORIZATION, "grant the client's principal Describe and Read on the subscribed topics (Kafka ACLs)"),
    (("_SSL",), "check the kafka.ssl.* settings (ssl.ca.location, certificate, key) and that the listener "
                "speaks TLS"),
    (_CONFIGURATION, "correct the kafka.* option the error names"),
)


class BrokerUnavailableError(TimeoutError):
    """Kafka stayed unreachable for longer than brokerUnavailable.maxWaitMs."""


class KafkaClientError(RuntimeError):
    """A Kafka error that waiting does not cure (authentication, TLS, ACLs, configuration, fatal)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


@cache
def _codes(names: tuple[str, ...]) -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, name) for name in names if hasattr(KafkaError, name))


def kafka_error(error: BaseException | object):
    """The KafkaError inside a KafkaException (or the error itself); None for anything else."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return error if isinstance(error, KafkaError) else None


def is_transient(error: BaseException | object) -> bool:
    """Whether waiting may cure ``error``: timeouts, transport, leaders moving, brokers down."""
    if isinstance(error, TimeoutError):   # concurrent.futures' result(timeout) raises this
        return True
    found = kafka_error(error)
    if found is None or found.fatal():
        return False
    return found.code() in _codes(_TRANSIENT_NAMES) or (found.retriable() and not is_permanent(found))


def is_permanent(error: BaseException | object) -> bool:
    """Whether ``error`` is a fatal, authentication, ACL or TLS error: the causes that abort a
    wait even when librdkafka reports them only through ``error_cb`` (a request that fails for
    any other non-transient reason fails at once anyway)."""
    found = kafka_error(error)
    if found is None:
        return False
    return found.fatal() or found.code() in _codes(_AUTHENTICATION + _AUTHORIZATION + ("_SSL",))


def fix_for(error: BaseException | object) -> str:
    found = kafka_error(error)
    if found is not None:
        if found.fatal():
            return "the client cannot continue: remove the cause named above and restart the query"
        for names, fix in _FIXES:
            if found.code() in _codes(names):
                return fix
    return "this error is not retried: see its text"


def describe(error: BaseException | object) -> str:
    found = kafka_error(error)
    if found is not None:
        return f"{found.name()}: {found.str()}"
    if isinstance(error, TimeoutError):
        return "request timed out"
    return f"{type(error).__name__}: {error}"


def permanent_error(error: BaseException | object, what: str) -> KafkaClientError:
    found = kafka_error(error)
    return KafkaClientError(f"Kafka error while {what}: {describe(error)}. Fix: {fix_for(error)}",
                            None if found is None else found.code())


@dataclass(frozen=True)
class RetryPolicy:
    """How the source waits for an unreachable broker (options fetchOffset.retryIntervalMs,
    fetchOffset.timeoutMs, brokerUnavailable.maxWaitMs)."""

    retry_interval_ms: int = 10
    attempt_timeout_ms: int = 30_000
    max_wait_ms: int | None = None   # None: wait forever

    def delay_ms(self, failures: int) -> int:
        """Pause after the ``failures``-th failure in a row (1, 2, ...): doubling, capped."""
        cap = max(self.retry_interval_ms, MAX_RETRY_INTERVAL_MS)
        return min(cap, self.retry_interval_ms << min(max(0, failures - 1), 20))

    def budget(self) -> str:
        if self.max_wait_ms is None:
            return "waiting forever"
        return f"giving up after {MAX_WAIT_OPTION}={self.max_wait_ms}"


@dataclass(frozen=True)
class Step:
    delay_ms: int
    warning: str | None


class Outage:
    """One stretch of failed attempts. ``failed`` says how long to pause, whether to warn (at
    most every WARN_EVERY_MS, and not for blips shorter than WARN_AFTER_MS) and raises
    BrokerUnavailableError once the wait has lasted brokerUnavailable.maxWaitMs."""

    def __init__(self, policy: RetryPolicy, what: str, started_ms: float):
        self.policy, self.what, self.started_ms = policy, what, started_ms
        self.failures = 0
        self.last_error = ""
        self.warned_ms: float | None = None

    def waited_ms(self, now_ms: float) -> float:
        return max(0.0, now_ms - self.started_ms)

    def failed(self, now_ms: float, error: str) -> Step:
        self.failures += 1
        self.last_error = error
        waited = self.waited_ms(now_ms)
        limit = self.policy.max_wait_ms
        if limit is not None and waited >= limit:
            raise BrokerUnavailableError(
                f"Kafka unreachable for {waited / 1000:.1f} s while {self.what} (failed attempts: {self.failures}, "
                f"last error {error}). Fix: make the brokers reachable, or raise {MAX_WAIT_OPTION}={limit} "
                "(leave it out to wait forever)")
        delay = self.policy.delay_ms(self.failures)
        if limit is not None:
            delay = max(1, min(delay, int(limit - waited)))
        warning = None
        if waited >= WARN_AFTER_MS and (self.warned_ms is None or now_ms - self.warned_ms >= WARN_EVERY_MS):
            self.warned_ms = now_ms
            warning = (f"epochwatch-kafka: Kafka unreachable for {waited / 1000:.1f} s while {self.what} "
                       f"(failed attempts: {self.failures}, last error {error}); retrying, {self.policy.budget()}")
        return Step(delay, warning)

    def attempt_timeout_ms(self, now_ms: float) -> float:
        """An attempt never runs past the end of the allowed wait."""
        timeout = float(self.policy.attempt_timeout_ms)
        if self.policy.max_wait_ms is not None:
            timeout = min(timeout, max(1.0, self.policy.max_wait_ms - self.waited_ms(now_ms)))
        return timeout

    def recovered(self, now_ms: float) -> str | None:
        """The closing line of a warned-about outage (None when nothing was logged)."""
        if self.warned_ms is None:
            return None
        return (f"epochwatch-kafka: Kafka reachable again after {self.waited_ms(now_ms) / 1000:.1f} s while "
                f"{self.what} (failed attempts: {self.failures})")


def call_with_retry(attempt: Callable[[float], T], policy: RetryPolicy, what: str, *,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                    blocking_error: Callable[[], object] = lambda: None, logger: logging.Logger = log) -> T:
    """``attempt(timeout_s)`` until it succeeds. Transient failures are retried with capped
    backoff; permanent ones (or a permanent error the client reported meanwhile through
    ``blocking_error``) raise KafkaClientError naming the fix; anything else propagates as is."""
    outage: Outage | None = None
    while True:
        began_ms = clock() * 1000
        timeout_ms = outage.attempt_timeout_ms(began_ms) if outage else float(
            min(policy.attempt_timeout_ms, policy.max_wait_ms or policy.attempt_timeout_ms))
        try:
            result = attempt(timeout_ms / 1000)
        except Exception as exc:
            reported = blocking_error()
            if reported is not None:
                raise permanent_error(reported, what) from exc
            if not is_transient(exc):
                if kafka_error(exc) is not None:
                    raise permanent_error(exc, what) from exc
                raise
            outage = outage or Outage(policy, what, began_ms)
            step = outage.failed(clock() * 1000, describe(exc))
            if step.warning:
                logger.warning(step.warning)
            sleep(step.delay_ms / 1000)
            continue
        if outage is not None:
            closing = outage.recovered(clock() * 1000)
            if closing:
                logger.warning(closing)
        return result
