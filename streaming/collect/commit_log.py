"""The commit log source of ``epochwatch collect`` (``collect.offset.commits: on``): reads
``__consumer_offsets`` continuously, as Burrow does, so every group's commits are seen with no
change to the applications.

Kafka decodes its own records: the source runs Kafka's stock console consumer
(``org.apache.kafka.tools.consumer.ConsoleConsumer``) with its ``OffsetsMessageFormatter`` in a
small JVM from Kafka's jars (``collect.kafka.libs``), and reads the JSON it prints; the mapping to
events is pure (streaming/collect/commits.py). The JVM:

- starts at the end of the topic (a group of its own, with a random suffix so that two collectors
  never split the partitions between them, and no committed offsets), reads committed
  transactions only (an aborted transactional commit never happened), skips a record its
  formatter cannot decode (logged on stderr, counted here) instead of stopping;
- gets the watched cluster's security settings (``collect.client``, librdkafka names) in Java's
  names through a named pipe only this user can open: the password is never in a file on disk,
  not even after a kill -9 of the collector (no cleanup runs then);
- waits out an unreachable broker itself (the Java consumer reconnects for ever); if it exits
  (a wrong password, a crash) it is started again after a backoff, and the status line says why.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Mapping, Sequence

from streaming.collect.commits import CommitCounts, Outcome, RecordSplitter, classify, skipped_record

TOPIC = "__consumer_offsets"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTER = "org.apache.kafka.tools.consumer.OffsetsMessageFormatter"
TOOLS_JAR_GLOB = "kafka-tools-*.jar"
# A small client: C1 and the serial collector start it fast and keep its RSS low.
JVM_FLAGS = ("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Djava.awt.headless=true")
# Kafka's tools log to stdout without a configuration, where they would mix with the records.
LOG4J2 = """status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %c{1}: %m%ex{short.message}%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
logger.assignment.name = org.apache.kafka.clients.consumer.internals.ConsumerRebalanceListenerInvoker
logger.assignment.level = info
logger.position.name = org.apache.kafka.clients.consumer.internals.SubscriptionState
logger.position.level = info
"""
# What those two INFO loggers say: which partitions the reader has, and that it is positioned at
# the end of one (only then are new commits in it read).
_ASSIGNED = re.compile(r"(Adding newly assigned|Revoke previously assigned|Lost previously assigned) "
                       r"partitions: \[?([^\]]*)")
_POSITIONED = re.compile(r"Resetting offset for partition [\w.-]+-(\d+) ")
_PARTITION = re.compile(r"[\w.-]+-(\d+)")  # the reader reads one topic: the partition number says it
RESTART_BACKOFF_S = (1, 2, 5, 10, 30)
DIR_PREFIX = "epochwatch-commits-"  # + the collector's pid: a killed collector's folder is found again


def java_client_properties(client: Mapping[str, str]) -> dict[str, str]:
    """``collect.client`` (librdkafka's names, the ones streaming.collect.probes accepts) in the
    Java client's names. PEM files are handed over as PEM, which the Java client reads (KIP-651)."""
    props: dict[str, str] = {}
    if "security.protocol" in client:
        props["security.protocol"] = client["security.protocol"].upper()
    mechanism = client.get("sasl.mechanism") or client.get("sasl.mechanisms")
    if mechanism:
        props["sasl.mechanism"] = mechanism
    if "sasl.username" in client:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if (mechanism or "").startswith("SCRAM")
                  else "org.apache.kafka.common.security.plain.PlainLoginModule")
        props["sasl.jaas.config"] = (f'{module} required username="{_jaas_quote(client["sasl.username"])}" '
                                     f'password="{_jaas_quote(client.get("sasl.password", ""))}";')
    if "ssl.ca.location" in client:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": client["ssl.ca.location"]})
    if "ssl.certificate.location" in client and "ssl.key.location" in client:
        props.update({"ssl.keystore.type": "PEM",
                      "ssl.keystore.certificate.chain": Path(client["ssl.certificate.location"]).read_text(),
                      "ssl.keystore.key": Path(client["ssl.key.location"]).read_text()})
        if "ssl.key.password" in client:
            props["ssl.key.password"] = client["ssl.key.password"]
    return props


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _properties_line(name: str, value: str) -> str:
    """java.util.Properties syntax: backslashes, line breaks and a leading blank escaped."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if escaped.startswith(" "):
        escaped = "\\" + escaped
    return f"{name}={escaped}\n"


def kafka_libs(setting: str | None) -> Path:
    """``collect.kafka.libs``, else $EPOCHWATCH_KAFKA_LIB, else the set-up's cache."""
    if setting:
        return Path(setting)
    from streaming.tools.kafka_cluster import KAFKA_VERSION, REPO

    return Path(os.environ.get("EPOCHWATCH_KAFKA_LIB") or REPO / ".cache" / "kafka" / KAFKA_VERSION)


