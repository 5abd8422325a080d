"""Offset arithmetic of the Kafka source (udfs.offsets): pure, table-driven, each case with a reason."""

from __future__ import annotations

import json

import pytest

from udfs.offsets import (
    DataLoss,
    OffsetRange,
    OffsetSpecError,
    StartingOffsets,
    admit,
    cap_at,
    from_json_dict,
    group_ranges,
    parse_source_offset,
    plan_ranges,
    ramped,
    recreated_topics,
    resolve_starting,
    split_ranges,
    to_json_dict,
)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_json_form_is_sorted_so_spark_compares_equal_offsets_as_equal_text():
    flat = {("b", 0): 5, ("a", 10): 1, ("a", 2): 7}
    doc = to_json_dict(flat)
    assert json.dumps(doc) == '{"a": {"2": 7, "10": 1}, "b": {"0": 5}}'
    assert from_json_dict(json.loads(json.dumps(doc))) == flat


@pytest.mark.parametrize("text, kind, specific, why", [
    ("earliest", "earliest", {}, "keyword"),
    (" LATEST ", "latest", {}, "keywords are case-insensitive and trimmed"),
    ('{"a": {"0": 23, "1": -2}, "b": {"0": -1}}', "specific", {A0: 23, A1: -2, B0: -1},
     "JSON with -2 earliest / -1 latest, as in Spark"),
])
def test_starting_offsets_parse(text, kind, specific, why):
    parsed = StartingOffsets.parse(text)
    assert (parsed.kind, dict(parsed.specific)) == (kind, specific), why


@pytest.mark.parametrize("text, mentions, why", [
    ("first", "neither earliest, latest nor JSON", "unknown keyword"),
    ('{"a": {"0": "x"}}', "not a whole number", "offset must be an integer"),
    ('{"a": {"0": -3}}', "below -2", "only -2 and -1 are special"),
    ('{"a": [0, 1]}', "must map partition numbers", "assign-style list is not an offset spec"),
    ('{"a": {"zero": 1}}', "invalid literal", "partition must be a number"),
])
def test_starting_offsets_errors_name_the_option_and_fix(text, mentions, why):
    with pytest.raises(OffsetSpecError) as err:
        StartingOffsets.parse(text)
    assert "startingOffsets" in str(err.value) and "Fix:" in str(err.value), why
    assert mentions in str(err.value), why


EARLIEST = {A0: 10, A1: 0, B0: 0}
LATEST = {A0: 50, A1: 7, B0: 3}


@pytest.mark.parametrize("spec, expected, losses, why", [
    ("earliest", {A0: 10, A1: 0, B0: 0}, 0, "earliest retained offsets, not 0"),
    ("latest", {A0: 50, A1: 7, B0: 3}, 0, "the end of every partition"),
    ('{"a": {"0": 20, "1": -2}}', {A0: 20, A1: 0, B0: 3}, 0, "given, -2 earliest, unlisted topic latest"),
    ('{"a": {"0": -1, "1": 7}, "b": {"0": 0}}', {A0: 50, A1: 7, B0: 0}, 0, "-1 latest; offset == end is valid"),
    ('{"a": {"0": 5, "1": 0}}', {A0: 10, A1: 0, B0: 3}, 1, "5 < earliest 10: deleted -> data loss, earliest"),
    ('{"a": {"0": 60, "1": 0}}', {A0: 10, A1: 0, B0: 3}, 1, "60 > end 50: offsets reset -> data loss, earliest"),
])
def test_resolve_starting(spec, expected, losses, why):
    start, found = resolve_starting(StartingOffsets.parse(spec), [A0, A1, B0], EARLIEST, LATEST)
    assert start == expected, why
    assert len(found) == losses, why


@pytest.mark.parametrize("spec, mentions, why", [
    ('{"a": {"0": 1}}', "gives no offset for a-1", "a listed topic must list all its partitions (as Spark)"),
    ('{"c": {"0": 1}}', "does not contain", "a topic outside the subscription is a mistake"),
])
def test_resolve_starting_rejects_incomplete_specs(spec, mentions, why):
    with pytest.raises(OffsetSpecError, match=mentions):
        resolve_starting(StartingOffsets.parse(spec), [A0, A1, B0], EARLIEST, LATEST)


