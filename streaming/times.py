"""Instants as people (alert descriptions, dead-letter reasons, reports, the console) and
Alertmanager read them: one formatter for the whole project."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_text(ms: int) -> str:
    """Milliseconds since 1970 as ISO 8601 in UTC, ``2026-01-01T00:00:20.082Z`` (what Alertmanager
    takes); one outside what a calendar date can say (a forged event's) as ``<ms> ms since 1970``."""
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms since 1970"


def time_of_day(ms: int) -> str:
    """``00:00:20.082``: the console's column, where the date would only repeat."""
    return utc_text(ms)[11:23]
