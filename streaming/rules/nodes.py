"""Per-node rules seen from many clients: REBOOTSTRAP_REQUIRED answers (KIP-1102) and
connection-setup-timeout storms (KIP-601)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming import events
from streaming.config import RuleSettings
from streaming.rules.lifecycle import Condition, condition
from streaming.rules.records import NO_TIME, NodeRecord, expire, over_capacity, record_of
from streaming.rules.table import RulesTable

MAX_TRACKED_CLIENTS = 1000
JITTER_LOW, JITTER_HIGH = 0.8, 1.2


def nominal_setup_timeout_ms(failures_before: int, base_ms: int) -> int:
    """KIP-601's timeout before jitter and cap: base * 2^(n-1) for the n-th consecutive attempt.

    ``failures_before`` is the number of failures before this attempt (n - 1), as the Java
    client's ClusterConnectionStates passes it to its ExponentialBackoff.
    """
    return base_ms * (2 ** min(max(failures_before, 0), 40))


def setup_timeout_bounds(failures_before: int, base_ms: int, max_ms: int) -> tuple[float, float]:
    """KIP-601: the n-th consecutive attempt waits min(max, base * 2^(n-1) * U(0.8, 1.2))."""
    nominal = nominal_setup_timeout_ms(failures_before, base_ms)
    return min(max_ms, nominal * JITTER_LOW), min(max_ms, nominal * JITTER_HIGH)


def follows_kip601(timeout_ms: int, failures_before: int, base_ms: int, max_ms: int) -> bool:
    low, high = setup_timeout_bounds(failures_before, base_ms, max_ms)
    return low - 1 <= timeout_ms <= high + 1  # 1 ms slack for rounding to whole milliseconds


@dataclass
class NodeTable(RulesTable):
    cluster_id: str
    settings: RuleSettings
    nodes: dict[int, NodeRecord] = field(default_factory=dict)
    touched: set[int] = field(default_factory=set)
    dirty: bool = False

    def node(self, node_id: int) -> NodeRecord:
        return record_of(self.nodes, self.touched, node_id, NodeRecord)

    def over_capacity(self, ev: dict) -> str | None:
        """Why an event of a node new to a full table is refused (rules.state.max.nodes.per.cluster)."""
        kind = ev["event_type"]
        if kind == "connection_attempt":
            node = ev["node_id"]
        elif kind == "metadata_response" and ev.get("error_code") == events.REBOOTSTRAP_REQUIRED:
            node = ev["broker_id"]
        else:
            return None
        return over_capacity(self.nodes, node, self.settings.max_nodes, "node", "state.max.nodes.per.cluster")

    def implausible(self, ev: dict) -> str | None:
        """Nothing a node's events carry is a high-water mark (streaming.spark.validity)."""
        return None

    def apply(self, ev: dict) -> int | None:
        """Apply one event; returns the earliest deadline it may have introduced."""
        kind, t = ev["event_type"], ev["event_time"]
        if kind == "metadata_response" and ev.get("error_code") == events.REBOOTSTRAP_REQUIRED:
            self.on_rebootstrap_required(self.node(ev["broker_id"]), ev["client_id"], t)
        elif kind == "connection_attempt" and ev["outcome"] == "SETUP_TIMEOUT":
            self.on_setup_timeout(self.node(ev["node_id"]), ev, t)
        else:
            return None
        return t + self.settings.storm_window_ms

    def on_rebootstrap_required(self, n: NodeRecord, client_id: str, t: int) -> None:
        n.last_event_ms = max(n.last_event_ms, t)
        if n.rr_since_ms == NO_TIME:
            n.rr_since_ms, n.rr_responses, n.rr_clients = t, 0, []
            self.dirty = True
        n.rr_last_ms = max(n.rr_last_ms, t)
        n.rr_responses += 1
        if client_id not in n.rr_clients and len(n.rr_clients) < MAX_TRACKED_CLIENTS:
            n.rr_clients.append(client_id)

    def on_setup_timeout(self, n: NodeRecord, ev: dict, t: int) -> None:
        s = self.settings
        n.last_event_ms = max(n.last_event_ms, t)
        n.timeout_times_ms.append(t)
        n.timeout_clients.append(ev["client_id"])
        n.timeout_off_formula.append(not follows_kip601(ev["setup_timeout_ms"], ev["consecutive_failures"],
                                                        s.connection_setup_timeout_ms,
                                                        s.connection_setup_timeout_max_ms))
        # bound the window's memory: the oldest entries beyond a generous cap are dropped
        cap = max(10 * s.storm_min_timeouts, 5000)
        if len(n.timeout_times_ms) > cap:
            del n.timeout_times_ms[0], n.timeout_clients[0], n.timeout_off_formula[0]
        if n.storm_since_ms == NO_TIME and len(n.timeout_times_ms) >= s.storm_min_timeouts:
            self.dirty = True

    def advance(self, now: int) -> None:
        s = self.settings
        for n in self.nodes.values():
            if n.rr_since_ms != NO_TIME and now - n.rr_last_ms >= s.storm_window_ms:
                n.rr_since_ms, n.rr_last_ms, n.rr_responses, n.rr_clients = NO_TIME, NO_TIME, 0, []
            start = now - s.storm_window_ms
            drop = 0
            while drop < len(n.timeout_times_ms) and n.timeout_times_ms[drop] <= start:
                drop += 1
            if drop:
                del n.timeout_times_ms[:drop], n.timeout_clients[:drop], n.timeout_off_formula[:drop]
            if self._storming(n):
                if n.storm_since_ms == NO_TIME:
                    n.storm_since_ms = self._storm_start(n)
            else:
                n.storm_since_ms = NO_TIME

    def _storming(self, n: NodeRecord) -> bool:
        s = self.settings
        return (len(n.timeout_times_ms) >= s.storm_min_timeouts
                and len(set(n.timeout_clients)) >= s.storm_min_clients)

    def _storm_start(self, n: NodeRecord) -> int:
        """The time of the timeout that first made the window cross both thresholds."""
        s = self.settings
        clients: set[str] = set()
        for i, (t, cid) in enumerate(zip(n.timeout_times_ms, n.timeout_clients)):
            clients.add(cid)
            if i + 1 >= s.storm_min_timeouts and len(clients) >= s.storm_min_clients:
                return t
        return n.timeout_times_ms[-1]

    def conditions(self, now: int) -> list[Condition]:
        found = []
        for n in self.nodes.values():
            if n.rr_since_ms != NO_TIME:
                found.append(condition("RebootstrapRequired", n.rr_since_ms,
                                       f"{n.rr_responses} REBOOTSTRAP_REQUIRED answers to {len(n.rr_clients)} clients",
                                       node_id=n.node_id))
            if n.storm_since_ms != NO_TIME:
                off = sum(n.timeout_off_formula)
                found.append(condition("ConnectionSetupTimeoutStorm", n.storm_since_ms,
                                       f"{len(n.timeout_times_ms)} setup timeouts from {len(set(n.timeout_clients))} "
                                       f"clients in {self.settings.storm_window_ms} ms; {off} outside KIP-601's "
                                       f"exponential range (clients without KIP-601 or misconfigured)",
                                       node_id=n.node_id))
        return found

    def next_deadline(self, now: int) -> int | None:
        window = self.settings.storm_window_ms
        times = []
        for n in self.nodes.values():
            if n.rr_last_ms != NO_TIME:
                times.append(n.rr_last_ms + window)
            if n.timeout_times_ms:
                times.append(n.timeout_times_ms[0] + window)
        future = [t for t in times if t > now]
        return min(future) if future else None

    def expire(self, now: int, has_open_alert) -> list[int]:
        return expire(self.nodes, now, self.settings.entity_expiry_ms, has_open_alert)
