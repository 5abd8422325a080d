"""Client-side rules: stale metadata responses (metadata epoch), the rebootstrap trigger
(KIP-899 / KIP-1102) and cluster-id checks after rebootstrap."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from operator import attrgetter

from streaming.config import RuleSettings
from streaming.fastpath import quiet_responses
from streaming.fastpath.quiet_responses import QuietRuns
from streaming.rules.lifecycle import Condition, condition
from streaming.rules.records import (
    NO_TIME,
    ClientRecord,
    expire,
    expire_among,
    first_after,
    over_capacity,
    record_of,
    shard_cap,
    utc,
)
from streaming.rules.table import RulesTable
from streaming.rules.validity import jumps

REPORTED_EXAMPLES = 3   # client ids a shard's summary names of each kind (stale, overdue)
_CLIENT_ID = attrgetter("client_id")


def _has_open(c: ClientRecord) -> bool:
    """A stale incident, a failure or a cluster-id mismatch open: what conditions and deadlines come from."""
    return bool(c.stale_broker_ids) or c.first_failure_ms != NO_TIME or c.mismatch_since_ms != NO_TIME


@dataclass
class ClientShard(RulesTable):
    cluster_id: str
    settings: RuleSettings
    clients: dict[str, ClientRecord] = field(default_factory=dict)
    # every client changed since the engine last reported (streaming.spark.key_steps reads only these
    # again for the stored JSON): whatever changes a record marks it here
    touched: set[str] = field(default_factory=set)
    # every client an event added or changed since the engine last evaluated (it evaluates only
    # these, and those whose time has come: streaming.fastpath.changed_entities)
    changed: set[str] = field(default_factory=set)
    dirty: bool = False
    # the ids of the clients with something open as of the last look (None: not looked yet): only
    # a touched client can have opened or closed anything since (see _open)
    open_ids: set[str] | None = field(default=None, repr=False, compare=False)
    # a client's conditions are its own: the engine may evaluate some clients alone
    evaluates_entities = True

    def client(self, client_id: str) -> ClientRecord:
        self.changed.add(client_id)
        return record_of(self.clients, self.touched, client_id, ClientRecord)

    def take_changed(self) -> set[str]:
        taken, self.changed = self.changed, set()
        return taken

    def over_capacity(self, ev: dict) -> str | None:
        """Why an event of a client new to a full shard is refused (rules.state.max.clients.per.cluster)."""
        if ev.get("client_id") is None:
            return None
        return over_capacity(self.clients, ev["client_id"], self._cap(), "client", "state.max.clients.per.cluster")

    def _cap(self) -> int:
        return shard_cap(self.settings.max_clients, self.settings.client_shards)

    def implausible(self, ev: dict) -> str | None:
        """Why a response's epoch leaps too far past the client's accepted one (streaming.spark.validity):
        accepted, it would make every later real answer look stale."""
        c = self.clients.get(ev["client_id"])
        limit = self.settings.max_epoch_jump
        if ev["event_type"] == "metadata_response" and c is not None and jumps(ev["metadata_epoch"], c.accepted_epoch, limit):
            return (f"metadata_epoch {ev['metadata_epoch']} leaps more than rules.event.max.epoch.jump={limit} "
                    f"past the client's {c.accepted_epoch}")
        return None

    def apply(self, ev: dict) -> int | None:
        """Apply one event; returns the earliest deadline it may have introduced."""
        c = self.client(ev["client_id"])
        t = ev["event_time"]
        c.last_event_ms = max(c.last_event_ms, t)
        kind = ev["event_type"]
        if kind == "metadata_response":
            self.on_response(c, ev, t)
        elif kind == "metadata_request_failed":
            self._failed(c, t)
        elif kind == "client_rebootstrap":
            self.on_rebootstrap(c, ev, t)
        return first_after(self._client_deadlines(c), t)

    def without_runs(self, ready: list[dict], floor: int) -> list[dict]:
        """``ready`` (in the order the engine applies it, nothing of it applied yet; ``floor``: the
        key's horizon before the step) less the clients' quiet runs, which are applied here
        (streaming.fastpath.quiet_responses)."""
        return quiet_responses.without_quiet_runs(self, ready, floor)

    def apply_quiet_runs(self, runs: QuietRuns, client_ids: list[str], cluster_ids: list[str]) -> list[int]:
        """Apply each run whose client record allows it, as its last response; the codes of the
        clients applied. A client with a failure, stale incident or mismatch open, an accepted
        epoch above the run's first, another known cluster, or silent for the entity expiry
        before the run is left to the events one by one."""
        expiry = self.settings.entity_expiry_ms
        applied = []
        for code, last, first_epoch, final_epoch, cluster in zip(
                *(a.tolist() for a in (runs.client, runs.last_ms, runs.first_epoch, runs.final_epoch, runs.cluster))):
            client_id, cluster_id = client_ids[code], cluster_ids[cluster] if cluster >= 0 else ""
            c = self.clients.get(client_id)
            if c is None and len(self.clients) >= self._cap():
                continue   # left to the events one by one: the engine refuses them (over_capacity)
            if c is not None and (c.first_failure_ms != NO_TIME or c.stale_broker_ids or c.mismatch_since_ms != NO_TIME
                                  or first_epoch < c.accepted_epoch
                                  or jumps(first_epoch, c.accepted_epoch, self.settings.max_epoch_jump)
                                  or (c.last_event_ms != NO_TIME and last - c.last_event_ms >= expiry)
                                  or (cluster_id and c.known_cluster_id and cluster_id != c.known_cluster_id)):
                continue
            if c is None:
                self.changed.add(client_id)   # new: the engine must learn when to forget it
            # Not marked changed otherwise: a client with nothing open has after a quiet run still no
            # condition and no deadline, and its expiry only moves later (the engine's timetable finds
            # that when the old time comes); nearly every client of a steady-state step is one.
            c = record_of(self.clients, self.touched, client_id, ClientRecord)
            c.last_event_ms = max(c.last_event_ms, last)
            c.last_success_ms = max(c.last_success_ms, last)
            if cluster_id and not c.known_cluster_id:
                c.known_cluster_id = cluster_id
            c.accepted_epoch, c.accepted_ms = final_epoch, last
            applied.append(code)
        return applied

    def on_response(self, c: ClientRecord, ev: dict, t: int) -> None:
        if ev.get("error_code", 0) != 0 or ev["broker_count"] <= 0:
            self._failed(c, t)  # REBOOTSTRAP_REQUIRED (129) included: no usable metadata
            return
        # KIP-899: a response listing at least one broker clears the rebootstrap trigger.
        if t >= c.first_failure_ms:
            if c.first_failure_ms != NO_TIME and t - c.first_failure_ms >= self.settings.rebootstrap_trigger_ms:
                self.dirty = True  # an overdue incident ends here
            c.first_failure_ms = NO_TIME
        c.last_success_ms = max(c.last_success_ms, t)
        self._check_cluster_id(c, ev.get("response_cluster_id"), t)
        epoch, broker_id = ev["metadata_epoch"], ev["broker_id"]
        if epoch < 0:
            return  # -1: unknown epoch, never stale
        if epoch < c.accepted_epoch:
            self._stale(c, broker_id, t)
            return
        c.accepted_epoch, c.accepted_ms = epoch, t
        self._close_stale(c, broker_id)  # that broker answers current metadata again

    def _failed(self, c: ClientRecord, t: int) -> None:
        if c.first_failure_ms == NO_TIME and t >= c.last_success_ms:
            c.first_failure_ms = t

    def on_rebootstrap(self, c: ClientRecord, ev: dict, t: int) -> None:
        before, after = ev.get("cluster_id_before"), ev.get("cluster_id_after")
        if before and not c.known_cluster_id:
            c.known_cluster_id = before
        self._check_cluster_id(c, after, t)
        if before and after and before != after:
            c.accepted_epoch = -1  # another cluster numbers its metadata on its own

    def _check_cluster_id(self, c: ClientRecord, cluster_id: str | None, t: int) -> None:
        if not cluster_id:
            return
        if not c.known_cluster_id:
            c.known_cluster_id = cluster_id
        elif cluster_id != c.known_cluster_id:
            if c.mismatch_since_ms == NO_TIME:
                c.mismatch_since_ms = t
                self.dirty = True
            c.mismatch_cluster_id = cluster_id
        elif c.mismatch_since_ms != NO_TIME:
            c.mismatch_since_ms, c.mismatch_cluster_id = NO_TIME, ""
            self.dirty = True

    def _stale(self, c: ClientRecord, broker_id: int, t: int) -> None:
        if broker_id in c.stale_broker_ids:
            i = c.stale_broker_ids.index(broker_id)
            c.stale_last_ms[i] = max(c.stale_last_ms[i], t)
            c.stale_counts[i] += 1
        else:
            self.dirty = True
            c.stale_broker_ids.append(broker_id)
            c.stale_since_ms.append(t)
            c.stale_last_ms.append(t)
            c.stale_counts.append(1)

    def _close_stale(self, c: ClientRecord, broker_id: int) -> None:
        if broker_id in c.stale_broker_ids:
            self.dirty = True
            i = c.stale_broker_ids.index(broker_id)
            for lst in (c.stale_broker_ids, c.stale_since_ms, c.stale_last_ms, c.stale_counts):
                del lst[i]

    def _open(self) -> list[ClientRecord]:
        """The clients with a stale incident, a failure or a cluster-id mismatch open: the only
        ones with conditions or deadlines (nearly every client has nothing open). Every step asks
        (its summary), so after the first pass over every client only those open last time and
        those touched since are looked at again: whatever changes a record marks it touched
        (records.record_of), and the engine empties ``touched`` only after the step's summary."""
        clients = self.clients
        candidates = clients.keys() if self.open_ids is None else self.open_ids | self.touched
        self.open_ids = {i for i in candidates if (c := clients.get(i)) is not None and _has_open(c)}
        return [clients[i] for i in self.open_ids]

    def advance(self, now: int) -> None:
        self._end_quiet_incidents([c for c in self.clients.values() if c.stale_broker_ids], now)

    def advance_entities(self, client_ids, now: int) -> None:
        found = (self.clients.get(client_id) for client_id in client_ids)
        self._end_quiet_incidents([c for c in found if c is not None and c.stale_broker_ids], now)

    def _end_quiet_incidents(self, clients: list[ClientRecord], now: int) -> None:
        quiet = self.settings.stale_incident_quiet_ms
        for c in clients:
            for i in reversed(range(len(c.stale_broker_ids))):
                if now - c.stale_last_ms[i] >= quiet:
                    self.touched.add(c.client_id)
                    for lst in (c.stale_broker_ids, c.stale_since_ms, c.stale_last_ms, c.stale_counts):
                        del lst[i]

    # By client id, not by when each client was first seen: the quiet-run pass creates clients in
    # another order than applying event by event, and the alerts of one evaluation must come out
    # in the same order either way.
    def conditions(self, now: int) -> list[Condition]:
        return [cond for c in sorted(self._open(), key=_CLIENT_ID) for cond in self._client_conditions(c, now)]

    def conditions_of(self, client_ids, now: int) -> dict[str, list[Condition]]:
        found = (self.clients.get(client_id) for client_id in client_ids)
        return {c.client_id: self._client_conditions(c, now)
                for c in sorted((c for c in found if c is not None and _has_open(c)), key=_CLIENT_ID)}

    def _client_conditions(self, c: ClientRecord, now: int) -> list[Condition]:
        s = self.settings
        found = [condition("StaleMetadataResponse", since, f"{count} response(s) older than accepted epoch "
                           f"{c.accepted_epoch}", client_id=c.client_id, broker_id=bid)
                 for bid, since, count in zip(c.stale_broker_ids, c.stale_since_ms, c.stale_counts)]
        if c.first_failure_ms != NO_TIME and now - c.first_failure_ms >= s.rebootstrap_trigger_ms:
            found.append(condition("ClientRebootstrapOverdue", c.first_failure_ms + s.rebootstrap_trigger_ms,
                                   f"no metadata since first failure at {utc(c.first_failure_ms)}",
                                   client_id=c.client_id))
        if c.mismatch_since_ms != NO_TIME:
            found.append(condition("ClusterIdMismatch", c.mismatch_since_ms,
                                   f"knew cluster {c.known_cluster_id}, now talks to {c.mismatch_cluster_id}",
                                   client_id=c.client_id))
        return found

    def next_deadline(self, now: int) -> int | None:
        return first_after([t for c in self._open() for t in self._client_deadlines(c)], now)

    def entity_deadlines(self, client_id: str) -> list[int]:
        c = self.clients.get(client_id)
        if c is None or not c.stale_last_ms and c.first_failure_ms == NO_TIME:
            return []
        return self._client_deadlines(c)

    def _client_deadlines(self, c: ClientRecord) -> list[int]:
        s = self.settings
        times = [last + s.stale_incident_quiet_ms for last in c.stale_last_ms]
        if c.first_failure_ms != NO_TIME:
            times.append(c.first_failure_ms + s.rebootstrap_trigger_ms)
        return times

    def expire(self, now: int, has_open_alert) -> list[str]:
        return expire(self.clients, now, self.settings.entity_expiry_ms, has_open_alert)

    def expire_entities(self, client_ids, now: int, has_open_alert) -> list[str]:
        return expire_among(self.clients, client_ids, now, self.settings.entity_expiry_ms, has_open_alert)

    def report(self, now: int) -> tuple[list[dict], dict | None]:
        """Clients with an open stale incident, and clients past the rebootstrap trigger: how many,
        and the first few ids of each (the status view names them: streaming.sinks.status)."""
        trigger = self.settings.rebootstrap_trigger_ms
        open_ = self._open()
        stale = [c.client_id for c in open_ if c.stale_broker_ids]
        overdue = [c.client_id for c in open_ if c.first_failure_ms != NO_TIME and now - c.first_failure_ms >= trigger]
        return [], {"kind": "clients", "stale_clients": len(stale), "overdue_clients": len(overdue),
                    "stale_examples": heapq.nsmallest(REPORTED_EXAMPLES, stale),
                    "overdue_examples": heapq.nsmallest(REPORTED_EXAMPLES, overdue)}