def assignment_change(line: str) -> tuple[str, set[int]] | None:
    """("assigned" | "revoked" | "positioned", partitions) for a line of the reader's log, else None."""
    m = _ASSIGNED.search(line)
    if m:
        return ("assigned" if m.group(1).startswith("Adding") else "revoked",
                {int(p) for p in _PARTITION.findall(m.group(2))})
    m = _POSITIONED.search(line)
    return ("positioned", {int(m.group(1))}) if m else None


def tools_jar(libs: Path) -> Path | None:
    found = sorted(libs.glob(TOOLS_JAR_GLOB))
    return found[-1] if found else None


def console_consumer_command(java: str, libs: Path, bootstrap_servers: str, group_id: str, client_id: str,
                             properties_file: Path, log4j_file: Path, topic: str = TOPIC) -> list[str]:
    from streaming.tools.embedded import _dies_with_this_process

    classpath = os.pathsep.join(str(p) for p in sorted(libs.glob("*.jar")) if "javaagent" not in p.name)
    # the kernel ends the JVM with the collector, even a collector killed with SIGKILL
    return [*_dies_with_this_process(), java, *JVM_FLAGS, f"-Dlog4j2.configurationFile={log4j_file}",
            "-cp", classpath, CONSOLE_CONSUMER,
            "--bootstrap-server", bootstrap_servers, "--topic", topic, "--formatter", FORMATTER,
            "--skip-message-on-error", "--group", group_id, "--consumer.config", str(properties_file),
            "--consumer-property", "enable.auto.commit=false",
            "--consumer-property", "auto.offset.reset=latest",
            "--consumer-property", "isolation.level=read_committed",
            "--consumer-property", "exclude.internal.topics=false",
            # a rebalance of its own group (its coordinator moved) keeps its positions: with the
            # eager default it would start again from the end and miss the commits in between
            "--consumer-property",
            "partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            # one fetch per broker a second however busy the groups are (the default answers each
            # new commit at once, many fetches a second on busy groups); a round is 2 s anyway
            # (figures: bench/RESULTS.md, Collector load on the watched cluster)
            "--consumer-property", "fetch.min.bytes=1048576",
            "--consumer-property", "fetch.max.wait.ms=1000",
            "--consumer-property", f"client.id={client_id}"]


