"""The simulated cluster's shape (parameters) and its entities (plain mutable records).

Timings that are Kafka settings come from :class:`streaming.config.RuleSettings`; everything
here is about the simulated workload (how many brokers, how often the controller publishes...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming import events

DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: fixed, so output is reproducible
TOPIC_NAMES = ("orders", "payments", "clicks", "inventory", "shipments", "audit")


class SimulationError(ValueError):
    """A simulator parameter problem: ``param`` names the argument / flag, ``fix`` what to do."""

    def __init__(self, param: str, problem: str, fix: str):
        super().__init__(f"{param}: {problem}. Fix: {fix}")
        self.param, self.problem, self.fix = param, problem, fix


@dataclass(frozen=True)
class ClusterShape:
    """What is simulated. Every field is a parameter of the CLI or of the scenario functions."""

    cluster_id: str = "cluster-a"
    brokers: int = 6
    clients: int = 40
    groups: int = 8
    partitions_per_group: int = 3
    first_broker_id: int = 1
    controller_ids: tuple[int, ...] = (3000, 3001, 3002)  # KRaft controller quorum node ids
    metadata_update_interval_ms: int = 3000   # the controller publishes an update this often
    max_apply_lag_ms: int = 200               # brokers apply an update within this delay
    commit_interval_ms: int = 5000            # auto.commit.interval.ms
    connection_attempt_ratio: float = 0.05    # share of refreshes logging a (successful) connect
    metadata_retry_ms: int = 2000             # a client without any usable node retries this often
    reconnect_backoff_max_ms: int = 1000      # reconnect.backoff.max.ms
    retry_backoff_ms: int = 100               # retry.backoff.ms (refetch after a stale response)
    none_strategy_every: int = 4              # every Nth client runs metadata.recovery.strategy=none

    def validate(self) -> "ClusterShape":
        def at_least(flag: str, value: int, minimum: int = 1) -> None:
            if value < minimum:
                raise SimulationError(flag, f"{value} is below {minimum}", f"pass {flag} {max(minimum, 1)} or more")

        at_least("--brokers", self.brokers)
        at_least("--clients", self.clients)
        at_least("--groups", self.groups, 0)
        for name in ("partitions_per_group", "metadata_update_interval_ms", "commit_interval_ms",
                     "none_strategy_every"):
            at_least(name, getattr(self, name))
        at_least("max_apply_lag_ms", self.max_apply_lag_ms, 0)
        if not 0 <= self.connection_attempt_ratio <= 1:
            raise SimulationError("connection_attempt_ratio", f"{self.connection_attempt_ratio} is not a share",
                                  "use a value between 0 and 1")
        if not self.cluster_id:
            raise SimulationError("--cluster-id", "is empty", "pass a cluster id such as cluster-a")
        if self.max_apply_lag_ms >= self.metadata_update_interval_ms:
            raise SimulationError("max_apply_lag_ms", f"{self.max_apply_lag_ms} is not below metadata_update_interval_ms="
                                  f"{self.metadata_update_interval_ms}",
                                  "brokers must apply one update before the next is published")
        return self


@dataclass(slots=True, eq=False)
class BrokerProcess:
    """One process claiming a broker id. A restart is a new process with a higher incarnation."""

    broker_id: int
    incarnation_id: int
    incarnation_uuid: str
    apply_lag_ms: int
    gen: int = 0                      # bumps stop the running heartbeat chain
    target_state: str = "ACTIVE"
    alive: bool = True
    reaches_controller: bool = True
    serving: bool = False             # answers clients' metadata requests
    client_reachable: bool = True
    applied_epoch: int = -1
    broker_count: int = 0             # brokers listed in the metadata it applied last
    last_heartbeat_ms: int = -1
    stale_error_code: int = events.STALE_BROKER_EPOCH  # the controller's answer once superseded


@dataclass(slots=True, eq=False)
class Client:
    client_id: str
    recovery_strategy: str            # metadata.recovery.strategy: rebootstrap | none
    gen: int = 0
    accepted_epoch: int = -1
    known: frozenset | None = None    # broker ids of the last accepted metadata; None = bootstrap
    failing_since: int = -1
    avoid_broker: int = -1            # the broker that just answered stale: refetch elsewhere
    failed: bool = False              # the client gave up (e.g. wrong cluster id): silent


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    topic: str
    member: Client
    offsets: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)   # metadata epoch of the last commit per partition


def topic_name(index: int) -> str:
    base = TOPIC_NAMES[index % len(TOPIC_NAMES)]
    return base if index < len(TOPIC_NAMES) else f"{base}-{index // len(TOPIC_NAMES)}"
