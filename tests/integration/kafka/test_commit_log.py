"""The commit log source on real Apache Kafka 4.1.2: real confluent-kafka consumers commit, the
collector reads ``__consumer_offsets`` through Kafka's own console consumer and formatter, and
its offset_commit events carry each commit's group, partition, offset and leader epoch; a
leader epoch that goes back raises OffsetCommitEpochRegression through the rules; a deleted
group gives no event and no error; the broker going away and coming back ends nothing.

The source starts at the end of the topic, so each test first commits a marker until the
collector shows it (the JVM has its partitions), then does what it tests."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time

import pytest

from streaming import config
from streaming.collect.collector import Collector
from streaming.engine.local import detect_all
from streaming.tools.embedded import create_topics
from streaming.tools.kafka_cluster import KafkaCluster
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration]

TOPIC = "clicks"
_marks = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KafkaCluster(tmp_path_factory.mktemp("commit-log"), controllers=1, brokers=1) as c:
        create_topics(c.bootstrap_servers, {TOPIC: 2})
        yield c


@pytest.fixture
def collector(cluster):
    settings = config.load(None, {"collect.bootstrap.servers": cluster.bootstrap_servers,
                                  "collect.offset.commits": "on", "collect.metrics.port": 0})
    c = Collector(settings, publisher=None)
    yield c
    c.close()


def commit(bootstrap: str, group: str, offsets: list[tuple[int, int, int | None]]) -> list:
    """Commit (partition, offset, leader epoch or None) for ``group`` as a consumer outside the
    group's membership does (generation -1, as admin tools and standalone consumers commit)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    tps = [TopicPartition(TOPIC, p, o) if e is None else TopicPartition(TOPIC, p, o, leader_epoch=e)
           for p, o, e in offsets]

    def committed():
        try:
            return consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:  # NOT_COORDINATOR while a new cluster's __consumer_offsets loads
            if exc.args[0].retriable() or exc.args[0].name() in ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"):
                return None
            raise

    try:
        done = wait_until(committed, 60, interval_s=0.5, what=f"a commit of {group} accepted")
        assert all(tp.error is None for tp in done), done
        return consumer.committed([TopicPartition(TOPIC, p) for p, _, _ in offsets], timeout=10)
    finally:
        consumer.close()


def read_and_commit(bootstrap: str, group: str):
    """A subscribed application: reads partition 0 from the start, commits, returns what was stored."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TOPIC, b"after", partition=0)
    assert producer.flush(30) == 0
    app = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                    "enable.auto.commit": False})
    app.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        wait_until(lambda: any(m.error() is None for m in app.consume(100, 0.5)), 60, what=f"{group} reading")
        app.commit(asynchronous=False)
        return app.committed([TopicPartition(TOPIC, 0)], timeout=10)[0]
    finally:
        app.close()


class Events:
    """What the collector's rounds returned, accumulated."""

    def __init__(self, collector: Collector):
        self.collector, self.all = collector, []

    def round(self) -> list[dict]:
        events, _ = self.collector.run_round()
        self.all += events
        return self.all

    def commits(self, group: str) -> list[dict]:
        return [e for e in self.all if e["event_type"] == "offset_commit" and e["group_id"] == group]

    def until(self, predicate, timeout_s: float, what: str):
        return wait_until(lambda: (self.round(), predicate())[1], timeout_s, interval_s=0.3, what=what)


def reading(cluster, events: Events, timeout_s: float = 90) -> None:
    """Commit a marker until the collector reports it: from then on the JVM reads every partition."""
    group = f"marker-{next(_marks)}"

    def seen():
        commit(cluster.bootstrap_servers, group, [(0, 1, None)])
        return events.commits(group)

    wait_until(lambda: (events.round(), seen())[1], timeout_s, interval_s=1.0, what="the commit log reader reading")


