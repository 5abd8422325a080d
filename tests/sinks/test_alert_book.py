"""AlertBook decisions as numbered tables (Burrow style): each case says why it is right."""

from __future__ import annotations

import pytest

from streaming.sinks.alert_book import (
    AlertBook,
    BookSettings,
    Delivery,
    alertmanager_payload,
    latest_alert_states,
)
from streaming.sinks.labels import presented
from streaming.times import utc_text
from tests.support.alerts import rec

RESEND = 60_000
TTL = 300_000
SETTINGS = BookSettings(resend_interval_ms=RESEND, info_ttl_ms=TTL, backoff_initial_ms=1_000,
                        backoff_max_ms=16_000, tombstone_ttl_ms=3_600_000,
                        generator_url="http://127.0.0.1:9464/metrics")
T0 = 1_700_000_000_000
HOUR = 3_600_000


def resolved(fp="a", ends=T0 + 120_000, **kw):
    return rec(fp, status="resolved", ends=ends, **kw)


def info(fp="i", starts=T0):
    return rec(fp, severity="info", alertname="BrokerRestarted", starts=starts)


def play(steps) -> AlertBook:
    """Run steps: ("add", records, at) | ("seed", records, at) | ("deliver", at) | ("fail", at)."""
    book = AlertBook(SETTINGS)
    for kind, *args in steps:
        if kind == "add":
            assert book.add(args[0], args[1]) == []
        elif kind == "seed":
            book.seed(args[0], args[1])
        elif kind == "deliver":
            book.delivered(book.due(args[0], ignore_backoff=True), args[0])
        elif kind == "fail":
            book.failed(args[0], jitter=0.0)
        else:
            raise ValueError(kind)
    return book


def due_view(book: AlertBook, now: int) -> list[tuple[str, str]]:
    """(fingerprint, status of the state sent) for what is due at now."""
    return sorted((d.fingerprint, book.entries[d.fingerprint].record["status"]) for d in book.due(now))


DUE_CASES = [
    (1, "a new firing alert is sent at once",
     [("add", [rec("a")], T0)], T0, [("a", "firing")], 1),
    (2, "a delivered firing alert waits for its resend interval",
     [("add", [rec("a")], T0), ("deliver", T0)], T0 + RESEND - 1, [], 0),
    (3, "re-sent exactly one resend interval after the last send, so Alertmanager never expires it",
     [("add", [rec("a")], T0), ("deliver", T0)], T0 + RESEND, [("a", "firing")], 0),
    (4, "a replayed identical firing record (Spark re-ran the batch) is not news",
     [("add", [rec("a")], T0), ("deliver", T0), ("add", [rec("a")], T0 + 1000)], T0 + 1000, [], 0),
    (5, "a firing record with new annotations is a new state: send it now",
     [("add", [rec("a")], T0), ("deliver", T0), ("add", [rec("a", summary="new")], T0 + 1000)], T0 + 1000,
     [("a", "firing")], 1),
    (6, "a resolution is sent at once, with its endsAt in the past",
     [("add", [rec("a")], T0), ("deliver", T0), ("add", [resolved("a", ends=T0 + 5000)], T0 + 6000)], T0 + 6000,
     [("a", "resolved")], 1),
    (7, "a resolution supersedes its undelivered firing record: one delivery, the final state",
     [("add", [rec("a"), resolved("a", ends=T0 + 5000)], T0 + 6000)], T0 + 6000, [("a", "resolved")], 1),
    (8, "a late firing copy cannot reopen a pending resolution",
     [("add", [resolved("a", ends=T0 + 5000)], T0 + 6000), ("add", [rec("a")], T0 + 7000)], T0 + 7000,
     [("a", "resolved")], 1),
    (9, "a firing replay after the resolution was delivered stays quiet (tombstone)",
     [("add", [resolved("a", ends=T0 + 5000)], T0 + 6000), ("deliver", T0 + 6000), ("add", [rec("a")], T0 + 7000)],
     T0 + 7000, [], 0),
    (10, "a delivered resolution is finished: never re-sent",
     [("add", [resolved("a", ends=T0 + 5000)], T0 + 6000), ("deliver", T0 + 6000)], T0 + 6000 + 10 * RESEND, [], 0),
    (11, "an info alert is sent once ...",
     [("add", [info("i")], T0)], T0, [("i", "firing")], 1),
    (12, "... and never re-sent: it expires on Alertmanager at starts_at + ttl",
     [("add", [info("i")], T0), ("deliver", T0)], T0 + 2 * RESEND, [], 0),
    (13, "after a failed delivery nothing is tried before the backoff ends",
     [("add", [rec("a")], T0), ("fail", T0)], T0 + 499, [], 1),
    (14, "after the backoff every active alert goes again: Alertmanager may have restarted empty",
     [("add", [rec("a"), rec("b")], T0), ("deliver", T0), ("add", [rec("c")], T0 + 1), ("fail", T0 + 1)],
     T0 + 1000, [("a", "firing"), ("b", "firing"), ("c", "firing")], 1),
    (15, "a resolution of an incident this book never saw is still delivered (fired before a restart)",
     [("add", [resolved("z", ends=T0)], T0 + 10)], T0 + 10, [("z", "resolved")], 1),
    (16, "different fingerprints are independent",
     [("add", [rec("a"), resolved("b")], T0 + 200_000), ("deliver", T0 + 200_000), ("add", [rec("c")], T0 + 200_001)],
     T0 + 200_001, [("c", "firing")], 1),
]


