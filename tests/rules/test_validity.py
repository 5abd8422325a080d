"""What an event must be for the rules to apply it (streaming.rules.validity.CHECKS): each check
refuses what it names, with a reason that says which field, and nothing valid is refused."""

from __future__ import annotations

import pytest

from streaming.events import INPUT_EVENT_TYPES
from streaming.rules.validity import CHECKS, CHECKS_OF, invalid_reason
from tests.support.invalid_events import BROKEN, VALID


@pytest.mark.parametrize("ev", VALID, ids=lambda ev: ev["event_type"])
def test_valid_events_pass(ev):
    assert invalid_reason(ev) is None


@pytest.mark.parametrize("why, ev, reason", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_broken_event_is_refused_with_its_reason(why, ev, reason):
    assert invalid_reason(ev) == reason, why


def test_every_check_is_exercised_and_every_kind_has_its_checks():
    """Why: a check no broken event reaches is one nobody knows works."""
    reached = {next(c for c in CHECKS_OF[ev["event_type"]] if c.fails(ev)) for _, ev, _ in BROKEN}
    assert reached == set(CHECKS)
    assert set(CHECKS_OF) == set(INPUT_EVENT_TYPES)
    assert all(CHECKS_OF[kind][:2] == CHECKS[:2] for kind in INPUT_EVENT_TYPES)  # cluster and time: every kind