@pytest.mark.parametrize("start, latest, max_rows, expected, why", [
    ({A0: 0, A1: 0}, {A0: 10, A1: 30}, None, {A0: 10, A1: 30}, "no limit: everything"),
    ({A0: 0, A1: 0}, {A0: 10, A1: 30}, 40, {A0: 10, A1: 30}, "backlog fits the limit exactly"),
    ({A0: 0, A1: 0}, {A0: 10, A1: 30}, 20, {A0: 5, A1: 15}, "shared in proportion to the backlog"),
    ({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2, {A0: 1, A1: 1, B0: 0},
     "rounding leftovers go to the largest fraction, ties by name: total is exactly the limit"),
    ({A0: 5, A1: 0}, {A0: 5, A1: 100}, 10, {A0: 5, A1: 10}, "an idle partition gets nothing"),
    ({A0: 0, A1: 0}, {A0: 3, A1: 1_000_000}, 100, {A0: 1, A1: 99},
     "a partition of a few records beside a big one still advances (its share alone rounds to 0)"),
    ({A0: 50, A1: 0}, {A0: 20, A1: 100}, 10, {A0: 20, A1: 10},
     "reset partition (latest < start) keeps latest so that the planner reports it"),
])
def test_admit_max_rows(start, latest, max_rows, expected, why):
    end = admit(start, latest, max_rows=max_rows)
    assert end == expected, why
    admitted = sum(max(0, end[tp] - start[tp]) for tp in start)
    assert max_rows is None or admitted <= max_rows, why


def test_admit_min_rows_waits_until_enough_records():
    assert admit({A0: 0}, {A0: 3}, min_rows=5) == {A0: 0}
    assert admit({A0: 0}, {A0: 6}, min_rows=5) == {A0: 6}


def test_a_runs_first_batches_ramp_up_to_the_cap():
    assert [ramped(1_000_000, read, 3) for read in range(5)] == [125_000, 250_000, 500_000, 1_000_000, 1_000_000]
    assert [ramped(1_000_000, read, 0) for read in range(2)] == [1_000_000, 1_000_000], "no ramp: the cap at once"
    assert ramped(3, 0, 10) == 1, "never a batch of nothing"


def test_cap_at_keeps_available_now_runs_finite():
    assert cap_at({A0: 90, A1: 5, B0: 4}, {A0: 50, A1: 7}) == {A0: 50, A1: 5}


@pytest.mark.parametrize("start, end, earliest, ranges, loss_words, why", [
    ({A0: 0}, {A0: 10}, {A0: 0}, [OffsetRange("a", 0, 0, 10)], [], "plain range"),
    ({A0: 10}, {A0: 10}, {A0: 0}, [], [], "nothing new: no empty Spark partition"),
    ({A0: 0}, {A0: 10, A1: 4}, {A0: 0, A1: 2}, [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 2, 4)], [],
     "new partition: from its earliest offset"),
    ({A0: 3}, {A0: 10}, {A0: 6}, [OffsetRange("a", 0, 6, 10)], ["deleted"], "retention ate 3..5"),
    ({A0: 40}, {A0: 10}, {A0: 0}, [OffsetRange("a", 0, 0, 10)], ["went back"],
     "topic re-created: continue from the earliest"),
    ({A0: 5, B0: 2}, {A0: 9}, {A0: 0}, [OffsetRange("a", 0, 5, 9)], ["gone"], "topic b deleted"),
])
def test_plan_ranges(start, end, earliest, ranges, loss_words, why):
    planned, losses = plan_ranges(start, end, earliest)
    assert planned == ranges, why
    assert len(losses) == len(loss_words), why
    for loss, word in zip(losses, loss_words):
        assert isinstance(loss, DataLoss) and word in str(loss), why


@pytest.mark.parametrize("sizes, min_partitions, expected_parts, why", [
    ([100, 100], None, 2, "no minPartitions: one Spark partition per Kafka partition"),
    ([100, 100], 2, 2, "already enough"),
    ([100, 100], 8, 8, "each split in 4"),
    ([300, 100], 8, 8, "split in proportion: 6 + 2"),
    ([1000, 1], 4, 5, "4 parts for the big range plus the tiny one kept whole (rounded per range, as Spark)"),
    ([3], 10, 3, "never more parts than records"),
])
def test_split_ranges(sizes, min_partitions, expected_parts, why):
    ranges = [OffsetRange("a", i, 100, 100 + size) for i, size in enumerate(sizes)]
    parts = split_ranges(ranges, min_partitions)
    assert len(parts) == expected_parts, why
    for original in ranges:  # contiguous, no overlap, nothing lost
        pieces = [p for p in parts if p.partition == original.partition]
        assert pieces[0].start == original.start and pieces[-1].end == original.end, why
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:])), why
        assert all(p.size > 0 for p in pieces), why


