"""Fault-injection helpers: `epochwatch run` as a real process (so it can be kill -9'ed), a tail
of an output topic that keeps every record (duplicates included), cluster telemetry produced at
wall-clock time for the live job, and small readers of a query's progress."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.polling import wait_until

TICK_MS = 50   # LiveTelemetry's clock tick
OWN_BROKER = 1  # the node id of the own_broker fixture's only broker: own_broker.pause(OWN_BROKER)
BATCH_LINE = re.compile(r"epochwatch: batch (\d+): (\d+) events, .*, lag (\d+), state rows \d+, late (\d+)")


def write_job_config(path: Path, *, bootstrap: str, events: str, alerts: str, dlq: str, checkpoint: Path,
                     rules: dict | None = None, kafka: dict | None = None, sinks: dict | None = None,
                     trigger_interval: str = "500 milliseconds") -> Path:
    """An epochwatch YAML config for a test job: Spark kept small (local[2], 2 shuffle partitions)."""
    doc = {
        "kafka": {"bootstrap.servers": bootstrap, "topics": {"events": events, "alerts": alerts, "dlq": dlq},
                  "encoding": "confluent", "startingOffsets": "earliest", **(kafka or {})},
        "rules": dict(rules or {}),
        "sinks": {"metrics.port": 0, **(sinks or {})},
        "checkpoint_location": str(checkpoint),
        "trigger_interval": trigger_interval,
        "spark": {"spark.sql.shuffle.partitions": "2"},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass(frozen=True)
class BatchLine:
    """One progress line of `epochwatch run`: batch id, input rows, source lag, rows dropped as late."""

    batch_id: int
    events: int
    lag: int
    late: int


@dataclass
class JobProcess:
    """`epochwatch run` in its own process group: the Python driver, its JVM and the Python
    workers all die together on kill9(). Each start appends to the same log."""

    config: Path
    log_path: Path
    extra_args: tuple[str, ...] = ("--event-time",)
    starts: int = 0
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log_offset: int = 0

    def start(self) -> "JobProcess":
        assert self._proc is None, "already running"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {self.starts + 1} =====\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "streaming.commands", "run", "--config", str(self.config), *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def kill9(self) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers) and reap the driver."""
        if self._proc is None:
            return
        _kill_group(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=30)
        self._proc = None

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM to the driver (run stops the query and closes its sinks), then clean up the group."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self._proc.pid, signal.SIGKILL)  # the JVM and workers, if anything is left
        code = self._proc.wait(timeout=30)
        self._proc = None
        return code

    def log(self, current_start_only: bool = False) -> str:
        text = self.log_path.read_bytes()
        return (text[self._log_offset:] if current_start_only else text).decode(errors="replace")

    def batches(self, current_start_only: bool = True) -> list["BatchLine"]:
        """Every completed micro-batch, from the job's progress lines."""
        return [BatchLine(*map(int, m)) for m in BATCH_LINE.findall(self.log(current_start_only))]

    def progress(self) -> list[BatchLine]:
        """The batches of the current run so far; fails the test when the job has exited."""
        if not self.alive():
            raise AssertionError(f"the job exited with {self.returncode()}:\n{self.log(True)[-3000:]}")
        return self.batches()

    def wait_for_batch(self, timeout_s: float, what: str) -> list[BatchLine]:
        return wait_until(self.progress, timeout_s=timeout_s, interval_s=0.2, what=what)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


