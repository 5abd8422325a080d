"""Offset commits carry the client's metadata epoch (the leader epoch it sent, KIP-320). A commit
whose epoch is below the last commit's for that partition came from a consumer on stale metadata.
Kafka 4.1.2's group coordinator stores it all the same (tested on a real broker:
tests/integration/kafka/test_commit_log.py); the partition's highest epoch is kept here, so that
the consumer's further commits at the old epoch keep the incident open until it catches up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from streaming.config import RuleSettings
from streaming.rules.lifecycle import Condition, condition
from streaming.rules.records import NO_TIME, CommitRecord, expire, expire_among, over_capacity, shard_cap
from streaming.rules.table import RulesTable
from streaming.rules.validity import jumps


@dataclass
class CommitShard(RulesTable):
    cluster_id: str
    settings: RuleSettings
    commits: dict[tuple[str, str, int], CommitRecord] = field(default_factory=dict)
    touched: set[tuple[str, str, int]] = field(default_factory=set)
    # every partition changed since the engine last evaluated (streaming.fastpath.changed_entities)
    changed: set[tuple[str, str, int]] = field(default_factory=set)
    dirty: bool = False
    # Each partition's place in ``commits``, the order ``conditions`` lists them in (first seen
    # first), so that the conditions of some come out in that order too. Not stored: partitions
    # loaded straight into ``commits`` (streaming.spark.key_steps.load) are numbered when first asked.
    places: dict[tuple[str, str, int], int] = field(default_factory=dict, repr=False, compare=False)
    next_place: itertools.count = field(default_factory=itertools.count, repr=False, compare=False)
    # a partition's conditions are its own: the engine may evaluate some partitions alone
    evaluates_entities = True

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
            self.places[key] = next(self.next_place)
        self.touched.add(key)
        self.changed.add(key)
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

    def take_changed(self) -> set[tuple[str, str, int]]:
        taken, self.changed = self.changed, set()
        return taken

    def advance(self, now: int) -> None:
        self._end_quiet_regressions(self.commits.values(), now)

    def advance_entities(self, keys, now: int) -> None:
        self._end_quiet_regressions([r for key in keys if (r := self.commits.get(key)) is not None], now)

    def _end_quiet_regressions(self, partitions, now: int) -> None:
        quiet = self.settings.stale_incident_quiet_ms
        for r in partitions:
            if r.regression_since_ms != NO_TIME and now - r.regression_last_ms >= quiet:
                r.regression_since_ms = r.regression_last_ms = NO_TIME
                self.touched.add((r.group_id, r.topic, r.partition))  # stored again: KeyKind.incremental_json

    def conditions(self, now: int) -> list[Condition]:
        return [self._regression(r) for r in self.commits.values() if r.regression_since_ms != NO_TIME]

    def conditions_of(self, keys, now: int) -> dict[tuple[str, str, int], list[Condition]]:
        held = [key for key in keys if key in self.commits]
        if any(key not in self.places for key in held):   # loaded from the state store: numbered now
            self.places = {key: place for place, key in enumerate(self.commits)}
            self.next_place = itertools.count(len(self.places))
        return {key: [self._regression(r)] for key in sorted(held, key=self.places.__getitem__)
                if (r := self.commits[key]).regression_since_ms != NO_TIME}

    def _regression(self, r: CommitRecord) -> Condition:
        return condition("OffsetCommitEpochRegression", r.regression_since_ms,
                         f"commit with metadata epoch {r.regression_epoch} after {r.metadata_epoch} "
                         f"(a consumer on stale metadata)",
                         group_id=r.group_id, topic=r.topic, partition=r.partition)

    def next_deadline(self, now: int) -> int | None:
        quiet = self.settings.stale_incident_quiet_ms
        future = [r.regression_last_ms + quiet for r in self.commits.values()
                  if r.regression_since_ms != NO_TIME and r.regression_last_ms + quiet > now]
        return min(future) if future else None

    def entity_deadlines(self, key) -> list[int]:
        r = self.commits.get(key)
        if r is None or r.regression_since_ms == NO_TIME:
            return []
        return [r.regression_last_ms + self.settings.stale_incident_quiet_ms]

    def expire(self, now: int, has_open_alert) -> list:
        return self._forget_places(expire(self.commits, now, self.settings.entity_expiry_ms, has_open_alert))

    def expire_entities(self, keys, now: int, has_open_alert) -> list:
        return self._forget_places(expire_among(self.commits, keys, now, self.settings.entity_expiry_ms,
                                                has_open_alert))

    def _forget_places(self, gone: list) -> list:
        for key in gone:
            self.places.pop(key, None)
        return gone