@pytest.mark.parametrize("num, why, steps, now, expected, backlog", DUE_CASES, ids=[f"case{c[0]}" for c in DUE_CASES])
def test_what_is_due(num, why, steps, now, expected, backlog):
    book = play(steps)
    assert due_view(book, now) == expected, f"case {num}: {why}"
    assert book.backlog == backlog, f"case {num}: {why}"


def test_a_delivery_superseded_in_flight_leaves_the_new_state_pending():
    # The thread took the firing state; the resolution arrived before the POST returned.
    book = play([("add", [rec("a")], T0)])
    in_flight = book.due(T0)
    book.add([resolved("a", ends=T0 + 10)], T0 + 10)
    book.delivered(in_flight, T0 + 20)
    assert due_view(book, T0 + 20) == [("a", "resolved")]
    assert book.backlog == 1


def test_rejected_alert_is_dropped_but_others_stay():
    book = play([("add", [rec("a"), rec("b")], T0)])
    bad = next(d for d in book.due(T0) if d.fingerprint == "a")
    book.rejected(bad, T0)
    assert [d.fingerprint for d in book.due(T0)] == ["b"]


BACKOFF_CASES = [
    # (failures so far, jitter, expected delay ms, why)
    (1, 0.0, 500, "first retry after half the initial step at the least"),
    (1, 0.999, 999, "and at most the full initial step"),
    (2, 0.0, 1000, "the step doubles per consecutive failure"),
    (4, 0.0, 4000, "1 s * 2^3 / 2"),
    (5, 0.999, 15_992, "capped at backoff_max (16 s) ..."),
    (40, 0.0, 8000, "... however long the outage: never more than the cap, never immediate"),
]


@pytest.mark.parametrize("failures, jitter, expected, why", BACKOFF_CASES)
def test_backoff(failures, jitter, expected, why):
    book = AlertBook(SETTINGS)
    for _ in range(failures - 1):
        book.failed(T0, 0.0)
    assert book.failed(T0, jitter) == expected, why
    assert book.next_attempt_ms == T0 + expected


def test_success_ends_the_failure_streak():
    book = play([("add", [rec("a")], T0), ("fail", T0), ("fail", T0 + 1000)])
    assert book.consecutive_failures == 2
    book.delivered(book.due(T0 + 10_000), T0 + 10_000)
    assert book.consecutive_failures == 0
    assert book.failed(T0 + 20_000, 0.0) == 500


NEXT_DUE_CASES = [
    (1, "nothing in the book: nothing to wake up for", [], None),
    (2, "an undelivered state is due now", [("add", [rec("a")], T0)], T0),
    (3, "a delivered firing alert is next due at its resend", [("add", [rec("a")], T0), ("deliver", T0)], T0 + RESEND),
    (4, "the earliest resend wins",
     [("add", [rec("a")], T0), ("deliver", T0), ("add", [rec("b")], T0 + 5), ("deliver", T0 + 5)], T0 + RESEND),
    (5, "while failing, the backoff end", [("add", [rec("a")], T0), ("fail", T0)], T0 + 500),
]


@pytest.mark.parametrize("num, why, steps, expected", NEXT_DUE_CASES)
def test_next_due(num, why, steps, expected):
    assert play(steps).next_due_ms(T0 + 1 if expected is None else T0) in (expected,), f"case {num}: {why}"


REJECT_CASES = [
    (1, "not a dict", "text", "expected an alert record"),
    (2, "no fingerprint: cannot be tracked", {**rec("x"), "fingerprint": None}, "'fingerprint'"),
    (3, "unknown status", {**rec("x"), "status": "pending"}, "status 'pending'"),
    (4, "a resolution must say when it ended", {**rec("x"), "status": "resolved"}, "'ends_at'"),
    (5, "labels must be a map", {**rec("x"), "labels": ["a"]}, "string maps"),
]


@pytest.mark.parametrize("num, why, bad, reason", REJECT_CASES)
def test_malformed_records_are_refused_with_a_reason_and_the_rest_go_on(num, why, bad, reason):
    book = AlertBook(SETTINGS)
    rejected = book.add([bad, rec("good")], T0)
    assert len(rejected) == 1 and reason in rejected[0].reason, f"case {num}: {why}"
    assert [d.fingerprint for d in book.due(T0)] == ["good"]