class CommitLogReader:
    """The JVM and two reader threads; ``take()`` hands the collector's round what arrived."""

    def __init__(self, bootstrap_servers: str, client: Mapping[str, str], libs: Path, client_id: str,
                 java: str | None = None, max_buffered: int = 100_000,
                 command: Callable[[Path, Path], Sequence[str]] | None = None, topic: str = TOPIC):
        self.client_id = client_id
        self.group_id = f"{client_id}-commits-{secrets.token_hex(4)}"
        _remove_dirs_of_dead_collectors()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))  # 0700
        self._properties, self._log4j = self._dir / "client.properties", self._dir / "log4j2.properties"
        self._settings = "".join(_properties_line(k, v) for k, v in sorted(java_client_properties(client).items()))
        os.mkfifo(self._properties, 0o600)  # handed over at each start (_hand_over), never stored
        self._log4j.write_text(LOG4J2)
        self._command = command or (lambda props, log4j: console_consumer_command(
            java or _java(), libs, bootstrap_servers, self.group_id, client_id, props, log4j, topic))
        self._outcomes: deque[Outcome | object] = deque()
        self._max_buffered, self._lock = max_buffered, threading.Lock()
        self.counts = CommitCounts()
        self.dropped = self.restarts = 0
        self.last_exit: str = ""
        self._proc: subprocess.Popen | None = None
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._assigned: set[int] = set()    # partitions of __consumer_offsets the JVM has
        self._positioned: set[int] = set()  # ... and is positioned in (reading new records)
        self._closed = False
        self._next_start, self._failures = 0.0, 0

    # --- the process ---------------------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the JVM, or start it again once its backoff has passed if it exited."""
        if self._closed:
            return
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return
        if proc is not None:  # it exited: say why, wait a little longer each time in a row
            errors = [line for line in self._stderr_tail if line.startswith("ERROR")]  # the last says why
            self.last_exit = f"exit {proc.returncode}" + (f": {errors[-1][:300]}" if errors else "")
            self._proc = None
            self._back_off()
            self.restarts += 1
        if time.monotonic() < self._next_start:
            return
        self._stderr_tail.clear()
        self._assigned, self._positioned = set(), set()
        try:
            self._proc = subprocess.Popen(list(self._command(self._properties, self._log4j)), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:  # no java, say: the collector's other sources go on, and it is tried again
            self.last_exit = f"cannot start: {exc}"[:300]
            self._back_off()
            return
        threading.Thread(target=self._hand_over, args=(self._proc,), daemon=True,
                         name="epochwatch-commits-settings").start()
        threading.Thread(target=self._read_records, args=(self._proc,), daemon=True,
                         name="epochwatch-commits-out").start()
        threading.Thread(target=self._read_log, args=(self._proc,), daemon=True, name="epochwatch-commits-err").start()

    def _back_off(self) -> None:
        self._failures += 1
        self._next_start = time.monotonic() + RESTART_BACKOFF_S[min(self._failures, len(RESTART_BACKOFF_S)) - 1]

    def _hand_over(self, proc: subprocess.Popen) -> None:
        """Write the client settings into the pipe once the JVM opens it (it reads them once, at
        its start); give up if it exits first, so that no writer waits for a reader that is gone."""
        while proc.poll() is None and not self._closed:
            try:
                fd = os.open(self._properties, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: nobody reads yet
                    return
                time.sleep(0.05)  # the JVM is starting: a few hundred ms, polled
                continue
            os.set_blocking(fd, True)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as pipe:
                    pipe.write(self._settings)
            except BrokenPipeError:
                pass  # it exited while reading: its exit is reported, and the next start gets them again
            return

    def _read_records(self, proc: subprocess.Popen) -> None:
        splitter, text = RecordSplitter(), codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                return
            records = splitter.feed(text.decode(chunk))
            if records:
                self._failures = 0  # it reads: a later exit starts again from the shortest backoff
                self._push(records)

    def _read_log(self, proc: subprocess.Popen) -> None:
        for raw in proc.stderr:
            self._read_line(raw.decode("utf-8", errors="replace").rstrip())

    def _read_line(self, line: str) -> None:
        if not line.startswith("INFO"):
            self._stderr_tail.append(line)  # what an exit is explained with
        change = assignment_change(line)
        if change is not None:
            kind, partitions = change
            if kind == "assigned":
                self._assigned |= partitions
            elif kind == "revoked":
                self._assigned -= partitions
                self._positioned -= partitions
            else:
                self._positioned |= partitions
            return
        skipped = skipped_record(line)
        if skipped is not None:
            self._push([skipped])

    def _push(self, items: list) -> None:
        with self._lock:
            for item in items:
                if len(self._outcomes) >= self._max_buffered:
                    self._outcomes.popleft()  # the collector fell far behind: keep the newest
                    self.dropped += 1
                self._outcomes.append(item)

    # --- the collector's side ------------------------------------------------------------------

    def take(self) -> list[Outcome]:
        """What arrived since the last call, classified and counted."""
        with self._lock:
            items, self._outcomes = list(self._outcomes), deque()
        outcomes = [item if isinstance(item, Outcome) else classify(item) for item in items]
        for outcome in outcomes:
            self.counts.add(outcome)
        return outcomes

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def reading_partitions(self) -> int:
        """How many partitions it reads: all it was given once positioned in each, else 0."""
        assigned = set(self._assigned)
        return len(assigned) if self.running and assigned and assigned <= self._positioned else 0

    @property
    def state(self) -> str:
        """``reading N partitions`` once positioned in every partition it has; ``joining`` while
        the JVM runs but is not there yet (connecting, joining its group); ``down``."""
        if not self.running:
            return "down"
        reading = self.reading_partitions
        return f"reading {reading} partitions" if reading else "joining"

    def close(self, timeout_s: float = 10.0) -> None:
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()  # the console consumer leaves its group on SIGTERM
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def _remove_dirs_of_dead_collectors() -> None:
    """What a collector killed with SIGKILL left in the temp folder (an empty pipe, the log config)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = folder.name[len(DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"
