"""Schema ids from a Schema Registry (confluent_kafka.schema_registry), for encoding and decoding.

Subjects follow Confluent's TopicRecordNameStrategy, ``<topic>-<record full name>`` (e.g.
``epochwatch.alerts-io.epochwatch.events.v1.Alert``), so one topic can carry every event type.
A writer looks its schema up under the subject first and registers it only when absent: a
principal allowed to read only still finds a schema registered beforehand.

The registry's answers fall in three kinds:

- "no such id" (HTTP 404 to a lookup by id) is the record's fault: a DecodeError, so a dead letter;
- a refusal that waiting does not cure (401 credentials, 403 permissions, 409 / 422 a schema the
  subject's compatibility rules or the registry refuse) raises :class:`RegistryRefused` at once;
- no answer (timeout, connection refused, 5xx, 408, 429) is waited out like an unreachable broker:
  asked again with the policy's backoff (udfs.kafka_retry.RetryPolicy, the job's Kafka settings), a
  WARNING at once and every WARN_EVERY_S, a line when it answers again, and
  ``brokerUnavailable.maxWaitMs`` (None: forever) as the bound, past which
  :class:`RegistryUnavailable` names it.

Neither error is ever a dead letter: the record is valid and a dead letter would lose it. The task
or micro-batch fails instead, and is done again once the cause is gone.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, TypeVar

from streaming import events
from udfs.avro_codec import DecodeError, SchemaCatalog
from udfs.kafka_retry import MAX_WAIT_OPTION, RetryPolicy
from udfs.redact import redact

_log = logging.getLogger("epochwatch.registry_catalog")
T = TypeVar("T")

WARN_EVERY_S = 30.0
_NOT_ANSWERED = (408, 429)   # 4xx statuses that say "not now" rather than "no"


class RegistryError(RuntimeError):
    """The Schema Registry could not be used (never a record's fault)."""


class RegistryUnavailable(RegistryError):
    """The Schema Registry did not answer within brokerUnavailable.maxWaitMs."""


class RegistryRefused(RegistryError):
    """The Schema Registry refused a request for a reason waiting does not cure."""


def subject_name(topic: str, event_type: str) -> str:
    raw = events.raw_schema(event_type)
    return f"{topic}-{raw['namespace']}.{raw['name']}"


class RegistryCatalog(SchemaCatalog):
    """Schema ids of ``topic``'s records from the registry at ``url``.

    ``conf``: more settings of confluent_kafka's SchemaRegistryClient (``basic.auth.user.info``,
    ``ssl.ca.location``, ...). Each request waits ``retry.attempt_timeout_ms`` at most; the
    client's own retries are off unless ``conf`` sets ``max.retries``, as this catalog retries.
    """

    def __init__(self, url: str, topic: str, conf: dict | None = None, *, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._policy = retry or RetryPolicy()
        self._client = SchemaRegistryClient({"max.retries": 0, "timeout": self._policy.attempt_timeout_ms / 1000,
                                             **(conf or {}), "url": url})
        self._topic, self._where = topic, redact(url)
        self._ids: dict[str, int] = {}
        self._types: dict[int, str] = {}
        self._sleep, self._clock = sleep, clock

    def __repr__(self) -> str:  # the client holds the URL, credentials and all
        return f"RegistryCatalog(topic={self._topic!r})"

    def id_for(self, event_type: str) -> int:
        if event_type not in self._ids:
            from confluent_kafka.schema_registry import Schema

            subject = subject_name(self._topic, event_type)
            schema = Schema(json.dumps(events.raw_schema(event_type)), "AVRO")
            self._ids[event_type] = self._ask(lambda: self._registered_id(subject, schema),
                                              f"finding or registering the {event_type} schema under subject "
                                              f"{subject!r}")
        return self._ids[event_type]

    def event_type_for(self, schema_id: int) -> str:
        if schema_id not in self._types:
            schema = self._ask(lambda: self._schema(schema_id), f"looking up schema id {schema_id}")
            doc = json.loads(schema.schema_str)
            full = f"{doc.get('namespace', '')}.{doc.get('name', '')}"
            if doc.get("namespace") != events.NAMESPACE or events.event_type_of_record(full) not in events.EVENT_TYPES:
                raise DecodeError("unknown_event_type", f"schema id {schema_id} is {full}, not an epochwatch event")
            self._types[schema_id] = events.event_type_of_record(full)
        return self._types[schema_id]

    def _registered_id(self, subject: str, schema) -> int:
        try:
            return self._client.lookup_schema(subject, schema).schema_id
        except Exception as exc:
            if _status(exc) != 404:   # 404: no such subject, or not this schema under it
                raise
        return self._client.register_schema(subject, schema)

    def _schema(self, schema_id: int):
        try:
            return self._client.get_schema(schema_id)
        except Exception as exc:
            if _status(exc) == 404:
                raise DecodeError("unknown_schema_id", f"schema id {schema_id}: {redact(exc)}") from None
            raise

    def _ask(self, call: Callable[[], T], what: str) -> T:
        """``call()`` until the registry answers it; see the module docstring for which answers end it."""
        started, failures, warned = None, 0, None
        while True:
            began = self._clock()
            try:
                result = call()
            except DecodeError:
                raise
            except Exception as exc:
                _raise_if_refused(exc, what, self._where)
                why = f"{type(exc).__name__}: {redact(exc)}"[:300]
            else:
                if warned is not None:
                    _log.warning("Schema Registry %s answering again after %.1f s while %s (failed attempts: %d)",
                                 self._where, self._clock() - started, what, failures)
                return result
            now = self._clock()
            started = began if started is None else started
            failures += 1
            waited, limit = now - started, self._policy.max_wait_ms
            if limit is not None and waited * 1000 >= limit:
                raise RegistryUnavailable(
                    f"the Schema Registry {self._where} did not answer for {waited:.1f} s while {what} "
                    f"(failed attempts: {failures}, last error {why}). Fix: make the registry reachable, or raise "
                    f"{MAX_WAIT_OPTION}={limit} (leave it out to wait forever)")
            if warned is None or now - warned >= WARN_EVERY_S:
                _log.warning("Schema Registry %s unreachable for %.1f s while %s (failed attempts: %d, last error %s); "
                             "retrying, the records wait (%s)", self._where, waited, what, failures, why,
                             self._policy.budget())
                warned = now
            delay_ms = self._policy.delay_ms(failures)
            if limit is not None:
                delay_ms = max(1, min(delay_ms, int(limit - waited * 1000)))
            self._sleep(delay_ms / 1000)


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "http_status_code", None)


def _raise_if_refused(exc: Exception, what: str, where: str) -> None:
    status = _status(exc)
    if status is None or not 400 <= status < 500 or status in _NOT_ANSWERED:
        return
    text = redact(getattr(exc, "error_message", None) or exc)[:300]
    if status == 401:
        fix = ("check the registry credentials, USER:PASSWORD in kafka.schema.registry.basic.auth.user.info (the "
               "source's option schema.registry.basic.auth.user.info), or the user info of the registry URL")
    elif status == 403:
        fix = "grant the registry principal read access to the subjects (and write access to register schemas)"
    else:
        fix = "see the registry's message (an incompatible schema: the subject's compatibility level)"
    raise RegistryRefused(f"the Schema Registry {where} refused {what} (HTTP {status}: {text}). Fix: {fix}") from None