SEED_CASES = [
    (1, "an alert still firing in the topic is re-sent at once", [rec("a", starts=T0 - HOUR)], [("a", "firing")]),
    (2, "a fresh resolution may not have reached Alertmanager before the crash: send it",
     [rec("a", starts=T0 - HOUR), resolved("a", starts=T0 - HOUR, ends=T0 - 4 * RESEND)], [("a", "resolved")]),
    (3, "an old resolution: Alertmanager has expired the firing copy long ago",
     [rec("a", starts=T0 - HOUR), resolved("a", starts=T0 - HOUR, ends=T0 - 4 * RESEND - 1)], []),
    (4, "the resolution wins whatever order the topic returns", [resolved("a", starts=T0 - HOUR, ends=T0 - 1000), rec("a", starts=T0 - HOUR)],
     [("a", "resolved")]),
    (5, "an info alert still within its ttl is re-sent (same startsAt: Alertmanager merges it)",
     [info("i", starts=T0 - TTL + 1)], [("i", "firing")]),
    (6, "an expired info alert is history", [info("i", starts=T0 - TTL)], []),
]


@pytest.mark.parametrize("num, why, records, expected", SEED_CASES)
def test_seed_after_restart(num, why, records, expected):
    book = AlertBook(SETTINGS)
    book.seed(records, T0)
    assert due_view(book, T0) == expected, f"case {num}: {why}"


def test_seeded_old_resolution_keeps_replayed_firing_copies_quiet():
    book = AlertBook(SETTINGS)
    book.seed([resolved("a", ends=T0 - 10 * RESEND)], T0)
    book.add([rec("a")], T0 + 1)
    assert book.due(T0 + 1) == []


LATEST_CASES = [
    (1, "one record per fingerprint is kept", [rec("a"), rec("b")], {"a": "firing", "b": "firing"}),
    (2, "resolved beats firing even when read first", [resolved("a"), rec("a", event_time=T0 + 10**9)],
     {"a": "resolved"}),
    (3, "among equals the later event_time wins", [rec("a", summary="new", event_time=T0 + 5), rec("a", summary="old")],
     {"a": "firing:new"}),
    (4, "records without a fingerprint cannot be matched and are skipped", [{**rec("a"), "fingerprint": ""}], {}),
]


@pytest.mark.parametrize("num, why, records, expected", LATEST_CASES)
def test_latest_alert_states(num, why, records, expected):
    got = {fp: r["status"] + (":" + r["annotations"]["summary"] if r["annotations"]["summary"] != "s" else "")
           for fp, r in latest_alert_states(records).items()}
    assert got == expected, f"case {num}: {why}"


def test_payload_of_a_firing_alert():
    record = presented(rec("a", starts=T0))   # as the sink holds it: labelled by sinks.labels
    record["labels"]["empty"] = ""
    payload = alertmanager_payload(record, T0 + 1000, SETTINGS)
    assert payload == {
        "labels": {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "1",
                   "kafka_cluster": "c1"},
        "annotations": {"summary": "s", "description": "d", "runbook_url": "docs/alerts.md#x"},
        "startsAt": "2023-11-14T22:13:20.000Z",
        # like Prometheus: 4 resend intervals, so a dead sender's alerts expire on their own
        "endsAt": utc_text(T0 + 1000 + 4 * RESEND),
        "generatorURL": "http://127.0.0.1:9464/metrics",
    }


PAYLOAD_END_CASES = [
    (1, "resolved: the incident's own end", resolved("a", ends=T0 + 7), T0 + 99, T0 + 7),
    (2, "info: a short fixed life from its start", info("i"), T0 + 99, T0 + TTL),
    (3, "event time ahead of this clock: endsAt must not precede startsAt (Alertmanager 400)",
     rec("a", starts=T0 + 10 * RESEND), T0, T0 + 10 * RESEND + 1),
    (4, "a resolution stamped before its start is clamped the same way", resolved("a", ends=T0 - 5), T0, T0 + 1),
]


@pytest.mark.parametrize("num, why, record, now, ends", PAYLOAD_END_CASES)
def test_payload_ends_at(num, why, record, now, ends):
    assert alertmanager_payload(record, now, SETTINGS)["endsAt"] == utc_text(ends), f"case {num}: {why}"


@pytest.mark.parametrize("kwargs, message", [
    ({"resend_interval_ms": 0}, "resend_interval_ms=0"),
    ({"generator_url": ""}, "generator_url=''"),
])
def test_settings_errors_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BookSettings(**kwargs)


def test_delivery_builds_its_body_from_the_record_and_time_it_was_planned_at():
    d = Delivery("a", 1, rec("a"), T0, SETTINGS)
    assert d.payload == alertmanager_payload(rec("a"), T0, SETTINGS)
