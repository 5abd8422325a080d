"""The commit log reader's plumbing without Kafka: a stand-in for the JVM prints what Kafka's
console consumer prints (records back to back on stdout, a skipped record on stderr) and exits;
the reader hands the records over, counts the skipped one, starts the process again after it
exits, and leaves no password file behind. The Java client settings are checked name by name."""

import json
import sys
from pathlib import Path

from streaming.collect.commit_log import CommitLogReader, console_consumer_command, java_client_properties
from tests.support.polling import wait_until

T0 = 1_767_225_600_000
COMMIT = {"key": {"type": 1, "data": {"group": "g", "topic": "t", "partition": 0}},
          "value": {"version": 4, "data": {"offset": 7, "leaderEpoch": 5, "metadata": "", "commitTimestamp": T0}}}
TOMBSTONE = {**COMMIT, "value": None}
SKIPPED = ("ERROR ConsoleConsumer: Error processing message, skipping this message: "
           "Could not read record at offset 3 due to: Unknown version 9")


def stand_in(tmp_path: Path, exit_code: int = 0) -> list[str]:
    script = tmp_path / "console_consumer.py"
    script.write_text(
        "import sys\n"
        f"sys.stdout.write({json.dumps(json.dumps(COMMIT) + json.dumps(TOMBSTONE))}); sys.stdout.flush()\n"
        f"print({SKIPPED!r}, file=sys.stderr)\n"
        f"sys.exit({exit_code})\n")
    return [sys.executable, str(script)]


def test_records_and_skipped_records_reach_the_round_and_an_exited_reader_is_started_again(tmp_path):
    """A JVM that exits (a wrong password, a crash) must not end the source: it comes back."""
    reader = CommitLogReader("127.0.0.1:1", {}, tmp_path, "collector", command=lambda *_: stand_in(tmp_path, 1))
    taken = []
    try:
        reader.ensure_running()
        wait_until(lambda: len(taken.extend(reader.take()) or taken) >= 3, 10, what="the stand-in's output")
        assert sorted(o.kind for o in taken) == ["commit", "tombstone", "unknown_version"]
        [commit] = [o.commit for o in taken if o.kind == "commit"]
        assert (commit.group_id, commit.leader_epoch, commit.offset) == ("g", 5, 7)
        wait_until(lambda: reader.ensure_running() or reader.restarts >= 1 and reader.running, 15,
                   what="the reader started again after its process exited")
        assert reader.last_exit.startswith("exit 1") and "Error processing message" in reader.last_exit
    finally:
        reader.close()
    assert reader.counts["unknown_version"] >= 1


def test_the_password_reaches_the_jvm_through_a_private_pipe_and_is_never_stored(tmp_path):
    """The watched cluster's password reaches the JVM only through a named pipe no other user can
    open, quoted so that any character survives; nothing holding it is left on disk, even where
    no cleanup runs (a collector killed with SIGKILL leaves at most the empty pipe)."""
    import stat

    client = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN", "sasl.username": "u",
              "sasl.password": 'p"w\\d'}
    received = tmp_path / "received.properties"
    script = tmp_path / "reads_settings.py"
    script.write_text("import sys\nopen(sys.argv[2], 'w').write(open(sys.argv[1]).read())\n")
    reader = CommitLogReader("127.0.0.1:1", client, tmp_path, "collector",
                             command=lambda props, _log4j: [sys.executable, str(script), str(props), str(received)])
    props = reader._properties
    mode = props.stat().st_mode
    assert stat.S_ISFIFO(mode) and mode & 0o077 == 0, oct(mode)
    try:
        reader.ensure_running()
        wait_until(lambda: received.exists() and received.read_text().endswith("\n"), 10, what="the settings read")
    finally:
        reader.close()
    # JAAS quoting (\" and \\ inside the quotes), then java.util.Properties escaping (every \ doubled)
    assert ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
            'password="p\\\\"w\\\\\\\\d";\n') in received.read_text()
    assert not props.parent.exists()


