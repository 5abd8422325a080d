"""Offset commits carry the client's metadata epoch (the leader epoch it sent, KIP-320). A commit
whose epoch is below the last commit's for that partition came from a consumer on stale metadata.
Kafka 4.1.2's group coordinator stores it all the same (tested on a real broker:
tests/integration/kafka/test_commit_log.py); the partition's highest epoch is kept here, so that
the consumer's further commits at the old epoch keep the incident open until it catches up."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.config import RuleSettings
from streaming.rules.lifecycle import Condition, condition
from streaming.rules.records import NO_TIME, CommitRecord, expire, over_capacity, shard_cap
from streaming.rules.table import RulesTable
from streaming.rules.validity import jumps


@dataclass
class CommitShard(RulesTable):
    cluster_id: str
    settings: RuleSettings
    commits: dict[tuple[str, str, int], CommitRecord] = field(default_factory=dict)
    touched: set[tuple[str, str, int]] = field(default_factory=set)
    dirty: bool = False

    def over_capacity(self, ev: dict) -> str | None:
        """Why a commit of a partition new to a full shard is refused
        (rules.state.max.commit.partitions.per.cluster)."""
        if ev["event_type"] != "offset_commit":
            return None
        cap = shard_cap(self.settings.max_commit_partitions, self.settings.client_shards)
        return over_capacity(self.commits, (ev["group_id"], ev["topic"], ev["partition"]), cap, "commit partition",
                             "state.max.commit.partitions.per.cluster")

    def implausible(self, ev: dict) -> str | None:
        """Why a commit's epoch leaps too far past the partition's (streaming.spark.validity): kept as
        the high-water mark, it would make every later real commit a regression."""
        r = self.commits.get((ev["group_id"], ev["topic"], ev["partition"]))
        limit = self.settings.max_epoch_jump
        if r is not None and jumps(ev["metadata_epoch"], r.metadata_epoch, limit):
            return (f"metadata_epoch {ev['metadata_epoch']} leaps more than rules.event.max.epoch.jump={limit} "
                    f"past the partition's {r.metadata_epoch}")
        return None

    def apply(self, ev: dict) -> int | None:
        key = (ev["group_id"], ev["topic"], ev["partition"])
        r = self.commits.get(key)
        if r is None:
            r = self.commits[key] = CommitRecord(*key)
        self.touched.add(key)
        t, epoch = ev["event_time"], ev["metadata_epoch"]
        r.last_event_ms = max(r.last_event_ms, t)
        if epoch >= 0 and r.metadata_epoch >= 0 and epoch < r.metadata_epoch:
            if r.regression_since_ms == NO_TIME:
                r.regression_since_ms = t
                self.dirty = True
            r.regression_last_ms, r.regression_epoch = max(r.regression_last_ms, t), epoch
            return r.regression_last_ms + self.settings.stale_incident_quiet_ms  # the highest epoch stays
        if r.regression_since_ms != NO_TIME and (epoch >= r.metadata_epoch or epoch < 0):
            r.regression_since_ms = r.regression_last_ms = NO_TIME  # a good commit ends the incident
            self.dirty = True
        r.metadata_epoch = max(r.metadata_epoch, epoch)
        r.offset, r.last_commit_ms = ev["offset"], t
        return None

    def advance(self, now: int) -> None:
        quiet = self.settings.stale_incident_quiet_ms
        for r in self.commits.values():
            if r.regression_since_ms != NO_TIME and now - r.regression_last_ms >= quiet:
                r.regression_since_ms = r.regression_last_ms = NO_TIME

    def conditions(self, now: int) -> list[Condition]:
        return [condition("OffsetCommitEpochRegression", r.regression_since_ms,
                          f"commit with metadata epoch {r.regression_epoch} after {r.metadata_epoch} "
                          f"(a consumer on stale metadata)",
                          group_id=r.group_id, topic=r.topic, partition=r.partition)
                for r in self.commits.values() if r.regression_since_ms != NO_TIME]

    def next_deadline(self, now: int) -> int | None:
        quiet = self.settings.stale_incident_quiet_ms
        future = [r.regression_last_ms + quiet for r in self.commits.values()
                  if r.regression_since_ms != NO_TIME and r.regression_last_ms + quiet > now]
        return min(future) if future else None

    def expire(self, now: int, has_open_alert) -> list:
        return expire(self.commits, now, self.settings.entity_expiry_ms, has_open_alert)