def test_a_consumer_groups_commits_become_offset_commit_events_with_their_leader_epochs(cluster, collector):
    """A subscribed consumer that reads and commits, with no change to it: the events say what
    the broker stored (offset, and the leader epoch librdkafka sent with the commit)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    events = Events(collector)
    reading(cluster, events)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(20):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    app = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "orders-svc",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False})
    app.subscribe([TOPIC])
    try:
        read = []
        wait_until(lambda: len(read.extend(m for m in app.consume(20, 0.5) if m.error() is None) or read) >= 20,
                   60, what="the application reading its 20 records")
        app.commit(asynchronous=False)
        stored = {tp.partition: tp for tp in app.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)],
                                                           timeout=10)}
    finally:
        app.close()
    events.until(lambda: {e["partition"] for e in events.commits("orders-svc")} == {0, 1}, 60,
                 "offset_commit events for both partitions")
    got = {e["partition"]: e for e in events.commits("orders-svc")}
    for p, tp in stored.items():
        assert (got[p]["topic"], got[p]["offset"]) == (TOPIC, tp.offset)
        # librdkafka sends the leader epoch of the last record it read (0: the topic's first leader)
        assert got[p]["metadata_epoch"] == tp.leader_epoch == 0, (got[p], tp)
        assert got[p]["cluster_id"] == collector.cluster.cluster_id
    assert collector.commit_log.counts["unknown_version"] + collector.commit_log.counts["malformed"] == 0


def test_a_commit_with_an_older_leader_epoch_raises_offset_commit_epoch_regression(cluster, collector):
    """The incident on a real broker: Kafka 4.1.2 stores a commit whose leader epoch is below the
    partition's last commit (it does not refuse it), and the commit log shows both; the rules
    page for that partition and no other."""
    events = Events(collector)
    reading(cluster, events)
    commit(cluster.bootstrap_servers, "billing", [(0, 10, 5), (1, 10, 2)])
    stored = commit(cluster.bootstrap_servers, "billing", [(0, 11, 3), (1, 11, 2)])
    assert [tp.leader_epoch for tp in stored] == [3, 2], "the broker refused or changed the older epoch"
    events.until(lambda: len(events.commits("billing")) >= 4, 60, "the four commits of billing")
    assert [(e["partition"], e["offset"], e["metadata_epoch"]) for e in events.commits("billing")] == [
        (0, 10, 5), (1, 10, 2), (0, 11, 3), (1, 11, 2)]
    newest = max(e["event_time"] for e in events.commits("billing"))
    alerts = detect_all(events.commits("billing"), config.RuleSettings(), until=newest + 1000)
    firing = {(a["alertname"], a["labels"]["group_id"], a["labels"]["partition"])
              for a in alerts if a["status"] == "firing"}
    assert firing == {("OffsetCommitEpochRegression", "billing", "0")}


@pytest.mark.spark
def test_the_regression_reaches_the_alerts_topic_through_epochwatch_run(cluster, collector, broker, tmp_path):
    """The same incident through the Spark job (event time, available-now): the collector's
    events on an events topic, the alert on the alerts topic. A later commit of the group moves
    event time past the regression (the job's horizon trails the newest event by 2 s)."""
    from streaming.tools.demo import read_topic
    from tests.integration.faults.support import job_on_fresh_topics
    from tests.integration.hostile.support import run_to_exit, write_events
    from udfs import avro_codec

    group = f"billing-{tmp_path.name[-6:]}"
    events = Events(collector)
    reading(cluster, events)
    commit(cluster.bootstrap_servers, group, [(0, 10, 5)])
    commit(cluster.bootstrap_servers, group, [(0, 11, 3)])
    regressed = time.monotonic()
    wait_until(lambda: time.monotonic() - regressed >= 3, 10, what="3 s of event time")
    commit(cluster.bootstrap_servers, group, [(1, 5, 2)])
    events.until(lambda: len(events.commits(group)) >= 3, 60, f"the three commits of {group}")

    config_path, topics = job_on_fresh_topics(broker.bootstrap_servers, tmp_path, "commits")
    write_events(broker.bootstrap_servers, topics["events"], events.commits(group))
    code, job = run_to_exit(config_path, tmp_path / "job.log")
    assert code == 0, job.log()[-3000:]
    alerts = [avro_codec.decode(m.value()) for m in read_topic(broker.bootstrap_servers, topics["alerts"], 1)]
    assert {(a["alertname"], a["labels"]["group_id"], a["labels"]["partition"]) for a in alerts} == {
        ("OffsetCommitEpochRegression", group, "0")}


def test_a_deleted_group_gives_no_event_and_no_error(cluster, collector):
    """Deleting a group writes tombstones for its offsets (and its group metadata): nothing was
    committed, so nothing is sent, and nothing counts as undecodable."""
    from confluent_kafka.admin import AdminClient

    events = Events(collector)
    reading(cluster, events)
    commit(cluster.bootstrap_servers, "retired", [(0, 3, None), (1, 4, None)])
    events.until(lambda: len(events.commits("retired")) == 2, 60, "the retired group's commits")
    tombstones = collector.commit_log.counts["tombstone"]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # kept: its futures die with it
    admin.delete_consumer_groups(["retired"], request_timeout=10)["retired"].result(30)
    events.until(lambda: collector.commit_log.counts["tombstone"] >= tombstones + 2, 60, "the two tombstones")
    reading(cluster, events)  # a later commit came through: the tombstones were all read before it
    assert len(events.commits("retired")) == 2
    counts = collector.commit_log.counts
    assert counts["unknown_version"] + counts["malformed"] + counts["id_too_long"] == 0, counts.by_kind
    assert collector.commit_log.running


def test_the_cli_sends_commits_and_rides_out_the_broker_going_away(cluster, tmp_path):
    """`epochwatch collect --events-out`: it starts at the end of __consumer_offsets (a commit made
    before it started is not sent), commits made while it runs reach the file; the broker killed
    and restarted under it ends neither the collector nor its reader (the Java consumer
    reconnects), and commits made after the restart arrive, an application's with the partition's
    new leader epoch (the restart elected the leader again)."""
    import json

    import yaml

    config_file = tmp_path / "epochwatch.yaml"
    config_file.write_text(yaml.safe_dump({
        "kafka": {"bootstrap.servers": cluster.bootstrap_servers, "topics": {"events": "commit-log-events"}},
        "collect": {"bootstrap.servers": cluster.bootstrap_servers, "offset.commits": "on", "metrics.port": 0,
                    "interval.ms": 1000}}))
    create_topics(cluster.bootstrap_servers, {"commit-log-events": 1})
    commit(cluster.bootstrap_servers, "cli-history", [(0, 9, None)])
    out, log = tmp_path / "events.jsonl", tmp_path / "collect.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "streaming.commands", "collect", "--config", str(config_file),
                                 "--events-out", str(out)], stderr=stderr, stdout=subprocess.DEVNULL)
    try:
        def commits(group):
            lines = out.read_text().splitlines() if out.exists() else []
            return [e for e in map(json.loads, lines) if e["event_type"] == "offset_commit" and e["group_id"] == group]

        def committed(group, offset):
            commit(cluster.bootstrap_servers, group, [(0, offset, None)])
            return commits(group)

        wait_until(lambda: committed("cli-before", 1), 90, interval_s=1.0, what="a commit through the CLI")
        assert commits("cli-history") == [], "the topic's history was replayed"
        wait_until(lambda: "commits +" in log.read_text() and "(reading 50 partitions;" in log.read_text(), 30,
                   what="the status line saying the reader reads all 50 partitions")
        cluster.kill(1)
        wait_until(lambda: "unreachable" in log.read_text() or "probes 0/" in log.read_text(), 60,
                   what="a round that found the broker away")
        cluster.restart(1)
        restarted_at = len(log.read_text())
        after = wait_until(lambda: committed("cli-after", 5), 120, interval_s=1.0, what="a commit after the restart")
        assert proc.poll() is None, log.read_text()[-3000:]
        assert (after[0]["offset"], after[0]["metadata_epoch"]) == (5, -1)  # no epoch sent: unknown
        wait_until(lambda: "(reading 50 partitions;" in log.read_text()[restarted_at:], 60,
                   what="the reader reading every partition again after the restart")
        stored = read_and_commit(cluster.bootstrap_servers, "cli-reader")
        [event] = wait_until(lambda: commits("cli-reader"), 60, what="the reader's commit after the restart")
        # the restart elected the leader again: the consumer's commit carries the new epoch
        assert event["metadata_epoch"] == stored.leader_epoch >= 1, (event, stored)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_a_record_version_kafka_cannot_decode_is_counted_with_kafkas_reason_and_reading_goes_on(cluster, tmp_path):
    """Kafka refuses produce requests to __consumer_offsets, so a future record version is forged
    on a topic of its own: a real commit record copied byte for byte, once as it is and once with
    its value's version field (the first two bytes, big-endian) set to 99. Kafka's own formatter
    cannot decode the second: the reader counts it with Kafka's reason and reads the next one."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from streaming.collect.commit_log import CommitLogReader, kafka_libs

    commit(cluster.bootstrap_servers, "forge-source", [(0, 42, 7)])
    raw = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "forge-reader",
                    "enable.auto.commit": False})
    raw.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(50)])
    records = []
    try:
        wait_until(lambda: records.extend(m for m in raw.consume(100, 0.5) if m.error() is None
                                          and m.value() and b"forge-source" in m.key()) or records,
                   60, what="the forge-source commit in __consumer_offsets")
    finally:
        raw.close()
    key, value = records[0].key(), records[0].value()
    forged = (99).to_bytes(2, "big") + value[2:]
    create_topics(cluster.bootstrap_servers, {"forged-offsets": 1})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    reader = CommitLogReader(cluster.bootstrap_servers, {}, kafka_libs(None), "forge-test", topic="forged-offsets")
    outcomes = []

    def arrived(kind):
        outcomes.extend(reader.take())
        return [o for o in outcomes if o.kind == kind]

    try:
        reader.ensure_running()

        def genuine_read():
            producer.produce("forged-offsets", value, key)
            producer.flush(10)
            return arrived("commit")

        wait_until(genuine_read, 90, interval_s=1.0, what="the reader reading the forged topic")
        commits_before = len(arrived("commit"))
        producer.produce("forged-offsets", forged, key)
        producer.produce("forged-offsets", value, key)
        producer.flush(10)
        [skipped] = wait_until(lambda: arrived("unknown_version"), 60, what="the forged record counted")
        wait_until(lambda: len(arrived("commit")) > commits_before, 60, what="the record after it read")
        assert reader.running
    finally:
        reader.close()
    assert "version" in skipped.detail.lower() and "99" in skipped.detail, skipped.detail
    assert outcomes[0].commit.leader_epoch == 7 and outcomes[0].commit.offset == 42


def test_the_reader_jvm_does_not_outlive_a_collector_killed_with_sigkill(cluster, tmp_path):
    """No close() runs after kill -9: the kernel must end the JVM (setpriv --pdeathsig), or every
    crash of the collector would leave a consumer of __consumer_offsets behind."""
    import os
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "streaming.commands", "collect", "--quiet",
                             "--set", f"collect.bootstrap.servers={cluster.bootstrap_servers}",
                             "--set", f"kafka.bootstrap.servers={cluster.bootstrap_servers}",
                             "--set", "collect.offset.commits=on", "--set", "collect.metrics.port=0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children_of(task):
        try:
            return (task / "children").read_text().split()
        except FileNotFoundError:  # a short-lived thread of the collector ended meanwhile
            return []

    def jvms():
        return [int(c) for task in Path(f"/proc/{proc.pid}/task").iterdir() for c in children_of(task)]

    try:
        [jvm] = wait_until(jvms, 60, what="the reader's JVM started")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    wait_until(lambda: not os.path.exists(f"/proc/{jvm}") or "Z" in Path(f"/proc/{jvm}/stat").read_text().split()[2],
               30, what="the JVM gone with the collector")
    import tempfile

    from streaming.collect.commit_log import CommitLogReader, kafka_libs

    [left] = Path(tempfile.gettempdir()).glob(f"epochwatch-commits-{proc.pid}-*")
    assert all(f.is_fifo() or f.name == "log4j2.properties" for f in left.iterdir()), list(left.iterdir())
    CommitLogReader(cluster.bootstrap_servers, {}, kafka_libs(None), "next-collector").close()
    assert not left.exists(), "the next collector removes what a killed one left"
