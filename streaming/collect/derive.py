"""Pure: one round of observations of a real cluster -> the contract's events (docs/events.md,
"Deriving events from a real cluster"). No I/O and no clock: the round carries its time.

What a stock KRaft cluster lets an outside process see is not the heartbeat RPC itself but its
shadows; each rule below says which shadow it reads and why it is sound:

- heartbeat: the active controller's ``TimeSinceLastHeartbeatReceivedMs`` per broker gives the
  time of the last heartbeat it received (or, without the controller's exporter, the broker's last
  metadata fetch from DescribeQuorum, which rides the same controller connection). One event per
  heartbeat that moved on; none while the controller hears nothing, so silence reaches the job as
  silence and its own timeout decides.
- incarnation: the broker process's ``start-time-ms`` (app-info), which grows with every start, as
  KIP-343's incarnation id does. The broker epoch itself is in no API.
- metadata update: the metadata offset a broker has applied; only ever sent upward per broker,
  because a restarting broker replays its log from a snapshot and a lower number would read as
  the controller numbering backwards.
- metadata response: the collector asks every broker in turn and compares the answers per
  partition (leader epochs, KIP-320) and by how old the broker's applied metadata is, in two
  rounds running (a broker resumed from a pause catches up within one). Answers
  that are current carry one shared, never decreasing version (the lowest applied offset among
  the current brokers), so healthy brokers sampled a few milliseconds apart never look stale to
  each other; an answer that is behind carries a lower number. Partitions are keyed by topic id,
  so a re-created topic (leader epochs start again at 0) is a new partition, not a stale one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from streaming.collect.exporter import (BROKER_PENDING_CONTROLLED_SHUTDOWN, BROKER_RUNNING, BROKER_SHUTTING_DOWN,
                                        REGISTRATION_CONTROLLED_SHUTDOWN, REGISTRATION_FENCED)
from streaming.collect.probes import MetadataAnswer
from streaming.events import DUPLICATE_BROKER_REGISTRATION, STALE_BROKER_EPOCH, UNKNOWN_INCARNATION

# How long a partition's newest leader epoch is remembered after the last answer that listed it
# (a deleted topic must not be compared against forever).
PARTITION_MEMORY_MS = 600_000


@dataclass(frozen=True)
class DeriveSettings:
    client_id: str = "epochwatch-collector"
    session_timeout_ms: int = 9000        # broker.session.timeout.ms of the watched cluster
    heartbeat_interval_ms: int = 2000     # broker.heartbeat.interval.ms
    stale_after_ms: int = 5000            # applied metadata older than this is behind


@dataclass(frozen=True)
class BrokerObservation:
    """One broker in one round; ``None`` where no source showed the value."""

    broker_id: int
    fenced: bool | None = None             # DescribeCluster (KIP-1073)
    registration: int | None = None        # the active controller's BrokerRegistrationState
    last_heartbeat_ms: int | None = None   # the active controller's last heartbeat from it
    last_fetch_ms: int | None = None       # DescribeQuorum observer: its last metadata fetch
    fetched_offset: int | None = None      # DescribeQuorum observer: log end offset fetched
    start_time_ms: int | None = None       # its own exporter: app-info start-time-ms
    broker_state: int | None = None        # its own exporter: BrokerState
    applied_offset: int | None = None      # its own exporter: last-applied-record-offset
    applied_timestamp_ms: int | None = None
    # start times of other live processes whose exporters claim this node id (see _others)
    other_starts: tuple[int, ...] = ()

    @property
    def offset(self) -> int | None:
        return self.applied_offset if self.applied_offset is not None else self.fetched_offset

    @property
    def heartbeat_ms(self) -> int | None:
        return self.last_heartbeat_ms if self.last_heartbeat_ms is not None else self.last_fetch_ms

    @property
    def controller_state(self) -> str:
        """The state the controller keeps for it, in the contract's names."""
        if (self.registration == REGISTRATION_CONTROLLED_SHUTDOWN
                or self.broker_state in (BROKER_PENDING_CONTROLLED_SHUTDOWN, BROKER_SHUTTING_DOWN)):
            return "STOPPING"
        if self.registration == REGISTRATION_FENCED or self.fenced:
            return "INACTIVE"
        return "ACTIVE"


