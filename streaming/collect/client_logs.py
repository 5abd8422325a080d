"""What one librdkafka client tells about itself, turned into the contract's client events. Pure:
lines and errors in, events out, the time passed in (the hook in client_hook.py does the I/O).

librdkafka's channels (confluentinc/librdkafka, src/rdkafka_metadata.c, rdkafka.c,
rdkafka_broker.c; text as of v2.16):
- debug=metadata log lines: each MetadataResponse as a block, opened by
  ``<host:port/node>: ===== Received metadata (...) =====``, then ``ClusterId: <id>, ...``,
  ``<n> brokers, <m> topics`` and one ``Topic <t> [<p>] Leader <l> Epoch <e>`` per partition;
- ``Starting re-bootstrap sequence`` (facility REBOOTSTRAP, any debug context): a rebootstrap;
- ``<host:port/node>: Connection setup timed out in state ...`` (facility FAIL, a warning, not
  passed to error_cb): socket.connection.setup.timeout.ms (KIP-601) ran out;
- error_cb: ``_ALL_BROKERS_DOWN``;
- on_commit (a consumer's commit callback, opt-in): each committed partition's offset and the
  leader epoch the client sent with it (KIP-320).

Staleness is judged per partition: a response is behind when any partition it lists has an
older leader epoch than this client, or another client of the same process and cluster
(``shared``), already saw. Comparing one partition's leader epochs is sound whoever asked;
clients that read different topics never meet. (librdkafka asks one broker for metadata, so a
client talking to a broker cut off from the controller never sees a newer epoch itself; its
neighbours in the process do.) The contract's scalar ``metadata_epoch`` is a per-client
version V that grows whenever a response brings this client a newer leader epoch: a response
behind is reported at V - 1, below the epoch the client accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from streaming.collect.commits import NO_EPOCH, Commit, offset_commit_event

RECEIVED = re.compile(r"(?P<broker>\S+?)/(?P<node>\d+|bootstrap): ===== Received metadata")
CLUSTER_ID = re.compile(r"ClusterId: (?P<cluster>[^,\s]+)")
COUNTS = re.compile(r": (?P<brokers>\d+) brokers, \d+ topics")
PARTITION = re.compile(r"Topic (?P<topic>\S+) \[(?P<partition>\d+)\] Leader -?\d+ Epoch (?P<epoch>-?\d+)$")
BELONGS = re.compile(r"(ClusterId: |\d+ brokers, \d+ topics|Broker #\d+/\d+|Topic \S+ with \d+ partitions|"
                     r"Topic \S+ changed id|Topic \S+ \[\d+\] Leader)")
SETUP_TIMEOUT = re.compile(r"(?P<broker>\S+?)/(?P<node>\d+|bootstrap): Connection setup timed out")
REBOOTSTRAP = "Starting re-bootstrap sequence"
# librdkafka starts a rebootstrap when every known broker is down, when a broker answers error 129
# (KIP-1102), or when metadata.recovery.rebootstrap.trigger.ms passed without metadata
REBOOTSTRAP_REASONS = {"_ALL_BROKERS_DOWN": "NO_NODE_AVAILABLE", "REBOOTSTRAP_REQUIRED": "REBOOTSTRAP_REQUIRED"}
UNKNOWN_CLUSTER = "unknown"   # events before a client learned its cluster's id
BLOCK_IDLE_MS = 1_000   # a block no line followed for this long is complete


@dataclass
class _Response:
    started_ms: int
    broker_id: int
    cluster_id: str | None = None
    broker_count: int = 0
    epochs: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class ClientLogReader:
    """One client: feed it its log lines and errors as they come; it returns contract events."""

    cluster_id: str | None   # the contract's cluster_id; None: the ClusterId of the first response
    client_id: str
    setup_timeout_ms: int    # the client's socket.connection.setup.timeout.ms
    version: int = 0         # V: grows with every response that brings a newer leader epoch
    known_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    known_cluster_id: str | None = None
    shared: dict[str, dict[tuple[str, int], int]] | None = None   # ClusterId -> partition -> newest epoch
    setup_failures: dict[int, int] = field(default_factory=dict)  # node -> consecutive setup timeouts
    last_error: str = ""     # the latest error_cb name: what a rebootstrap that follows answers
    last_answered_by: int | None = None   # the node of the latest response
    _open: _Response | None = None
    _seq: int = 0

    def line(self, now_ms: int, text: str) -> list[dict]:
        """One log line (``fac``-less text as librdkafka formats it)."""
        out = []
        if self._open is not None and not BELONGS.search(text):
            out += self._close()
        if (m := RECEIVED.search(text)) is not None:
            out += self._close()
            self._open = _Response(now_ms, _node(m["node"]))
        elif (m := SETUP_TIMEOUT.search(text)) is not None:
            node = _node(m["node"])
            failures = self.setup_failures.get(node, 0)
            self.setup_failures[node] = failures + 1
            out.append(self._event(now_ms, "connection_attempt", node_id=node, outcome="SETUP_TIMEOUT",
                                   setup_timeout_ms=self.setup_timeout_ms, consecutive_failures=failures))
        elif self._open is not None:
            self._read_into(self._open, text)
        elif REBOOTSTRAP in text:
            out.append(self._event(now_ms, "client_rebootstrap", reason=REBOOTSTRAP_REASONS.get(self.last_error,
                                                                                            "TRIGGER_TIMEOUT"),
                                   cluster_id_before=self.known_cluster_id, cluster_id_after=None))
        return out

    def error(self, now_ms: int, name: str, text: str) -> list[dict]:
        """One error_cb error: ``name`` is KafkaError.name(), ``text`` its str()."""
        self.last_error = name
        if name == "_ALL_BROKERS_DOWN":
            return [self._event(now_ms, "metadata_request_failed", node_id=None, reason="NO_NODE_AVAILABLE")]
        return []

    def committed(self, now_ms: int, group_id: str, partitions: list[tuple[str, int, int, int | None]]) -> list[dict]:
        """One successful commit of this consumer: (topic, partition, offset, leader epoch or None)
        per partition -> ``offset_commit`` events, as the commit log collector makes them."""
        return [offset_commit_event(Commit(group_id, topic, partition, offset,
                                           NO_EPOCH if epoch is None or epoch < 0 else epoch, now_ms),
                                    self.cluster_id or UNKNOWN_CLUSTER, self.client_id)
                for topic, partition, offset, epoch in partitions if offset >= 0]

    def idle(self, now_ms: int) -> list[dict]:
        """Called now and then: a response block nothing followed for a while is complete."""
        if self._open is not None and now_ms - self._open.started_ms >= BLOCK_IDLE_MS:
            return self._close()
        return []

    def _read_into(self, response: _Response, text: str) -> None:
        if (m := PARTITION.search(text)) is not None:
            response.epochs[(m["topic"], int(m["partition"]))] = int(m["epoch"])
        elif (m := CLUSTER_ID.search(text)) is not None:
            response.cluster_id = m["cluster"] if m["cluster"] != "(null)" else None
        elif (m := COUNTS.search(text)) is not None:
            response.broker_count = int(m["brokers"])

    def _close(self) -> list[dict]:
        response, self._open = self._open, None
        if response is None:
            return []
        if response.cluster_id and self.known_cluster_id and response.cluster_id != self.known_cluster_id:
            self.known_epochs.clear()   # another cluster numbers its leader epochs on its own
        known = self.known_epochs
        neighbours = {} if self.shared is None else self.shared.setdefault(response.cluster_id or "", {})
        behind = any(0 <= epoch < max(known.get(tp, -1), neighbours.get(tp, -1))
                     for tp, epoch in response.epochs.items())
        newer = any(epoch > known.get(tp, -1) for tp, epoch in response.epochs.items())
        for tp, epoch in response.epochs.items():
            known[tp] = max(epoch, known.get(tp, -1))
            neighbours[tp] = max(epoch, neighbours.get(tp, -1))
        epoch = self.version - 1 if behind else self.version + (1 if newer else 0)
        if newer:
            self.version += 1
        if response.cluster_id:
            self.known_cluster_id = response.cluster_id
            self.cluster_id = self.cluster_id or response.cluster_id   # fixed from then on: one state key
        self.setup_failures.pop(response.broker_id, None)   # it answered: its setup works again
        self.last_answered_by = response.broker_id
        return [self._event(response.started_ms, "metadata_response", broker_id=response.broker_id,
                            metadata_epoch=epoch, error_code=0, broker_count=response.broker_count,
                            response_cluster_id=response.cluster_id)]

    def _event(self, now_ms: int, event_type: str, **fields) -> dict:
        self._seq += 1
        return {"event_type": event_type, "event_id": f"{self.client_id}/{event_type}/{now_ms}/{self._seq}",
                "cluster_id": self.cluster_id or UNKNOWN_CLUSTER, "event_time": now_ms, "client_id": self.client_id, **fields}


def _node(text: str) -> int:
    """A broker's node id; -1 for a bootstrap address (the contract's negative ids)."""
    return -1 if text == "bootstrap" else int(text)
