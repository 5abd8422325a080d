"""Offset arithmetic of the Kafka source, free of I/O.

An offset is a plain JSON dict ``{"topic": {"0": 23, "1": 5}}``: topic -> partition (as a string,
JSON keys are strings) -> the next offset to read. Spark keeps it in the checkpoint and compares
the serialized text, so :func:`to_json_dict` always orders topics by name and partitions by
number. Inside the source a flat ``{(topic, partition): offset}`` mapping is easier to work with.

The source's own offsets also record each topic's id (KIP-516) next to its partitions:
``{"topic": {"0": 23, "1": 5, "topicId": "AaH9i1xncdOMlI3HdZ4m9Q"}}`` (partition keys are
numbers, so the key cannot clash). A re-created topic gets a new id, which is how a topic that is
already longer than the job's position is still seen as re-created. Offsets written before ids
were recorded have none: the id is then unknown and recorded from the next batch on.

Data loss (offsets deleted by retention, a topic deleted or re-created) is detected here and
returned as :class:`DataLoss` notes; the caller decides to fail or to log and go on
(``failOnDataLoss``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping

EARLIEST = -2
LATEST = -1

TOPIC_ID = "topicId"

TopicPartition = tuple[str, int]
FlatOffsets = dict[TopicPartition, int]
TopicIds = dict[str, str]


class OffsetSpecError(ValueError):
    """A startingOffsets value that cannot be used: what is wrong and how to fix it."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"option 'startingOffsets': {problem}. Fix: {fix}")
        self.problem, self.fix = problem, fix


@dataclass(frozen=True)
class DataLoss:
    topic: str
    partition: int
    message: str

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}: {self.message}"


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class StartingOffsets:
    """Parsed ``startingOffsets``: ``earliest``, ``latest`` or per-partition offsets (-2/-1 allowed)."""

    kind: str
    specific: Mapping[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "StartingOffsets":
        value = text.strip()
        if value.lower() in ("earliest", "latest"):
            return cls(value.lower())
        try:
            doc = json.loads(value)
        except json.JSONDecodeError:
            raise OffsetSpecError(f"{text!r} is neither earliest, latest nor JSON",
                                  'use earliest, latest or {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)') from None
        try:
            specific = from_json_dict(doc)
        except (TypeError, ValueError, AttributeError) as exc:
            raise OffsetSpecError(str(exc), 'write it as {"topic": {"0": 23, "1": -2}} with whole-number '
                                  "offsets (-2 earliest, -1 latest)") from None
        bad = {tp: o for tp, o in specific.items() if o < EARLIEST}
        if bad:
            tp, offset = next(iter(bad.items()))
            raise OffsetSpecError(f"offset {offset} of {tp[0]}-{tp[1]} is below -2",
                                  "use an offset >= 0, -2 (earliest) or -1 (latest)")
        return cls("specific", specific)


def from_json_dict(doc: Mapping) -> FlatOffsets:
    if not isinstance(doc, Mapping):
        raise TypeError(f"expected a JSON object of topics, got {type(doc).__name__}")
    flat: FlatOffsets = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, Mapping):
            raise TypeError(f"topic {topic!r} must map partition numbers to offsets")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offset of {topic}-{partition} is {offset!r}, not a whole number")
            flat[(str(topic), int(partition))] = offset
    return flat


def to_json_dict(flat: Mapping[TopicPartition, int], topic_ids: Mapping[str, str] | None = None) -> dict:
    """The JSON form: topics by name, partitions by number, then the topic's id if known (only
    for topics that have partitions in ``flat``)."""
    doc: dict[str, dict] = {}
    for topic, partition in sorted(flat):
        doc.setdefault(topic, {})[str(partition)] = int(flat[(topic, partition)])
    for topic, partitions in doc.items():
        if topic_ids and topic_ids.get(topic):
            partitions[TOPIC_ID] = str(topic_ids[topic])
    return doc


