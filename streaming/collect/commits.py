"""Pure: the records of ``__consumer_offsets``, as Kafka's own ``OffsetsMessageFormatter`` prints
them, -> ``offset_commit`` events (docs/events.md, "Deriving events from a real cluster"). No I/O.

Kafka decodes its own record formats (streaming/collect/commit_log.py runs its stock console
consumer with that formatter); this module only reads the JSON it prints:

    {"key":{"type":1,"data":{"group":"g","topic":"t","partition":0}},
     "value":{"version":4,"data":{"offset":7,"leaderEpoch":5,"metadata":"","commitTimestamp":1767225600000}}}

- ``value: null`` is a tombstone: the group's offset was deleted (the group was deleted, or the
  offset expired). Nothing was committed, so no event.
- key types other than 0 and 1 (group metadata and the KIP-848 group records) are filtered out by
  the formatter itself; any that reach us anyway are ignored and counted.
- a value version outside 0-4 (Kafka 4.1's ``OffsetCommitValue``, whose KIP-915 note says a new
  version is not backward compatible) is not guessed at: counted as ``unknown_version``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from streaming.events import MAX_ID_BYTES

COMMIT_KEY_TYPES = (0, 1)        # LegacyOffsetCommitKey, OffsetCommitKey
KNOWN_VALUE_VERSIONS = range(0, 5)
NO_EPOCH = -1                    # leaderEpoch before value v3, or a client that sent none
# ConsoleConsumer --skip-message-on-error logs this for a record its formatter could not decode
# (an unknown record version), and goes on with the next record
SKIPPED_RECORD = "Error processing message, skipping this message"
_RECORD_START = '{"key":'


@dataclass(frozen=True)
class Commit:
    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    commit_timestamp_ms: int


@dataclass(frozen=True)
class Outcome:
    """What one printed record is: ``kind`` is commit, tombstone, ignored_type, unknown_version,
    malformed or id_too_long; ``commit`` is set for a commit, ``detail`` says why otherwise."""

    kind: str
    commit: Commit | None = None
    detail: str = ""


@dataclass
class CommitCounts:
    """Per kind, what the commit log gave since the collector started (the status line)."""

    by_kind: dict[str, int] = field(default_factory=dict)
    last_problem: str = ""

    def add(self, outcome: Outcome) -> None:
        self.by_kind[outcome.kind] = self.by_kind.get(outcome.kind, 0) + 1
        if outcome.kind not in ("commit", "tombstone", "ignored_type"):
            self.last_problem = f"{outcome.kind}: {outcome.detail}"[:300]

    def __getitem__(self, kind: str) -> int:
        return self.by_kind.get(kind, 0)


def classify(record: object) -> Outcome:
    """One JSON object the formatter printed -> what it is."""
    if not isinstance(record, dict) or not isinstance(record.get("key"), dict):
        return Outcome("malformed", detail=f"not a formatter record: {str(record)[:120]}")
    key, value = record["key"], record.get("value")
    if key.get("type") not in COMMIT_KEY_TYPES:
        return Outcome("ignored_type", detail=f"key type {key.get('type')}")
    data = key.get("data") or {}
    group, topic, partition = data.get("group"), data.get("topic"), data.get("partition")
    if not (isinstance(group, str) and isinstance(topic, str) and _is_int(partition)):
        return Outcome("malformed", detail=f"key without group/topic/partition: {json.dumps(key)[:120]}")
    if value is None:
        return Outcome("tombstone", detail=f"{group} {topic}-{partition}")
    version = value.get("version") if isinstance(value, dict) else None
    if version not in KNOWN_VALUE_VERSIONS:
        return Outcome("unknown_version", detail=f"OffsetCommitValue version {version} for {group} {topic}-{partition}")
    v = value.get("data") or {}
    offset, stamp, epoch = v.get("offset"), v.get("commitTimestamp"), v.get("leaderEpoch", NO_EPOCH)
    if not (_is_int(offset) and _is_int(stamp) and _is_int(epoch)):
        return Outcome("malformed", detail=f"value without offset/commitTimestamp: {json.dumps(value)[:120]}")
    if max(len(group.encode()), len(topic.encode())) > MAX_ID_BYTES:
        # the job would refuse it (id_too_long); Kafka allows longer group ids than the contract
        return Outcome("id_too_long", detail=f"group id of {len(group.encode())} bytes")
    return Outcome("commit", Commit(group, topic, partition, offset, epoch if epoch >= 0 else NO_EPOCH, stamp))


def offset_commit_event(commit: Commit, cluster_id: str, client_id: str) -> dict:
    """The contract's ``offset_commit``: the commit's leader epoch (KIP-320) is its metadata epoch,
    and it happened when the coordinator wrote it (``commitTimestamp``)."""
    return {"event_type": "offset_commit", "event_id": _event_id(commit, cluster_id, client_id),
            "cluster_id": cluster_id, "event_time": commit.commit_timestamp_ms, "group_id": commit.group_id,
            "topic": commit.topic, "partition": commit.partition, "offset": commit.offset,
            "metadata_epoch": commit.leader_epoch}


def _event_id(commit: Commit, cluster_id: str, client_id: str) -> str:
    # Stable across restarts (a record read twice is the same event), and short whatever the
    # group and topic names: both may be 255 bytes, and so may an id.
    digest = hashlib.blake2b(json.dumps([cluster_id, commit.group_id, commit.topic, commit.partition, commit.offset,
                                         commit.leader_epoch, commit.commit_timestamp_ms]).encode(),
                             digest_size=12).hexdigest()
    return f"{client_id}/commit/{digest}"[:MAX_ID_BYTES]


def skipped_record(stderr_line: str) -> Outcome | None:
    """A record the console consumer skipped because Kafka's formatter could not decode it."""
    at = stderr_line.find(SKIPPED_RECORD)
    if at < 0:
        return None
    reason = stderr_line[at + len(SKIPPED_RECORD):].strip(" :\n")
    return Outcome("unknown_version", detail=reason or "Kafka's formatter could not decode a record")


class RecordSplitter:
    """The formatter writes one JSON object per record with nothing between them (no newline):
    cut the stream into objects as it arrives, with the standard JSON decoder. A record not yet
    complete waits for the rest; one that cannot be read is skipped to the next record start
    (``{"key":`` cannot occur inside a JSON string, whose quotes are escaped)."""

    def __init__(self, max_pending_chars: int = 8_000_000):
        self._pending, self._max = "", max_pending_chars
        self._decoder = json.JSONDecoder()

    def feed(self, text: str) -> list[object]:
        """The objects (or ``Outcome('malformed')`` for unreadable stretches) completed by ``text``."""
        buf, out, at = self._pending + text, [], 0
        while True:
            while at < len(buf) and buf[at].isspace():
                at += 1
            if at >= len(buf):
                break
            try:
                obj, at = self._decoder.raw_decode(buf, at)
                out.append(obj)
                continue
            except json.JSONDecodeError as exc:
                next_start = buf.find(_RECORD_START, at + 1)
                if next_start < 0 and len(buf) - at <= self._max:
                    break  # most likely a record still being written: wait for the rest
                bad_end = next_start if next_start >= 0 else len(buf)
                out.append(Outcome("malformed", detail=f"{exc.msg}: {buf[at:min(bad_end, at + 120)]!r}"))
                at = bad_end
        self._pending = buf[at:]
        return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