@dataclass(frozen=True)
class Round:
    now_ms: int
    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: Mapping[int, BrokerObservation]
    answers: Mapping[int, MetadataAnswer] = field(default_factory=dict)
    failures: Mapping[int | None, str] = field(default_factory=dict)  # node (None: any) -> reason


@dataclass
class Sent:
    """What the collector already told the job, per broker; the deriver's only memory."""

    heartbeat_ms: dict[int, int] = field(default_factory=dict)
    state: dict[int, str] = field(default_factory=dict)
    offset: dict[int, int] = field(default_factory=dict)
    incarnation: dict[int, int] = field(default_factory=dict)
    newest_epochs: dict[tuple, tuple[int, int]] = field(default_factory=dict)  # partition -> (epoch, seen)
    served_version: int = -1
    behind_rounds: dict[int, int] = field(default_factory=dict)  # consecutive rounds found behind
    first_heard: dict[int, int] = field(default_factory=dict)    # when a broker's start time was awaited
    fenced_running: set[int] = field(default_factory=set)        # serving, then fenced while running: held a round


class EventDeriver:
    def __init__(self, settings: DeriveSettings):
        self.settings, self.sent = settings, Sent()

    def derive(self, r: Round) -> list[dict]:
        out = [self._failure(r, node, reason) for node, reason in sorted(r.failures.items(), key=lambda kv: kv[0] or -1)]
        for broker_id in sorted(r.brokers):
            out.extend(self._heartbeats(r, r.brokers[broker_id]))
            out.extend(self._others(r, r.brokers[broker_id]))
            out.extend(self._metadata_update(r, r.brokers[broker_id]))
        out.extend(self._responses(r))
        return out

    # --- heartbeats ----------------------------------------------------------------------------

    def _heartbeats(self, r: Round, b: BrokerObservation) -> list[dict]:
        s, sent, bid = self.settings, self.sent, b.broker_id
        before = sent.incarnation.get(bid)
        if b.start_time_ms is not None:
            sent.incarnation[bid] = b.start_time_ms
        hb = b.heartbeat_ms
        # The controller's gauge stops at the session timeout: from there on it says nothing new.
        if hb is None or r.now_ms - hb >= s.session_timeout_ms or not self._incarnation_known(r, bid):
            return []
        state, last = b.controller_state, sent.heartbeat_ms.get(bid)
        # Fenced half a session or more after its last heartbeat: its session ran out, whatever
        # its exporter says (a paused JVM's exporter is as gone as an exited one's). Seen on Kafka
        # 4.1: a paused broker's last heartbeat first seen in the round that also saw the fence.
        expired = state == "INACTIVE" and r.now_ms - hb >= s.session_timeout_ms // 2
        leaving = state == "INACTIVE" and not expired and self._leaving(b, before)
        if leaving:
            # Fenced while heard from, the same process that was serving, and that process no
            # longer running (its exporter gone, or not in RUNNING): the controller fenced it at
            # the end of its controlled shutdown, which finished between two rounds.
            state = "STOPPING"
        if state == "INACTIVE" and r.now_ms - hb >= 2 * s.heartbeat_interval_ms:
            # Fenced and not heard from for two intervals: the controller fenced a silent broker
            # (its session ran out), which the job must see as silence and time out itself. A
            # fenced broker that heartbeats (catching up after a start) is heard from all the time.
            return self._let_go(r, b, last)
        moved_on = last is None or hb > last + s.heartbeat_interval_ms // 2
        if not moved_on:
            return self._let_go(r, b, last) if state == "INACTIVE" or leaving else []
        if self._fenced_while_running(b, state, before):
            return []
        sent.heartbeat_ms[bid], sent.state[bid] = hb, state
        return [self._heartbeat(r, bid, hb, state, str(hb), b.offset)]

    def _incarnation_known(self, r: Round, bid: int) -> bool:
        """A broker's heartbeats wait for its start time (its exporter's page, which can take a
        round or two to arrive) for up to half a session, then go with the unknown incarnation
        (0) until a page says when the process started: the job counts those heartbeats for the
        broker's current process and learns the first start time after them (not a restart).
        A restart while the start time is unknown cannot be told."""
        sent = self.sent
        if bid in sent.incarnation:
            return True
        first = sent.first_heard.setdefault(bid, r.now_ms)
        if r.now_ms - first < self.settings.session_timeout_ms // 2:
            return False
        sent.incarnation[bid] = UNKNOWN_INCARNATION
        return True

    def _leaving(self, b: BrokerObservation, incarnation_before: int | None) -> bool:
        return self._was_serving(b, incarnation_before) and b.broker_state != BROKER_RUNNING

    def _was_serving(self, b: BrokerObservation, incarnation_before: int | None) -> bool:
        """Last sent as serving (ACTIVE or STOPPING), heard from since within a session, and still
        the same process. A broker silent for a whole session was timed out by the job: a fence
        read when it is heard again is that of a broker back from silence and catching up, not
        the end of a controlled shutdown (seen on Kafka 4.1: a paused broker resumed, its exporter
        not answering yet in the round that saw it heartbeat again, fenced)."""
        last, hb = self.sent.heartbeat_ms.get(b.broker_id), b.heartbeat_ms
        heard = last is not None and hb is not None and hb - last < self.settings.session_timeout_ms
        same_process = b.start_time_ms in (None, incarnation_before) or incarnation_before == UNKNOWN_INCARNATION
        return heard and self.sent.state.get(b.broker_id) in ("ACTIVE", "STOPPING") and same_process

    def _fenced_while_running(self, b: BrokerObservation, state: str, before: int | None) -> bool:
        """A serving broker fenced while it heartbeats and its own page says RUNNING is held back
        for one round. The pages of a round are read side by side: the broker's own can be read
        just before its controlled shutdown and the controller's just after it (the likeliest
        reading of a CI run on Kafka 4.1 where a shutdown never paged). Sent now, the fence would
        be the controller's fence of a live broker, and a shutdown would never page
        BrokerNotReturned. The next round sees the process gone (a shutdown) or still running
        (the controller's fence, sent then)."""
        held = self.sent.fenced_running
        if state != "INACTIVE" or b.broker_state != BROKER_RUNNING:
            held.discard(b.broker_id)
            return False
        if b.broker_id in held or not self._was_serving(b, before):
            return False
        held.add(b.broker_id)
        return True

    def _others(self, r: Round, b: BrokerObservation) -> list[dict]:
        """Another live process claiming the broker's node id (two exporters report it) is what
        KIP-343 calls a heartbeat of another incarnation: a newer one that Kafka refuses while the
        registered one's session lives (DUPLICATE_BROKER_REGISTRATION), or an older one still
        running after the id registered again (STALE_BROKER_EPOCH). Kafka answers both inside
        the controller RPC, which no outside process sees; the second process is seen."""
        current = self.sent.incarnation.get(b.broker_id)
        if current is None:
            return []
        out = []
        for start in b.other_starts:
            error = DUPLICATE_BROKER_REGISTRATION if start > current else STALE_BROKER_EPOCH
            out.append({**self._heartbeat(r, b.broker_id, r.now_ms, b.controller_state, f"{start}-other"),
                        "incarnation_id": start, "error_code": error})
        return out

    def _let_go(self, r: Round, b: BrokerObservation, last: int | None) -> list[dict]:
        """Fenced well within a session of its last heartbeat sent (under half of it), and no
        heartbeat since: the controller let it go (controlled shutdown) between two rounds; a
        timeout fences a whole session after the last heartbeat, and a round can see that at
        most a request timeout early. Said once, at that last heartbeat, so the job's
        clean-shutdown rules apply instead of a heartbeat timeout."""
        sent, bid = self.sent, b.broker_id
        if last is None or r.now_ms - last >= self.settings.session_timeout_ms // 2:
            return []
        if sent.state.get(bid) not in ("ACTIVE", "STOPPING"):
            return []
        sent.state[bid] = "INACTIVE"  # what the job will conclude once the session has passed
        return [self._heartbeat(r, bid, last, "STOPPING", f"{last}-shutdown")]

    def _heartbeat(self, r: Round, bid: int, t: int, state: str, tag: str, offset: int | None = None) -> dict:
        stopping = state == "STOPPING"
        return {**self._head(r, "broker_heartbeat", f"broker-{bid}", tag, t),
                "controller_id": r.controller_id, "controller_epoch": r.controller_epoch, "broker_id": bid,
                "incarnation_id": self.sent.incarnation.get(bid, UNKNOWN_INCARNATION), "incarnation_uuid": None,
                "target_state": "STOPPING" if stopping else "ACTIVE", "want_fence": None,
                "want_shutdown": True if stopping else None, "current_metadata_offset": offset,
                "error_code": 0, "current_state": state}

    # --- metadata updates ---------------------------------------------------------------------

    def _metadata_update(self, r: Round, b: BrokerObservation) -> list[dict]:
        offset = b.offset
        if offset is None or offset < 0 or offset <= self.sent.offset.get(b.broker_id, -1):
            return []
        self.sent.offset[b.broker_id] = offset
        return [{**self._head(r, "metadata_update", f"broker-{b.broker_id}", str(offset), r.now_ms),
                 "controller_id": r.controller_id, "controller_epoch": r.controller_epoch,
                 "metadata_epoch": offset, "broker_id": b.broker_id}]

    # --- what brokers serve -------------------------------------------------------------------

    def _responses(self, r: Round) -> list[dict]:
        s, sent = self.settings, self.sent
        newest = sent.newest_epochs
        for answer in r.answers.values():
            for partition, epoch in answer.leader_epochs.items():
                known = newest.get(partition)
                newest[partition] = (max(epoch, known[0]) if known else epoch, r.now_ms)
        for partition in [p for p, (_, seen) in newest.items() if r.now_ms - seen > PARTITION_MEMORY_MS]:
            del newest[partition]
        behind = self._behind_twice(r)
        current = [bid for bid, a in r.answers.items() if a.error_code == 0 and bid not in behind]
        offsets = [o for bid in current if (o := self._offset(r, bid)) is not None]
        if offsets:
            sent.served_version = max(sent.served_version, min(offsets))
        version = sent.served_version
        out = []
        for bid in sorted(r.answers):
            a = r.answers[bid]
            if a.error_code != 0:
                epoch = -1
            elif bid in behind:
                own = self._offset(r, bid)
                epoch = version - 1 if own is None else min(own, version - 1)
                epoch = epoch if epoch >= 0 else -1
            else:
                epoch = version
            out.append({**self._head(r, "metadata_response", f"client-{s.client_id}", f"{bid}", r.now_ms),
                        "client_id": s.client_id, "broker_id": bid, "metadata_epoch": epoch,
                        "error_code": a.error_code, "broker_count": len(a.broker_ids),
                        "response_cluster_id": a.cluster_id})
        return out

    def _behind_twice(self, r: Round) -> set[int]:
        """Brokers found behind in this round and the one before. A broker resumed after a pause
        answers from its old image for the moment it takes to catch up (well under a round);
        one cut off from the controller stays behind. Only the second is worth a page."""
        rounds = self.sent.behind_rounds
        for bid, a in r.answers.items():
            rounds[bid] = rounds.get(bid, 0) + 1 if a.error_code == 0 and self._behind(r, bid, a) else 0
        for bid in [b for b in rounds if b not in r.answers]:
            del rounds[bid]
        return {bid for bid, n in rounds.items() if n >= 2}

    def _behind(self, r: Round, bid: int, answer: MetadataAnswer) -> bool:
        newest = self.sent.newest_epochs
        if any(epoch < newest[p][0] for p, epoch in answer.leader_epochs.items()):
            return True
        b = r.brokers.get(bid)
        applied_at = b.applied_timestamp_ms if b is not None else None
        return applied_at is not None and r.now_ms - applied_at > self.settings.stale_after_ms

    @staticmethod
    def _offset(r: Round, bid: int) -> int | None:
        b = r.brokers.get(bid)
        return b.offset if b is not None else None

    # --- failures -----------------------------------------------------------------------------

    def _failure(self, r: Round, node_id: int | None, reason: str) -> dict:
        s = self.settings
        return {**self._head(r, "metadata_request_failed", f"client-{s.client_id}", f"{node_id}", r.now_ms),
                "client_id": s.client_id, "node_id": node_id, "reason": reason}

    def _head(self, r: Round, event_type: str, entity: str, tag: str, t: int) -> dict:
        # Stable ids: a round re-sent after a publish failure rewrites the same events.
        return {"event_type": event_type, "event_id": f"{self.settings.client_id}/{r.cluster_id}/{entity}/{event_type}/{tag}@{r.now_ms}",
                "cluster_id": r.cluster_id, "event_time": t}
