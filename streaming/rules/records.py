"""State records kept per entity. Plain dataclasses: the processor stores them as Spark rows
(schema derived from the type hints) and the rules mutate them in place."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cache

from streaming.times import utc_text

NO_TIME = -1
STATES = ("INITIAL", "INACTIVE", "ACTIVE", "STOPPING")


@dataclass
class BrokerRecord:
    broker_id: int
    state: str = "INITIAL"
    state_since_ms: int = NO_TIME
    inactive_reason: str = ""          # timeout | controller | shutdown
    incarnation_id: int = -1           # highest incarnation accepted
    last_heartbeat_ms: int = NO_TIME   # of that incarnation
    restarts: int = 0
    old_incarnation_id: int = -1       # a lower incarnation still heard from
    old_last_seen_ms: int = NO_TIME
    old_heartbeats: int = 0
    regression_since_ms: int = NO_TIME
    duplicate_since_ms: int = NO_TIME
    applied_epoch: int = -1
    applied_controller_epoch: int = -1
    served_epoch: int = -1
    last_served_ms: int = NO_TIME
    behind_since_ms: int = NO_TIME
    flap_times_ms: list[int] = field(default_factory=list)
    flapping_since_ms: int = NO_TIME
    time_in_state_ms: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    last_event_ms: int = NO_TIME
    # an incarnation leaping past the accepted one (streaming.spark.validity), and how many heartbeats
    # claimed it: refused until broker.duplicate.min.heartbeats did
    leap_incarnation_id: int = -1
    leap_heartbeats: int = 0

    @property
    def known_epoch(self) -> int:
        return max(self.applied_epoch, self.served_epoch)


@dataclass
class ClusterRecord:
    """What the brokers key knows about the cluster as a whole."""

    controller_id: int = -1
    controller_epoch: int = -1
    newest_epoch: int = -1
    # first-seen times of recent newest epochs: parallel lists, pruned to a window
    epoch_history: list[int] = field(default_factory=list)
    epoch_history_ms: list[int] = field(default_factory=list)
    last_heartbeat_ms: int = NO_TIME
    # the last completed cluster-wide silence (no heartbeat from anyone for the timeout)
    silence_start_ms: int = NO_TIME
    silence_end_ms: int = NO_TIME
    regression_since_ms: int = NO_TIME
    regression_epoch: int = -1
    regression_controller_id: int = -1
    regression_high_epoch: int = -1


@dataclass
class ClientRecord:
    client_id: str
    accepted_epoch: int = -1
    accepted_ms: int = NO_TIME
    last_success_ms: int = NO_TIME
    first_failure_ms: int = NO_TIME
    known_cluster_id: str = ""
    mismatch_since_ms: int = NO_TIME
    mismatch_cluster_id: str = ""
    # open stale-metadata incidents, one per answering broker: parallel lists
    stale_broker_ids: list[int] = field(default_factory=list)
    stale_since_ms: list[int] = field(default_factory=list)
    stale_last_ms: list[int] = field(default_factory=list)
    stale_counts: list[int] = field(default_factory=list)
    last_event_ms: int = NO_TIME


@dataclass
class NodeRecord:
    node_id: int
    # REBOOTSTRAP_REQUIRED answers: incident start, last one, distinct clients (capped list)
    rr_since_ms: int = NO_TIME
    rr_last_ms: int = NO_TIME
    rr_responses: int = 0
    rr_clients: list[str] = field(default_factory=list)
    # connection-setup timeouts in the sliding window: parallel lists
    timeout_times_ms: list[int] = field(default_factory=list)
    timeout_clients: list[str] = field(default_factory=list)
    timeout_off_formula: list[bool] = field(default_factory=list)
    storm_since_ms: int = NO_TIME
    last_event_ms: int = NO_TIME


@dataclass
class CommitRecord:
    group_id: str
    topic: str
    partition: int
    metadata_epoch: int = -1
    offset: int = -1
    last_commit_ms: int = NO_TIME
    regression_since_ms: int = NO_TIME
    regression_last_ms: int = NO_TIME
    regression_epoch: int = -1
    last_event_ms: int = NO_TIME


def expire(store: dict, now: int, expiry_ms: int, has_open_alert) -> list:
    """Forget entities silent for ``expiry_ms`` that have no open alert; returns their ids."""
    gone = [key for key, rec in store.items() if silent_for(rec, expiry_ms, now) and not has_open_alert(key)]
    for key in gone:
        del store[key]
    return gone


def expire_among(store: dict, keys, now: int, expiry_ms: int, has_open_alert) -> list:
    """``expire`` for the entities ``keys`` alone (those no longer in ``store`` are skipped)."""
    gone = [key for key in keys
            if (rec := store.get(key)) is not None and silent_for(rec, expiry_ms, now) and not has_open_alert(key)]
    for key in gone:
        del store[key]
    return gone


def silent_for(record, expiry_ms: int, now: int) -> bool:
    """Whether the entity was last heard from ``expiry_ms`` or more before ``now``: old enough to forget."""
    return record.last_event_ms != NO_TIME and now - record.last_event_ms >= expiry_ms


def record_of(store: dict, touched: set, key, new):
    """The entity's record in ``store`` (``new(key)`` the first time), marked ``touched``: whatever
    asks for a record may change it, and the engine stores only the touched ones again."""
    record = store.get(key)
    if record is None:
        record = store[key] = new(key)
    touched.add(key)
    return record


def over_capacity(store: dict, key, cap: int, what: str, setting: str) -> str | None:
    """Why an event for an entity not in ``store`` is refused when the store holds ``cap``."""
    if key in store or len(store) < cap:
        return None
    return f"{what} {key!r} refused: the cluster already holds {len(store)} (rules.{setting}={cap})"


def shard_cap(cluster_cap: int, shards: int) -> int:
    """A sharded kind's cap per shard: the cluster's cap over the shards, rounded up."""
    return -(-cluster_cap // max(1, shards))


def first_after(times, t: int) -> int | None:
    """The earliest of ``times`` strictly after ``t`` (deadlines already passed are handled)."""
    later = [x for x in times if x > t]  # a list comprehension: faster than a generator into min
    return min(later) if later else None


@cache
def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def to_row(record) -> tuple:
    return tuple(getattr(record, name) for name in field_names(type(record)))


def from_row(cls, row) -> object:
    values = [list(v) if isinstance(v, (list, tuple)) else v for v in row]
    return cls(*values)


def utc(ms: int) -> str:
    """An event time for the people reading an alert (streaming.times); the rules' NO_TIME is "never"."""
    return "never" if ms == NO_TIME else utc_text(ms)

