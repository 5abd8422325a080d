"""What a command refused, by reason: counted from each micro-batch's dead letters (undecodable
records, bad lines, implausible events: docs/events.md), reported in the job's batch line and at
the end of a replay. A run that refused every record it read has detected nothing, and says so
loudly instead of reporting success (a wrong ``kafka.encoding``, a clock gone wrong)."""

from __future__ import annotations

from collections import Counter

KEPT_BATCHES = 100


class Refusals:
    """A dispatch sink (streaming.sinks.base) that counts dead letters by reason, in total and per
    batch (the last KEPT_BATCHES)."""

    def __init__(self):
        self.by_reason: Counter = Counter()
        self._by_batch: dict[int, Counter] = {}

    def write(self, batch) -> Counter:
        counts = Counter(str(d.get("reason") or "undecodable") for d in batch.dead_letters)
        self.by_reason += counts
        self._by_batch[batch.batch_id] = counts
        for old in [b for b in self._by_batch if b <= batch.batch_id - KEPT_BATCHES]:
            del self._by_batch[old]
        return counts

    def in_batch(self, batch_id: int) -> Counter:
        return self._by_batch.get(batch_id, Counter())

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def close(self) -> None:
        pass


def describe(counts: Counter) -> str:
    """``3 (bad_magic_byte=2, future_event_time=1)``, or ``0``."""
    total = sum(counts.values())
    return f"{total} ({', '.join(f'{r}={n}' for r, n in sorted(counts.items()))})" if total else "0"


def everything_refused(records: int, refused: int) -> bool:
    return records > 0 and refused >= records


def refused_everything_message(records: int, counts: Counter) -> str:
    return (f"every one of the {records} records read was refused: {describe(counts)}. Nothing was detected. "
            "Fix: check the producers' encoding against kafka.encoding, their clocks, and docs/events.md for "
            "each reason; the records are in the dead letters")
