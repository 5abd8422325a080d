"""Every way an event can be refused once decoded, described once: each refusal is a dead letter
with one of these reasons and a detail that says which field (docs/events.md).

- INVALID: what the Avro schema cannot express (KIP-343's INVALID_REQUEST): the :data:`CHECKS`
  table, applied per event by the key engine (:func:`invalid_reason`) and over Arrow columns by
  the fast paths (streaming.fastpath.column_passes.valid_rows), both from this one table.
- FUTURE, PAST, VALUE: what no real cluster sends, refused by routing before any state or the
  batch's clock sees it (streaming.spark.validity, over a batch's columns, against
  ``rules.event.max.future.ms`` / ``.max.past.ms`` / ``.max.epoch``).
- JUMP: a value that leaps too far past the last one its key holds (:func:`jumps`, asked by each
  rules table's ``implausible``): once accepted, every later real value would look old.
- CAP: a new entity of a cluster whose state is full (``rules.state.max.*.per.cluster``);
  CLUSTER_CAP: an event of a new cluster when the job holds ``rules.state.max.clusters``
  (streaming.spark.cluster_gate).
- OUT_OF_RANGE: an event time before 1970 (or beyond a Spark timestamp), refused by routing and
  by the decoder (udfs.record_batches, which says it in its own words: udfs imports no rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from streaming.events import INPUT_EVENT_TYPES

INVALID = "invalid_event"
FUTURE, PAST, VALUE, JUMP = "future_event_time", "past_event_time", "implausible_value", "implausible_jump"
CAP, CLUSTER_CAP, OUT_OF_RANGE = "entity_cap", "cluster_cap", "event_time_out_of_range"
EPOCH_FIELDS = ("incarnation_id", "metadata_epoch")  # the high-water marks VALUE and JUMP guard


@dataclass(frozen=True)
class Check:
    """One condition an event of ``kinds`` (None: every kind) must meet: each ``at_least`` field
    at or above its floor, each ``named`` field a non-empty string. ``reason``: str.format over
    the event's fields."""

    reason: str
    kinds: frozenset[str] | None = None
    at_least: tuple[tuple[str, int], ...] = ()
    named: tuple[str, ...] = ()

    def fails(self, ev: dict) -> bool:
        return any(ev[name] < floor for name, floor in self.at_least) or not all(ev.get(n) for n in self.named)


_BROKERS = frozenset({"broker_heartbeat", "metadata_update"})
_CLIENTS = frozenset({"metadata_response", "metadata_request_failed", "client_rebootstrap", "connection_attempt"})

# in the order a reason is reported when several fail
CHECKS = (
    Check("cluster_id is empty", named=("cluster_id",)),
    # -1 is NO_TIME in the rules (and "no timestamp" in Kafka)
    Check("event_time {event_time} is before 1970", at_least=(("event_time", 0),)),
    Check("broker_id {broker_id} is negative", _BROKERS, at_least=(("broker_id", 0),)),
    Check("incarnation_id {incarnation_id} is negative", frozenset({"broker_heartbeat"}),
          at_least=(("incarnation_id", 0),)),
    Check("metadata_epoch {metadata_epoch} is below -1", frozenset({"metadata_update", "metadata_response",
                                                                     "offset_commit"}),
          at_least=(("metadata_epoch", -1),)),
    Check("controller_id / controller_epoch is negative", _BROKERS,
          at_least=(("controller_epoch", 0), ("controller_id", 0))),
    Check("client_id is empty", _CLIENTS, named=("client_id",)),
    Check("partition is negative or group_id empty", frozenset({"offset_commit"}), at_least=(("partition", 0),),
          named=("group_id",)),
    Check("setup_timeout_ms / consecutive_failures is negative", frozenset({"connection_attempt"}),
          at_least=(("setup_timeout_ms", 0), ("consecutive_failures", 0))),
)
_EVERY_KIND = tuple(c for c in CHECKS if c.kinds is None)
CHECKS_OF = {kind: tuple(c for c in CHECKS if c.kinds is None or kind in c.kinds) for kind in INPUT_EVENT_TYPES}


def _flat(checks: tuple[Check, ...]) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """Every check's floors and names in one flat pair: what runs for every event."""
    return tuple(floor for c in checks for floor in c.at_least), tuple(n for c in checks for n in c.named)


_FLAT_OF = {kind: _flat(checks) for kind, checks in CHECKS_OF.items()}
_FLAT_EVERY_KIND = _flat(_EVERY_KIND)


def invalid_reason(ev: dict) -> str | None:
    """Why ``ev`` fails :data:`CHECKS` (the first check that fails), or None."""
    # This runs for every event: the flat pass finds that nothing fails in two loops (generators
    # cost more than the checks); only an event that fails one is walked check by check, in
    # CHECKS' order, for the reason to report.
    floors, names = _FLAT_OF.get(ev["event_type"], _FLAT_EVERY_KIND)
    for name, floor in floors:
        if ev[name] < floor:
            return _first_failed(ev)
    for name in names:
        if not ev.get(name):
            return _first_failed(ev)
    return None


def _first_failed(ev: dict) -> str:
    for check in CHECKS_OF.get(ev["event_type"], _EVERY_KIND):
        if check.fails(ev):
            return check.reason.format_map(ev)
    raise AssertionError("a flat check failed that no check fails")  # the two come from one table


def jumps(new: int, last: int, limit: int) -> bool:
    """``new`` leaps more than ``limit`` past ``last`` (a known value: -1 is none): a JUMP."""
    return last >= 0 and new - last > limit