def test_librdkafka_security_names_become_the_java_clients():
    """One security section for both clients of the collector: a setting must mean the same to each."""
    """What streaming.collect.probes accepts under collect.client, in the Java client's names."""
    sasl = java_client_properties({"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
                                   "sasl.username": "svc", "sasl.password": 'a"b', "ssl.ca.location": "/ca.pem"})
    assert sasl == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="svc" password="a\\"b";',
                    "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    assert java_client_properties({}) == {}


def test_mtls_pem_files_are_handed_over_inline(tmp_path):
    """librdkafka takes the certificate and the key as two files, Java's PEM keystore as values."""
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\nx\n")
    (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\ny\n")
    props = java_client_properties({"security.protocol": "SSL", "ssl.certificate.location": str(tmp_path / "c.pem"),
                                    "ssl.key.location": str(tmp_path / "k.pem"), "ssl.key.password": "kp"})
    assert props["ssl.keystore.type"] == "PEM" and props["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY")
    assert props["ssl.keystore.certificate.chain"].startswith("-----BEGIN CERTIFICATE")
    assert props["ssl.key.password"] == "kp"


def test_the_console_consumer_reads_committed_commits_from_the_end_without_committing(tmp_path):
    """The JVM's arguments decide what is read: from the end, no offsets of its own, no aborted
    transactional commits, and a record Kafka cannot decode skipped rather than fatal."""
    (tmp_path / "kafka-tools-4.1.2.jar").write_bytes(b"")
    cmd = console_consumer_command("java", tmp_path, "b:9092", "grp", "cid", tmp_path / "p", tmp_path / "l")
    joined = " ".join(cmd)
    for part in ("--topic __consumer_offsets", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
                 "--skip-message-on-error", "enable.auto.commit=false", "auto.offset.reset=latest",
                 "isolation.level=read_committed", "--group grp", f"--consumer.config {tmp_path / 'p'}"):
        assert part in joined, part
    assert "--from-beginning" not in cmd


def test_a_missing_java_is_reported_and_tried_again_not_raised(tmp_path):
    """The collector's rounds call ensure_running: a JVM that cannot even start must not end them."""
    reader = CommitLogReader("127.0.0.1:1", {}, tmp_path, "collector",
                             command=lambda *_: [str(tmp_path / "no-such-java")])
    try:
        reader.ensure_running()
        reader.ensure_running()  # within the backoff: not tried again yet, and still no exception
        assert not reader.running and reader.last_exit.startswith("cannot start:")
    finally:
        reader.close()


def test_the_reader_is_reading_once_positioned_in_every_partition_it_was_given(tmp_path):
    """Its state comes from the Java consumer's own INFO lines (commit_log.LOG4J2): a JVM that runs
    but has not joined its group, or not yet found the end of every partition, reads nothing yet."""
    lines = ["INFO ConsumerRebalanceListenerInvoker: [Consumer clientId=c, groupId=g] Adding newly assigned "
             "partitions: [__consumer_offsets-0, __consumer_offsets-1]",
             "INFO SubscriptionState: [Consumer clientId=c, groupId=g] Resetting offset for partition "
             "__consumer_offsets-0 to position FetchPosition{offset=3, offsetEpoch=Optional.empty}"]
    script = tmp_path / "joins.py"
    script.write_text("import signal, sys\n"
                      f"for line in {lines!r}: print(line, file=sys.stderr, flush=True)\n"
                      "signal.pause()\n")  # runs until the reader stops it, like the JVM
    second = ("INFO SubscriptionState: [Consumer clientId=c, groupId=g] Resetting offset for partition "
              "__consumer_offsets-1 to position FetchPosition{offset=0, offsetEpoch=Optional.empty}")
    reader = CommitLogReader("127.0.0.1:1", {}, tmp_path, "collector", command=lambda *_: [sys.executable, str(script)])
    try:
        assert reader.state == "down"
        reader.ensure_running()
        wait_until(lambda: reader._positioned == {0}, 10, what="the first position")
        assert reader.state == "joining"  # partition 1 not positioned yet: commits there are not read
        reader._read_line(second)
        assert reader.state == "reading 2 partitions"
        reader._read_line(lines[0].replace("Adding newly assigned", "Lost previously assigned"))
        assert reader.state == "joining"
    finally:
        reader.close()
    assert reader.state == "down"
