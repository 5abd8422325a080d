"""The commit log's records (JSON printed by Kafka's OffsetsMessageFormatter) -> offset_commit
events: a table of records as Kafka 4.1.2 prints them, each with why its outcome is right; the
stream splitter; the skipped-record log line; and a whole incident replayed through the rules."""

import json

import pytest

from streaming.collect.commits import (
    Commit,
    CommitCounts,
    Outcome,
    RecordSplitter,
    classify,
    offset_commit_event,
    skipped_record,
)
from streaming.config import RuleSettings
from streaming.engine.local import detect_all
from streaming.events import normalize

T0 = 1_767_225_600_000


def record(value, key_type=1, group="billing", topic="clicks", partition=0):
    return {"key": {"type": key_type, "data": {"group": group, "topic": topic, "partition": partition}},
            "value": value}


def v(version, **data):
    return {"version": version, "data": {"offset": 7, "metadata": "", "commitTimestamp": T0, **data}}


CASES = [
    # (case, record, kind, leader epoch of the commit)
    ("1 value v4 (Kafka 4.x) carries the leader epoch the consumer sent",
     record(v(4, leaderEpoch=5)), "commit", 5),
    ("2 value v3 (Kafka 2.1+) carries it too", record(v(3, leaderEpoch=2)), "commit", 2),
    ("3 a client that sent no epoch is written as -1: unknown, never a regression",
     record(v(4, leaderEpoch=-1)), "commit", -1),
    ("4 value v1 has no leader epoch (before KIP-320): unknown", record(v(1, expireTimestamp=-1)), "commit", -1),
    ("5 the legacy key type 0 is an offset commit as well", record(v(3, leaderEpoch=1), key_type=0), "commit", 1),
    ("6 value null: the offset was deleted (group deleted, offset expired), nothing committed",
     record(None), "tombstone", None),
    ("7 group metadata (key type 2) is not a commit", record({"version": 3, "data": {}}, key_type=2),
     "ignored_type", None),
    ("8 a KIP-848 group record (type 3) is not a commit either", record(None, key_type=3), "ignored_type", None),
    ("9 value v5 is not known to Kafka 4.1 (KIP-915: not backward compatible): not guessed at",
     record(v(5, leaderEpoch=5)), "unknown_version", None),
    ("10 a value without an offset cannot be a commit", record({"version": 4, "data": {"commitTimestamp": T0}}),
     "malformed", None),
    ("11 a key without a partition names no partition", {"key": {"type": 1, "data": {"group": "g"}}, "value": None},
     "malformed", None),
    ("12 something else entirely", ["not", "a", "record"], "malformed", None),
    ("13 a group id past 255 bytes is legal in Kafka but the contract's ids stop there",
     record(v(4, leaderEpoch=1), group="g" * 256), "id_too_long", None),
]


@pytest.mark.parametrize("case,rec,kind,epoch", CASES, ids=[c[0].split(" ")[0] for c in CASES])
def test_each_record_is_what_its_key_and_value_say(case, rec, kind, epoch):
    outcome = classify(rec)
    assert outcome.kind == kind, case
    if kind == "commit":
        assert outcome.commit == Commit(rec["key"]["data"]["group"], "clicks", 0, 7, epoch, T0), case
    else:
        assert outcome.commit is None and outcome.detail, case


def test_a_commit_becomes_an_offset_commit_event_valid_for_the_contract():
    """Field by field as docs/events.md says: the leader epoch is the metadata epoch, the
    coordinator's commit timestamp the event time; the id is the same for the same record."""
    commit = classify(record(v(4, leaderEpoch=5))).commit
    event = offset_commit_event(commit, "cluster-a", "epochwatch-collector")
    assert {k: event[k] for k in ("event_type", "cluster_id", "event_time", "group_id", "topic", "partition",
                                  "offset", "metadata_epoch")} == {
        "event_type": "offset_commit", "cluster_id": "cluster-a", "event_time": T0, "group_id": "billing",
        "topic": "clicks", "partition": 0, "offset": 7, "metadata_epoch": 5}
    assert event["event_id"] == offset_commit_event(commit, "cluster-a", "epochwatch-collector")["event_id"]
    long = classify(record(v(4, leaderEpoch=5), group="g" * 255, topic="t" * 249)).commit
    normalize(offset_commit_event(long, "cluster-a", "c" * 200))  # raises if an id is too long or a field wrong


def test_the_splitter_cuts_back_to_back_records_and_waits_for_an_unfinished_one():
    """The formatter prints no newline between records; a read may end in the middle of one."""
    a, b = record(v(4, leaderEpoch=5)), record(None, partition=1)
    text = json.dumps(a) + json.dumps(b)
    splitter = RecordSplitter()
    cut = len(json.dumps(a)) + 10
    assert splitter.feed(text[:cut]) == [a]
    assert splitter.feed(text[cut:]) == [b]
    assert splitter.feed("") == []


def test_the_splitter_skips_an_unreadable_stretch_to_the_next_record():
    """Never stuck on garbage: what cannot be read is reported and the next record still comes out."""
    good = record(v(4, leaderEpoch=1))
    out = RecordSplitter().feed('{"key": broken' + json.dumps(good))
    assert [o.kind for o in out[:1]] == ["malformed"] and out[1:] == [good]


def test_a_record_kafkas_formatter_could_not_decode_is_counted_with_its_reason():
    """ConsoleConsumer --skip-message-on-error logs it and goes on (log4j pattern of commit_log.py)."""
    line = ("ERROR ConsoleConsumer: Error processing message, skipping this message: Could not read record at "
            "offset 41 due to: Found an unknown record version 5 for 1 type")  # as Kafka 4.1.2 says it
    outcome = skipped_record(line)
    assert outcome.kind == "unknown_version" and "offset 41" in outcome.detail
    assert skipped_record("WARN NetworkClient: Connection to node 1 could not be established") is None
    counts = CommitCounts()
    for o in (outcome, Outcome("tombstone"), Outcome("commit")):
        counts.add(o)
    assert (counts["unknown_version"], counts["tombstone"], counts["commit"]) == (1, 1, 1)
    assert "offset 41" in counts.last_problem


def test_a_commit_whose_leader_epoch_goes_back_raises_the_regression_through_the_rules():
    """The incident as the commit log shows it on Kafka 4.1.2 (the broker accepts an older epoch):
    epoch 5, then 3, for the same partition -> OffsetCommitEpochRegression for that partition."""
    records = [record(v(4, leaderEpoch=5, commitTimestamp=T0)),
               record(v(4, leaderEpoch=3, commitTimestamp=T0 + 1000, offset=8)),
               record(v(4, leaderEpoch=2, commitTimestamp=T0 + 1500), partition=1)]  # another partition: its first
    events = [offset_commit_event(classify(r).commit, "cluster-a", "collector") for r in records]
    alerts = detect_all(events, RuleSettings(), until=T0 + 5000)
    firing = [(a["alertname"], a["labels"]["partition"]) for a in alerts if a["status"] == "firing"]
    assert firing == [("OffsetCommitEpochRegression", "0")]