@pytest.mark.parametrize("sizes, per_task, min_tasks, expected_tasks, why", [
    ([2500] * 8, None, 2, 8, "1. no recordsPerTask: one task per range, as before"),
    ([2500] * 8, 50_000, 2, 2, "2. a live batch of 20,000 records: as many tasks as cores, 4 ranges each"),
    ([2500] * 8, 50_000, None, 1, "3. no core count given: at least one task"),
    ([125_000] * 8, 50_000, 2, 8, "4. a catch-up batch: each range is a task's worth already"),
    ([31_250] * 8, 50_000, 2, 6, "5. 250,000 records: 5 tasks' worth, rounded up to a multiple of the cores"),
    ([10, 10, 10], 50_000, 4, 3, "6. never more tasks than ranges"),
    ([0, 0, 100], 50_000, 2, 1, "7. empty ranges are not read: one range left, one task"),
    ([], 50_000, 2, 0, "8. nothing to read: no task"),
])
def test_group_ranges(sizes, per_task, min_tasks, expected_tasks, why):
    ranges = [OffsetRange("a", i, 100, 100 + size) for i, size in enumerate(sizes)]
    groups = group_ranges(ranges, per_task, min_tasks)
    assert len(groups) == expected_tasks, why
    by_partition = lambda r: r.partition
    read = sorted((r for g in groups for r in g), key=by_partition)
    assert read == [r for r in ranges if r.size > 0], why  # each non-empty range read once
    assert all(g for g in groups), why


def test_group_ranges_balances_records_across_tasks():
    sizes = [9000, 1000, 1000, 1000, 3000, 3000, 1000, 1000]
    groups = group_ranges([OffsetRange("a", i, 0, s) for i, s in enumerate(sizes)], 50_000, 2)
    loads = sorted(sum(r.size for r in g) for g in groups)
    assert loads == [10_000, 10_000], "largest first into the least loaded task"
    for g in groups:
        assert g == sorted(g, key=lambda r: r.partition), "a task reads its ranges in partition order"


OLD_ID, NEW_ID = "AaH9i1xncdOMlI3HdZ4m9Q", "AaH9i5evd1O9LLxUW5k+bA"   # one topic's ids before / after it was re-created


def test_topic_ids_ride_along_in_the_same_deterministic_text():
    doc = to_json_dict({("b", 0): 5, ("a", 10): 1, ("a", 2): 7}, {"a": OLD_ID, "gone": NEW_ID})
    assert json.dumps(doc) == f'{{"a": {{"2": 7, "10": 1, "topicId": "{OLD_ID}"}}, "b": {{"0": 5}}}}', \
        "partitions by number then the id; b has no id; a topic without partitions is left out"
    assert parse_source_offset(json.loads(json.dumps(doc))) == ({("a", 10): 1, ("a", 2): 7, B0: 5}, {"a": OLD_ID})


def test_offsets_from_checkpoints_written_before_topic_ids_still_load():
    flat, ids = parse_source_offset({"a": {"0": 20, "1": 7}})
    assert flat == {A0: 20, A1: 7} and ids == {}, "no id recorded: unknown"


def test_starting_offsets_do_not_accept_a_topic_id():
    with pytest.raises(OffsetSpecError):
        StartingOffsets.parse(f'{{"a": {{"0": 1, "topicId": "{OLD_ID}"}}}}')


@pytest.mark.parametrize("recorded, current, expected, why", [
    ({"a": OLD_ID}, {"a": OLD_ID}, {}, "same topic"),
    ({"a": OLD_ID}, {"a": NEW_ID}, {"a": (OLD_ID, NEW_ID)}, "deleted and created again: a new id (KIP-516)"),
    ({}, {"a": NEW_ID}, {}, "old checkpoint, no id recorded: unknown, not re-created"),
    ({"a": OLD_ID}, {}, {}, "the broker gave no id now (deleted meanwhile, or no topic ids): unknown"),
    ({"a": OLD_ID, "b": OLD_ID}, {"a": OLD_ID, "b": NEW_ID}, {"b": (OLD_ID, NEW_ID)}, "per topic"),
])
def test_recreated_topics(recorded, current, expected, why):
    assert recreated_topics(recorded, current) == expected, why


def test_a_recreated_topic_already_longer_than_the_position_is_data_loss():
    """20 records read; the topic comes back with 30: offsets alone look like 10 new records."""
    start, end = {A0: 20}, {A0: 30}
    assert plan_ranges(start, end, {A0: 0}) == ([OffsetRange("a", 0, 20, 30)], []), "what offsets alone say"
    ranges, losses = plan_ranges(start, end, {A0: 0}, {"a": (OLD_ID, NEW_ID)})
    assert ranges == [OffsetRange("a", 0, 0, 30)], "the new topic is read from its start (failOnDataLoss=false)"
    [loss] = losses
    assert (loss.topic, loss.partition) == ("a", 0)
    assert "re-created" in str(loss) and OLD_ID in str(loss) and NEW_ID in str(loss) and "offset 20" in str(loss)


def test_recreated_and_shorter_is_reported_once_as_recreated():
    ranges, losses = plan_ranges({A0: 50, B0: 4}, {A0: 10, B0: 6}, {A0: 0, B0: 0}, {"a": (OLD_ID, NEW_ID)})
    assert ranges == [OffsetRange("a", 0, 0, 10), OffsetRange("b", 0, 4, 6)]
    assert [str(x).split(":")[0] for x in losses] == ["a-0"] and "re-created" in str(losses[0])
