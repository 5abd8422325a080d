"""Times in alert descriptions are for people: ISO 8601 in UTC, not epoch milliseconds."""

import pytest

from streaming.rules.records import NO_TIME, utc


@pytest.mark.parametrize("ms, text, why", [
    (1767225620082, "2026-01-01T00:00:20.082Z", "1. an event time: UTC with milliseconds"),
    (0, "1970-01-01T00:00:00.000Z", "2. the epoch itself is a time, not 'never'"),
    (NO_TIME, "never", "3. a record's 'no time yet'"),
    (-2000, "1969-12-31T23:59:58.000Z", "4. a producer clock before 1970 still reads as a date"),
    (2 ** 62, f"{2 ** 62} ms since 1970", "5. beyond any calendar date (hostile input): the number, said what it is"),
])
def test_utc(ms, text, why):
    assert utc(ms) == text, why