class TopicTail:
    """Every record of a topic from the beginning, kept as it grows (duplicates included)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.topic = topic
        self.records: list[tuple[str, dict]] = []   # (key, decoded alert record)
        self._written_ms: dict[int, int] = {}        # id(record) -> its Kafka timestamp
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-tail-{time.time_ns()}",
                                   "enable.auto.commit": False, "enable.partition.eof": False})
        meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])

    def poll(self, wait_s: float = 0.2) -> list[tuple[str, dict]]:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

        from udfs import avro_codec

        for msg in self._consumer.consume(1000, timeout=wait_s):
            if msg.error() is None:
                record = avro_codec.decode(msg.value())
                self.records.append((msg.key().decode(), record))
                kind, stamp = msg.timestamp()
                if kind != TIMESTAMP_NOT_AVAILABLE:
                    self._written_ms[id(record)] = stamp
        return self.records

    def written_ms(self, record: dict) -> int | None:
        """When ``record`` (one of ``records``) was produced: its Kafka timestamp, which the job's
        producer sets as it sends the record (None if the record has none)."""
        return self._written_ms.get(id(record))

    def event_ids(self, wait_s: float = 0.2) -> set[str]:
        return {r["event_id"] for _, r in self.poll(wait_s)}

    def close(self) -> None:
        self._consumer.close()


class LiveTelemetry:
    """Cluster telemetry at wall-clock time from a background thread: every broker not silenced
    heartbeats every ``heartbeat_ms``, every client reports a metadata response every
    ``response_ms``. Produced without waiting for acknowledgements: while the broker is away
    librdkafka queues the records, as a real telemetry producer would, so event time has no gap."""

    def __init__(self, bootstrap: str, topic: str, cluster: str, brokers: list[int], clients: int = 0,
                 heartbeat_ms: int = 250, response_ms: int = 250, message_timeout_ms: int = 120_000):
        """``message_timeout_ms``: how long a record may wait for an away broker before librdkafka
        gives up on it (0: for ever, for outages longer than a test's)."""
        import threading

        from confluent_kafka import Producer

        self.topic, self.cluster, self.brokers, self.clients = topic, cluster, list(brokers), clients
        self.heartbeat_ms, self.response_ms = heartbeat_ms, response_ms
        self.silent: set[int] = set()
        self.held = False        # True: the whole cluster's telemetry stops (nothing is produced)
        self.produced = 0
        self.errors: list[str] = []
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "message.timeout.ms": message_timeout_ms,
                                   "queue.buffering.max.messages": 1_000_000})
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="live-telemetry", daemon=True)

    def start(self) -> "LiveTelemetry":
        self._thread.start()
        return self

    def silence(self, broker: int) -> int:
        """Stop the broker's heartbeats; returns the wall-clock ms of its last heartbeat period."""
        self.silent.add(broker)
        return int(time.time() * 1000)

    def resume(self, broker: int) -> None:
        self.silent.discard(broker)

    def hold(self, timeout_s: float = 30.0) -> int:
        """Stop all telemetry; returns how many records were produced, all acknowledged."""
        with self._tick_lock:
            self.held = True
        if self._producer.flush(timeout_s):
            raise AssertionError(f"telemetry not acknowledged within {timeout_s} s")
        return self.produced

    def release(self) -> None:
        self.held = False

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _events(self, now_ms: int, tick: int) -> list[dict]:
        from tests.support.builders import hb, response

        out = []
        if tick % max(1, self.heartbeat_ms // TICK_MS) == 0:
            out += [hb(now_ms, b) for b in self.brokers if b not in self.silent]
        if self.clients and tick % max(1, self.response_ms // TICK_MS) == 0:
            live = [b for b in self.brokers if b not in self.silent] or self.brokers
            out += [response(now_ms, f"client-{c:04d}", live[c % len(live)], 10) for c in range(self.clients)]
        return out

    def _produce(self, event: dict) -> None:
        from streaming.tools.simulate.writers import event_key
        from udfs import avro_codec

        event["cluster_id"] = self.cluster
        self._producer.produce(self.topic, avro_codec.encode(event), event_key(event), on_delivery=self._delivered)
        self.produced += 1

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(TICK_MS / 1000):
            with self._tick_lock:
                for ev in [] if self.held else self._events(int(time.time() * 1000), tick):
                    self._produce(ev)
            self._producer.poll(0)
            tick += 1

    def stop(self, flush_timeout_s: float = 30.0) -> int:
        """Stop producing; returns how many records were still unacknowledged at the deadline."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        return self._producer.flush(flush_timeout_s)



def job_on_fresh_topics(bootstrap: str, tmp_path: Path, prefix: str, partitions: tuple[int, int, int] = (1, 1, 1),
                        **config) -> tuple[Path, dict[str, str]]:
    """Events, alerts and dead-letter topics named after the test (``partitions`` each), and an
    `epochwatch run` config for them (write_job_config's keyword options in ``config``)."""
    from streaming.tools.embedded import create_topics

    suffix = tmp_path.name[-10:]
    topics = {"events": f"{prefix}-ev-{suffix}", "alerts": f"{prefix}-al-{suffix}", "dlq": f"{prefix}-dlq-{suffix}"}
    create_topics(bootstrap, {topics[name]: count for name, count in zip(("events", "alerts", "dlq"), partitions)})
    path = write_job_config(tmp_path / "epochwatch.yaml", bootstrap=bootstrap, checkpoint=tmp_path / "checkpoint",
                            **topics, **config)
    return path, topics


def live_settings(bootstrap: str, tmp_path: Path, *, heartbeat_timeout_ms: int = 3000, **overrides):
    """Settings of an in-process live job (processing time) on fresh topics of ``bootstrap``."""
    import dataclasses

    from streaming import config

    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": bootstrap, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"ev-{suffix}", "kafka.topics.alerts": f"al-{suffix}",
        "kafka.topics.dlq": f"dlq-{suffix}",
        "rules.controller.heartbeat.timeout.ms": heartbeat_timeout_ms, "rules.broker.heartbeat.interval.ms": 250,
        "rules.heartbeat.timeout.pending.ms": 600, "sinks.metrics.port": 0, **overrides})
    return dataclasses.replace(settings, checkpoint_location=str(tmp_path / "checkpoint"),
                               trigger_interval="500 milliseconds")


def job_topics(settings) -> dict[str, int]:
    k = settings.kafka
    return {k.events_topic: 2, k.alerts_topic: 1, k.dlq_topic: 1}


def with_fail_on_data_loss(settings, fail_on_data_loss: bool):
    """The settings with kafka.failOnDataLoss set, for the job's own Kafka source."""
    import dataclasses

    kafka = dataclasses.replace(settings.kafka, fail_on_data_loss=str(fail_on_data_loss).lower())
    return dataclasses.replace(settings, kafka=kafka)


def progresses(query) -> list[dict]:
    import json

    return [json.loads(p.json) for p in query.recentProgress or []]


def progress_after(query, batch_id: int, with_rows: bool = True) -> dict | None:
    """The first progress of a batch after ``batch_id`` (that read rows, if ``with_rows``)."""
    return next((p for p in progresses(query)
                 if p["batchId"] > batch_id and (p["numInputRows"] > 0 or not with_rows)), None)


def source_end(progress: dict) -> dict[str, int]:
    """Partition -> end offset of the (single) source in one progress (topic ids left out)."""
    import json

    from udfs.offsets import parse_source_offset

    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return {str(p): o for (_, p), o in parse_source_offset(end or {})[0].items()}


def last_batch_id(query) -> int:
    progress = query.lastProgress
    return -1 if progress is None else progress["batchId"]


def firing(memory, alertname: str, broker_id: int | None = None, status: str = "firing") -> list[dict]:
    return [a for a in memory.all("alerts") if a["alertname"] == alertname and a["status"] == status
            and (broker_id is None or a["labels"].get("broker_id") == str(broker_id))]
