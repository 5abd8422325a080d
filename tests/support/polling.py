"""Small helpers shared by tests (import as tests.support.polling)."""

from __future__ import annotations

import time


def wait_until(predicate, timeout_s: float = 60.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll predicate() until truthy or the deadline passes (tests never sleep blindly)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