def parse_source_offset(doc: Mapping) -> tuple[FlatOffsets, TopicIds]:
    """An offset of the source (checkpoint, latestOffset): partitions, and the topic ids recorded
    with them (none in offsets written before ids were recorded)."""
    if not isinstance(doc, Mapping):
        raise TypeError(f"expected a JSON object of topics, got {type(doc).__name__}")
    ids: TopicIds = {}
    partitions_only = {}
    for topic, partitions in doc.items():
        if isinstance(partitions, Mapping) and TOPIC_ID in partitions:
            ids[str(topic)] = str(partitions[TOPIC_ID])
            partitions = {k: v for k, v in partitions.items() if k != TOPIC_ID}
        partitions_only[topic] = partitions
    return from_json_dict(partitions_only), ids


def recreated_topics(recorded: Mapping[str, str], current: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Topic -> (recorded id, current id) for topics whose id changed: deleted and created again.
    A topic without an id on either side is unknown, never re-created."""
    return {topic: (recorded[topic], current[topic]) for topic in sorted(recorded)
            if current.get(topic) and recorded[topic] and current[topic] != recorded[topic]}


def resolve_starting(spec: StartingOffsets, partitions: Iterable[TopicPartition],
                     earliest: Mapping[TopicPartition, int],
                     latest: Mapping[TopicPartition, int]) -> tuple[FlatOffsets, list[DataLoss]]:
    """The first start offsets of a new query. Offsets outside the retained range are data loss
    (the returned start then falls back to the earliest available offset)."""
    partitions = sorted(partitions)
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in partitions}, []
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in partitions}, []
    unknown = sorted(tp for tp in spec.specific if tp not in set(partitions))
    if unknown:
        listed = ", ".join(f"{t}-{p}" for t, p in unknown)
        raise OffsetSpecError(f"names {listed}, which the subscription does not contain (no such topic or "
                              "partition)", "list only partitions of subscribed, existing topics")
    missing = sorted(tp for tp in partitions if tp[0] in {t for t, _ in spec.specific} and tp not in spec.specific)
    if missing:
        listed = ", ".join(f"{t}-{p}" for t, p in missing)
        raise OffsetSpecError(f"gives no offset for {listed}",
                              "give every partition of a listed topic an offset (-2 earliest, -1 latest)")
    start: FlatOffsets = {}
    losses: list[DataLoss] = []
    for tp in partitions:
        wanted = spec.specific.get(tp, LATEST)  # topics the JSON does not mention start at latest
        if wanted == LATEST:
            start[tp] = latest[tp]
        elif wanted == EARLIEST:
            start[tp] = earliest[tp]
        elif wanted < earliest[tp] or wanted > latest[tp]:
            losses.append(DataLoss(*tp, f"starting offset {wanted} is outside the available range "
                                        f"[{earliest[tp]}, {latest[tp]}]"))
            start[tp] = earliest[tp]
        else:
            start[tp] = wanted
    return start, losses


def admit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
          max_rows: int | None = None, min_rows: int | None = None) -> FlatOffsets:
    """End offsets of the next batch: everything up to ``latest``, or at most ``max_rows`` records
    shared between partitions in proportion to their backlog (as Spark's Kafka source does).

    A partition whose latest offset is below its start (offsets were reset) keeps ``latest`` as its
    end, so that the range planner sees and reports it.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if min_rows is not None and total < min_rows:
        return {tp: start.get(tp, latest[tp]) for tp in latest}
    if max_rows is None or total <= max_rows:
        return dict(latest)
    # Every partition with a backlog gets a record first, when the limit allows: shared by backlog
    # alone, a partition of a few records beside one of millions would get none, batch after batch,
    # and the batch's clock waits for a partition behind (udfs.read_progress): every key would wait too.
    behind = sum(1 for b in backlog.values() if b)
    floor = {tp: 1 if backlog[tp] and max_rows >= behind else 0 for tp in backlog}
    rest, rest_total = max_rows - sum(floor.values()), total - sum(floor.values())
    shares = {tp: floor[tp] + ((backlog[tp] - floor[tp]) * rest / rest_total if rest_total else 0) for tp in backlog}
    granted = {tp: int(share) for tp, share in shares.items()}
    leftover = max_rows - sum(granted.values())
    by_fraction = sorted(backlog, key=lambda tp: (-(shares[tp] - granted[tp]), -backlog[tp], tp))
    for tp in by_fraction[:leftover]:
        granted[tp] += 1
    return {tp: (start[tp] + granted[tp] if tp in start and backlog[tp] else latest[tp]) for tp in latest}


def ramped(max_rows: int, batches_read: int, ramp_up_batches: int) -> int:
    """The cap of a run's next batch: ``max_rows`` halved once for each of the first
    ``ramp_up_batches`` batches not yet read (at least 1 record)."""
    return max(1, max_rows >> max(0, ramp_up_batches - batches_read))


def cap_at(end: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int]) -> FlatOffsets:
    """Trigger.AvailableNow: never go past the offsets recorded when the query started."""
    return {tp: min(offset, target[tp]) for tp, offset in end.items() if tp in target}


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                earliest: Mapping[TopicPartition, int],
                recreated: Mapping[str, tuple[str, str]] | None = None) -> tuple[list[OffsetRange], list[DataLoss]]:
    """Ranges to read for a batch [start, end), with data loss notes.

    - a partition in ``end`` but not in ``start`` is new: read it from its earliest offset;
    - a topic in ``recreated`` (its id changed between start and end, see :func:`recreated_topics`):
      the old topic's unread records are lost whatever the offsets say: read from the earliest;
    - ``end`` below ``start``: the offsets were reset (topic re-created): read from the earliest;
    - ``start`` below the earliest retained offset: records were deleted before being read.
    In each loss case the range continues from the earliest available offset.
    """
    ranges: list[OffsetRange] = []
    losses: list[DataLoss] = []
    recreated = recreated or {}
    for tp in sorted(end):
        low = earliest.get(tp, 0)
        until = end[tp]
        if tp not in start:
            begin = min(low, until)
        elif tp[0] in recreated:
            old_id, new_id = recreated[tp[0]]
            losses.append(DataLoss(*tp, f"topic {tp[0]} was re-created (topic id {old_id} -> {new_id}): records "
                                        f"of the old topic from offset {start[tp]} on were never read"))
            begin = min(low, until)
        else:
            begin = start[tp]
            if until < begin:
                losses.append(DataLoss(*tp, f"offset went back from {begin} to {until}: the partition was "
                                            "re-created or its offsets reset, some records may be missed"))
                begin = min(low, until)
            elif begin < low:
                losses.append(DataLoss(*tp, f"records {begin}..{low - 1} were deleted (retention) before "
                                            "they were read"))
                begin = low
        if until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    for tp in sorted(set(start) - set(end)):
        losses.append(DataLoss(*tp, "partition is gone (topic deleted?); records after offset "
                                    f"{start[tp]} may be missed"))
    return ranges, losses


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split big ranges so that there are at least about ``min_partitions`` Spark partitions,
    each range split in proportion to its size (Spark's KafkaOffsetRangeCalculator)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        begin = r.start
        for i in range(parts):
            until = begin + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, begin, until))
            begin = until
    return out


def group_ranges(ranges: list[OffsetRange], records_per_task: int | None,
                 min_tasks: int | None = None) -> list[list[OffsetRange]]:
    """The ranges each Spark task reads, one after the other.

    A task has a fixed cost whatever it reads (the Python worker, a Kafka consumer, the shuffle
    files; figures: bench/RESULTS.md, Live detection latency), which a live micro-batch of a few
    thousand records per partition pays once per partition. With ``records_per_task`` the ranges go into
    about one task per that many records, never fewer tasks than ``min_tasks`` (the cores, so
    that none idles) and a multiple of it, and never more than the ranges: a large batch keeps
    one task per range. Largest range first into the least loaded task.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not records_per_task or not ranges:
        return [[r] for r in ranges]
    floor = min_tasks or 1
    wanted = -(-sum(r.size for r in ranges) // records_per_task)
    tasks = min(len(ranges), -(-max(wanted, floor) // floor) * floor)
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        i = loads.index(min(loads))
        groups[i].append(r)
        loads[i] += r.size
    return [sorted(g, key=lambda r: (r.topic, r.partition, r.start)) for g in groups]
