"""One frozen settings object, loaded from YAML, passed down (never read globally).

YAML keys keep Kafka's dotted names where Kafka has one (``controller.heartbeat.timeout.ms``),
so a user can copy values from their broker / client configs. Every error names the key and
says how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from udfs.kafka_options import MAX_RAMP_UP_BATCHES
from udfs.redact import HIDDEN, is_secret, redact, redacted_repr


class ConfigError(ValueError):
    """A configuration problem: ``key`` is the dotted path, ``fix`` what to do."""

    def __init__(self, key: str, problem: str, fix: str):
        what = f"option '{key}'" if key.startswith("--") else f"config key '{key}'"   # --config: the file itself
        super().__init__(f"{what}: {problem}. Fix: {fix}")
        self.key, self.problem, self.fix = key, problem, fix


class ConfigErrors(ConfigError):
    """Every problem a config has, found in one pass (the first one's key, problem and fix too)."""

    def __init__(self, problems: list[ConfigError]):
        ValueError.__init__(self, f"{len(problems)} problems in the config:\n" + "\n".join(f"- {p}" for p in problems))
        self.key, self.problem, self.fix = problems[0].key, problems[0].problem, problems[0].fix
        self.problems = problems


def _raise_all(problems: list[ConfigError]) -> None:
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(problems)


def _alias(name: str) -> dict:
    return {"yaml": name}


def _source_option(name: str) -> dict:
    return {"yaml": name, "source_option": True}


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = field(default="127.0.0.1:9092", metadata=_alias("bootstrap.servers"))
    events_topic: str = field(default="epochwatch.events", metadata=_alias("topics.events"))
    alerts_topic: str = field(default="epochwatch.alerts", metadata=_alias("topics.alerts"))
    dlq_topic: str = field(default="epochwatch.dlq", metadata=_alias("topics.dlq"))
    encoding: str = field(default="confluent", metadata={**_alias("encoding"), "choices": ("confluent", "schemaless")})
    schema_registry_url: str | None = field(default=None, metadata=_alias("schema.registry.url"))
    starting_offsets: str = field(default="latest", metadata=_alias("startingOffsets"))
    # A backlog (restart, outage) is read in micro-batches this large: a bounded catch-up, and large
    # enough to amortize a batch's fixed cost (docs/operations.md, Sizing). null: no cap.
    max_offsets_per_trigger: int | None = field(default=1_000_000, metadata=_alias("maxOffsetsPerTrigger"))
    # A run's first batches take 1/8, 1/4, 1/2 of that cap: the first also carries the run's start-up
    # (~8 s on 2 cores) and every alert of a batch waits for its end (bench/HISTORY.md, session 31)
    ramp_up_batches: int = field(default=3, metadata=_alias("rampUpBatches"))
    fail_on_data_loss: str = field(default="true", metadata={**_alias("failOnDataLoss"), "choices": ("true", "false")})
    # Waiting out an unreachable broker, passed to the source under the same names when set (None:
    # the source's default, see udfs/kafka_source.py; brokerUnavailable.maxWaitMs None: forever).
    retry_interval_ms: int | None = field(default=None, metadata=_source_option("fetchOffset.retryIntervalMs"))
    request_timeout_ms: int | None = field(default=None, metadata=_source_option("fetchOffset.timeoutMs"))
    poll_timeout_ms: int | None = field(default=None, metadata=_source_option("kafkaConsumer.pollTimeoutMs"))
    broker_max_wait_ms: int | None = field(default=None, metadata=_source_option("brokerUnavailable.maxWaitMs"))
    # librdkafka settings passed through as-is (security.protocol, sasl.*, ssl.*, ...)
    client: Mapping[str, str] = field(default_factory=dict, metadata=_alias("client"))
    # The Schema Registry's clients (the source, the alerts sink, the alert history read), in
    # confluent_kafka's names: basic auth as USER:PASSWORD (give it as ${VAR}: never in the file),
    # and the CA that signed the registry's TLS certificate (unset: the system's CAs)
    schema_registry_credentials: str | None = field(default=None,
                                                    metadata=_alias("schema.registry.basic.auth.user.info"))
    schema_registry_ca_location: str | None = field(default=None, metadata=_alias("schema.registry.ssl.ca.location"))
    # A client certificate (PEM) and its unencrypted key, for a registry that asks for one (mTLS)
    schema_registry_certificate_location: str | None = field(
        default=None, metadata=_alias("schema.registry.ssl.certificate.location"))
    schema_registry_key_location: str | None = field(default=None, metadata=_alias("schema.registry.ssl.key.location"))

    def __post_init__(self):
        for f in fields(self):
            if f.metadata.get("source_option") and getattr(self, f.name) == 0:
                fix = ("leave it out to wait forever, or give the longest wait in milliseconds, e.g. 600000"
                       if f.name == "broker_max_wait_ms" else "leave it out for the default, or use a value above 0")
                raise ConfigError(f"kafka.{f.metadata['yaml']}", "0 is not allowed", fix)
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigError("kafka.maxOffsetsPerTrigger", f"{self.max_offsets_per_trigger} records per micro-batch",
                              "give at least 1 (e.g. 1000000), or null for no cap")
        if not 0 <= self.ramp_up_batches <= MAX_RAMP_UP_BATCHES:
            raise ConfigError("kafka.rampUpBatches", f"{self.ramp_up_batches} batches",
                              f"give 0 (the whole cap from the first batch) to {MAX_RAMP_UP_BATCHES}, e.g. 3")

    def __repr__(self) -> str:  # sasl.password, ssl.*, registry userinfo: never in a log line
        return redacted_repr(self)

    def retry_policy(self):
        """How the job's own Kafka clients (sinks, the alert history read) wait out an unreachable
        broker: the source's settings, so that one setting bounds every wait."""
        from udfs.kafka_retry import RetryPolicy

        default = RetryPolicy()
        return RetryPolicy(retry_interval_ms=self.retry_interval_ms or default.retry_interval_ms,
                           attempt_timeout_ms=self.request_timeout_ms or default.attempt_timeout_ms,
                           max_wait_ms=self.broker_max_wait_ms)

    def registry_conf(self) -> dict[str, str]:
        """The Schema Registry client's settings besides its URL."""
        conf = {"basic.auth.user.info": self.schema_registry_credentials,
                "ssl.ca.location": self.schema_registry_ca_location,
                "ssl.certificate.location": self.schema_registry_certificate_location,
                "ssl.key.location": self.schema_registry_key_location}
        return {name: value for name, value in conf.items() if value}

    def registry_catalog(self, topic: str):
        """Schema ids of ``topic``'s records from the Schema Registry (None without
        schema.registry.url): it waits for the registry as the job's clients wait for a broker."""
        if not self.schema_registry_url:
            return None
        from udfs.registry_catalog import RegistryCatalog

        return RegistryCatalog(self.schema_registry_url, topic, self.registry_conf(), retry=self.retry_policy())

    def source_options(self) -> dict[str, str]:
        """The set ones of the keys that are Kafka source options of the same name."""
        return {f.metadata["yaml"]: str(getattr(self, f.name)) for f in fields(self)
                if f.metadata.get("source_option") and getattr(self, f.name) is not None}


RUNBOOK_BASE_URL = "https://github.com/epochwatch/epochwatch/blob/main/docs/alerts.md"


@dataclass(frozen=True)
class RuleSettings:
    """Thresholds of the detection rules; defaults are Kafka's where Kafka has one."""

    controller_heartbeat_timeout_ms: int = field(default=9000, metadata=_alias("controller.heartbeat.timeout.ms"))
    broker_heartbeat_interval_ms: int = field(default=2000, metadata=_alias("broker.heartbeat.interval.ms"))
    heartbeat_timeout_pending_ms: int = field(default=3000, metadata=_alias("heartbeat.timeout.pending.ms"))
    stopping_grace_ms: int = field(default=300_000, metadata=_alias("broker.stopping.grace.ms"))
    not_returned_grace_ms: int = field(default=600_000, metadata=_alias("broker.not.returned.grace.ms"))
    flapping_window_ms: int = field(default=600_000, metadata=_alias("broker.flapping.window.ms"))
    flapping_transitions: int = field(default=6, metadata=_alias("broker.flapping.transitions"))
    duplicate_min_heartbeats: int = field(default=3, metadata=_alias("broker.duplicate.min.heartbeats"))
    metadata_lag_grace_ms: int = field(default=30_000, metadata=_alias("metadata.lag.grace.ms"))
    metadata_max_age_ms: int = field(default=300_000, metadata=_alias("metadata.max.age.ms"))
    rebootstrap_trigger_ms: int = field(default=300_000, metadata=_alias("metadata.recovery.rebootstrap.trigger.ms"))
    connection_setup_timeout_ms: int = field(default=10_000, metadata=_alias("socket.connection.setup.timeout.ms"))
    connection_setup_timeout_max_ms: int = field(default=30_000, metadata=_alias("socket.connection.setup.timeout.max.ms"))
    storm_window_ms: int = field(default=60_000, metadata=_alias("connection.storm.window.ms"))
    storm_min_timeouts: int = field(default=20, metadata=_alias("connection.storm.min.timeouts"))
    storm_min_clients: int = field(default=5, metadata=_alias("connection.storm.min.clients"))
    stale_incident_quiet_ms: int = field(default=60_000, metadata=_alias("stale.metadata.quiet.ms"))
    entity_expiry_ms: int = field(default=3_600_000, metadata=_alias("state.entity.expiry.ms"))
    allowed_lateness_ms: int = field(default=2000, metadata=_alias("event.allowed.lateness.ms"))
    max_future_ms: int = field(default=300_000, metadata=_alias("event.max.future.ms"))
    # What no real cluster sends (streaming.spark.validity): refused as dead letters before any state.
    # Kafka's default log.retention.ms: an older record cannot be in the events topic
    max_past_ms: int = field(default=604_800_000, metadata=_alias("event.max.past.ms"))
    # KRaft broker epochs and metadata epochs are metadata log offsets: 2^53 is centuries away
    max_epoch: int = field(default=2**53, metadata=_alias("event.max.epoch"))
    # a broker away for a month comes back some million offsets on; 2^40 is years of records
    max_epoch_jump: int = field(default=2**40, metadata=_alias("event.max.epoch.jump"))
    # a controller epoch grows by one per election
    max_controller_epoch_jump: int = field(default=100_000, metadata=_alias("event.max.controller.epoch.jump"))
    # Every key that gets events costs a stateful task a few ms a micro-batch whatever it holds, so
    # a cluster's clients and groups are split no further than its work needs: about one shard per
    # state partition (figures: bench/RESULTS.md, Live latency and silence).
    client_shards: int = field(default=2, metadata=_alias("state.client.shards"))
    # How many entities one cluster may hold in state (streaming.rules.records.over_capacity): a
    # producer inventing ids (a bug, a forgery) fills dead letters, not the state store. Clients
    # and commit partitions are capped per shard, at the cluster's cap over the shards.
    max_brokers: int = field(default=10_000, metadata=_alias("state.max.brokers.per.cluster"))
    max_nodes: int = field(default=10_000, metadata=_alias("state.max.nodes.per.cluster"))
    max_clients: int = field(default=1_000_000, metadata=_alias("state.max.clients.per.cluster"))
    max_commit_partitions: int = field(default=1_000_000, metadata=_alias("state.max.commit.partitions.per.cluster"))
    # and how many clusters one job may hold (streaming.spark.cluster_gate): a bound against invented
    # cluster ids; a job's batch time grows with its clusters' state keys, so more clusters belong
    # in more jobs (figures: bench/RESULTS.md, Many clusters: 1 against 1,000)
    max_clusters: int = field(default=10_000, metadata=_alias("state.max.clusters"))
    # The one switch of streaming.fastpath: off, every event goes through the rules one by one and
    # every entity is evaluated each time (slower, the same alerts: the equivalence tests flip it);
    # for telling a fast path's defect from a rule's
    fast_paths: str = field(default="on", metadata={**_alias("fast.paths"), "choices": ("off", "on")})
    # Where on-call reads the runbooks: the page of docs/alerts.md (a fork, an internal mirror, a
    # wiki copy); every alert's runbook_url is <this>#<alertname in lower case>. A rules setting,
    # not a sink's: the link is part of the alert record itself (alerts topic, Alertmanager, console).
    runbook_base_url: str = field(default=RUNBOOK_BASE_URL, metadata=_alias("runbook.base.url"))

    # --- How per-client alerts reach Alertmanager (streaming.rules.rollup, on the driver) ---------
    # per_broker: one alert per cluster, alert name and broker (per cluster for an alert without a
    # broker) carrying the client count and examples; per_cluster: one per cluster and alert name;
    # per_client: one per client, up to client.alerts.max.per.cluster, the rest rolled up per broker
    client_alerts: str = field(default="per_broker", metadata={
        **_alias("client.alerts"), "choices": ("per_client", "per_broker", "per_cluster")})
    client_alerts_examples: int = field(default=5, metadata=_alias("client.alerts.examples"))
    client_alerts_max_per_cluster: int = field(default=20, metadata=_alias("client.alerts.max.per.cluster"))

    @property
    def fast_paths_on(self) -> bool:
        return self.fast_paths == "on"


# --- sinks.labels: how alerts are labelled where they leave the job -------------------------------

# Prometheus' label names (the classic, not the UTF-8, rule: what every Alertmanager accepts);
# names starting with __ are reserved for Prometheus' own use
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class AlertLabelSettings:
    """``sinks.labels``: the labels alerts carry in Alertmanager and in the alerts topic
    (streaming.sinks.labels applies them). Presentation only: detection, state and fingerprints
    stay keyed on the cluster id whatever these say."""

    # the label that carries the Kafka cluster id: not `cluster`, which Kubernetes / Thanos
    # stacks set to their own cluster's name (external labels, target labels)
    cluster_label: str = field(default="kafka_cluster", metadata=_alias("cluster.name"))
    # labels every alert carries, e.g. {team: kafka, env: prod}
    static: Mapping[str, str] = field(default_factory=dict, metadata=_alias("static"))
    # cluster id -> a name people know the cluster by, in the label <cluster.name>_alias
    aliases: Mapping[str, str] = field(default_factory=dict, metadata=_alias("aliases"))

    @property
    def alias_label(self) -> str:
        return f"{self.cluster_label}_alias"

    def problems(self) -> Iterator[ConfigError]:
        from streaming.rules.catalog import CLUSTER_LABEL, RULE_LABELS

        # `cluster` is the rules' name for the id, not a label they send: cluster.name may keep it
        # (the labels of earlier versions), a static label may take it (the Kubernetes cluster's name)
        taken = RULE_LABELS - {CLUSTER_LABEL}
        yield from _label_name_problems("sinks.labels.cluster.name", self.cluster_label, taken, "e.g. kafka_cluster")
        own = {self.cluster_label: "the label of the cluster id (sinks.labels.cluster.name)",
               self.alias_label: "the label of the cluster's alias (sinks.labels.aliases)"}
        for name, value in self.static.items():
            static_key = f"sinks.labels.static.{name}"
            name_ok = yield from _label_name_problems(static_key, name, taken, "e.g. team or env")
            if name_ok and name in own:
                yield ConfigError(static_key, f"{name} is {own[name]}",
                                  "remove it here, or rename sinks.labels.cluster.name")
            if not value.strip():
                yield ConfigError(static_key, "is empty (Alertmanager drops a label without a value)",
                                  "give it a value, or remove the line")
        seen: dict[str, str] = {}
        for cluster_id, alias in self.aliases.items():
            alias_key = f"sinks.labels.aliases.{cluster_id}"
            if not alias.strip():
                yield ConfigError(alias_key, "is empty",
                                  "give the cluster's name, e.g. payments-prod, or remove the line")
            elif alias in seen:
                yield ConfigError(alias_key, f"{alias!r} is the alias of cluster {seen[alias]} too",
                                  "give each cluster its own alias: on-call must tell them apart")
            seen.setdefault(alias, cluster_id)


def _label_name_problems(key: str, name: str, taken: frozenset, example: str):
    """Yields what is wrong with a label name; returns whether it is usable."""
    if not LABEL_NAME.fullmatch(name) or name.startswith("__"):
        yield ConfigError(key, f"{name!r} is not a Prometheus label name",
                          f"use letters, digits and _, not starting with a digit or __ ({example})")
        return False
    if name in taken:
        yield ConfigError(key, f"{name!r} is a label epochwatch's rules set ({', '.join(sorted(taken))})",
                          f"pick another name ({example})")
        return False
    return True


def _take_label_block(sinks: Any, problems: list[ConfigError]) -> dict:
    """Remove ``sinks.labels`` from the raw sinks section, nested (YAML) or dotted (``--set
    sinks.labels.static.team=kafka``), and return it with its mappings' entries checked: a value
    YAML read as null, a boolean or a structure is refused here, naming its key."""
    if not isinstance(sinks, dict):
        return {}
    block: dict[str, Any] = {}
    nested = sinks.pop("labels", None)
    if nested is not None and not isinstance(nested, Mapping):
        problems.append(ConfigError("sinks.labels", f"must be a mapping, not {nested!r}",
                                    "indent cluster.name / static / aliases under labels:"))
    elif nested:
        block.update(nested)
    for dotted in [k for k in sinks if str(k).startswith("labels.")]:
        rest, value = dotted[len("labels."):], sinks.pop(dotted)
        head, _, name = rest.partition(".")
        if head in ("static", "aliases") and name:
            known = block.get(head)
            block[head] = {**(known if isinstance(known, Mapping) else {}), name: value}
        else:
            block[rest] = value
    for head in ("static", "aliases"):
        entries = block.get(head)
        if not isinstance(entries, Mapping):
            continue   # None: an empty section; anything else: _build names the key
        kept = {}
        for name, value in entries.items():
            key = f"sinks.labels.{head}.{name}"
            if value is None:
                problems.append(ConfigError(key, "has no value", "give it one, e.g. team: kafka, or remove the line"))
            elif isinstance(value, bool):
                problems.append(ConfigError(key, f"YAML read {value} as a boolean", "quote the value, e.g. 'on'"))
            elif not isinstance(value, (str, int, float)):
                problems.append(ConfigError(key, f"{value!r} is not text", "write a plain string"))
            else:
                kept[str(name)] = value
        block[head] = kept
    return block


@dataclass(frozen=True)
class SinkSettings:
    """Where alerts and metrics go besides the Kafka alerts topic."""

    # Every URL gets every alert: the instances of an HA Alertmanager do not pass alerts on to each
    # other (Prometheus too sends to each). A YAML list, or comma-separated.
    alertmanager_url: str | None = field(default=None, metadata={**_alias("alertmanager.url"), "comma_list": True})
    alertmanager_resend_interval_s: int = field(default=60, metadata=_alias("alertmanager.resend.interval.s"))
    metrics_port: int = field(default=9464, metadata=_alias("metrics.port"))
    metrics_address: str = field(default="127.0.0.1", metadata=_alias("metrics.address"))
    console: str = field(default="off", metadata={**_alias("console"), "choices": ("off", "on")})
    labels: AlertLabelSettings = field(default_factory=AlertLabelSettings, metadata={"block": True})

    # --- Alertmanager delivery (streaming/sinks/alertmanager_http.py; checks: _alertmanager_problems) ---
    # Secrets: write ${ENV_NAME}, or give a file (*.file, read at every request: a rotated Kubernetes
    # Secret is used without a restart). Basic auth or a bearer token, not both.
    alertmanager_username: str | None = field(default=None, metadata=_alias("alertmanager.basic.auth.username"))
    alertmanager_password: str | None = field(default=None, metadata=_alias("alertmanager.basic.auth.password"))
    alertmanager_password_file: str | None = field(default=None,
                                                   metadata=_alias("alertmanager.basic.auth.password.file"))
    alertmanager_bearer_token: str | None = field(default=None, metadata=_alias("alertmanager.bearer.token"))
    alertmanager_bearer_token_file: str | None = field(default=None, metadata=_alias("alertmanager.bearer.token.file"))
    # https: verify Alertmanager against this CA (unset: the system's); a client certificate if it asks for one
    alertmanager_ca_file: str | None = field(default=None, metadata=_alias("alertmanager.tls.ca.file"))
    alertmanager_cert_file: str | None = field(default=None, metadata=_alias("alertmanager.tls.cert.file"))
    alertmanager_key_file: str | None = field(default=None, metadata=_alias("alertmanager.tls.key.file"))
    # each alert's generatorURL, the "source" link Alertmanager shows; unset: this job's /metrics
    external_url: str | None = field(default=None, metadata=_alias("external.url"))

    def alertmanager_urls(self) -> list[str]:
        return [u.strip() for u in (self.alertmanager_url or "").split(",") if u.strip()]

    def generator_url(self) -> str:
        return self.external_url or f"http://{self.metrics_address}:{self.metrics_port or 9464}/metrics"

    def __repr__(self) -> str:  # Alertmanager credentials, and URLs that may carry them
        return redacted_repr(self)


@dataclass(frozen=True)
class CollectSettings:
    """``epochwatch collect``: the cluster it watches and how (streaming/collect/)."""

    # the watched cluster; unset: kafka.bootstrap.servers (the cluster that carries the events)
    bootstrap_servers: str | None = field(default=None, metadata=_alias("bootstrap.servers"))
    # the Prometheus JMX exporters of the cluster's brokers and controllers, comma-separated
    exporter_urls: str = field(default="", metadata=_alias("exporter.urls"))
    interval_ms: int = field(default=2000, metadata=_alias("interval.ms"))
    request_timeout_ms: int = field(default=1500, metadata=_alias("request.timeout.ms"))
    # a JMX exporter renders every MBean on each scrape: 0.5-1 s for a broker, more under load
    exporter_timeout_ms: int = field(default=3000, metadata=_alias("exporter.timeout.ms"))
    # the client id of its probes, and the client_id of the events about what they were answered
    client_id: str = field(default="epochwatch-collector", metadata=_alias("probe.client.id"))
    # a broker whose applied metadata is older than this serves stale metadata (the controller
    # writes a record at least every metadata.max.idle.interval.ms, 500 ms by default)
    metadata_stale_after_ms: int = field(default=5000, metadata=_alias("metadata.stale.after.ms"))
    # the watched cluster's security settings, in librdkafka's names as under kafka.client
    client: Mapping[str, str] = field(default_factory=dict, metadata=_alias("client"))
    # the collector's own /metrics (streaming/collect/metrics.py); 0 = off
    metrics_port: int = field(default=9465, metadata=_alias("metrics.port"))
    metrics_address: str = field(default="127.0.0.1", metadata=_alias("metrics.address"))
    # "on": also read __consumer_offsets and send every group's commits (streaming/collect/commit_log.py)
    offset_commits: str = field(default="off", metadata={**_alias("offset.commits"), "choices": ("off", "on")})
    # the folder of Kafka's jars (kafka-tools among them) the commit log reader runs from; unset:
    # $EPOCHWATCH_KAFKA_LIB, else what `deploy/local/dev setup` fetched (.cache/kafka/<version>)
    kafka_libs: str | None = field(default=None, metadata=_alias("kafka.libs"))

    def urls(self) -> list[str]:
        return [u.strip() for u in self.exporter_urls.split(",") if u.strip()]

    def __repr__(self) -> str:  # sasl.password of the watched cluster, exporter URL userinfo
        return redacted_repr(self)


@dataclass(frozen=True)
class Settings:
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    rules: RuleSettings = field(default_factory=RuleSettings)
    sinks: SinkSettings = field(default_factory=SinkSettings)
    collect: CollectSettings = field(default_factory=CollectSettings)
    checkpoint_location: str = "/tmp/epochwatch/checkpoint"
    trigger_interval: str = "1 second"
    spark: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # every section's secrets hidden, whatever section holds them
        return redacted_repr(self)


_ENV_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


def _expand_env(value: Any, key: str) -> Any:
    """``${NAME}`` in a string is replaced by the environment variable (for secrets)."""
    if not isinstance(value, str):
        return value

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(key, f"refers to ${{{name}}} but that environment variable is not set",
                              f"export {name}=... before starting, or put the value in the file")
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def _flatten(mapping: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, Mapping) and k not in ("client", "spark"):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _coerce(section: str, f: dataclasses.Field, value: Any, problems: list[ConfigError]) -> Any:
    """The value as the field takes it; a mapping's unreadable entries go to ``problems`` (the rest
    is still checked), any other problem is raised."""
    key = f"{section}.{f.metadata.get('yaml', f.name)}"
    if isinstance(value, list) and f.metadata.get("comma_list"):
        value = ",".join(str(_expand_env(v, key)) for v in value)   # a YAML list: kept comma-separated
    else:
        value = _expand_env(value, key)
    typ = str(f.type)
    if typ.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value)
            elif value is None and "None" in typ:
                return None
            else:
                raise ConfigError(key, f"{value!r} is not a whole number", "write it as an integer, e.g. 9000")
        if value < 0:
            raise ConfigError(key, f"{value} is negative", "use a value >= 0")
        return value
    if typ.startswith("Mapping"):
        return _string_map(value, key, problems, "setting names", "indent one 'name: value' per line")
    if value is None and "None" in typ:
        return None
    if not isinstance(value, (str, int, float)):
        raise ConfigError(key, f"{value!r} is not text", "write a plain string")
    choices = f.metadata.get("choices")
    if isinstance(value, bool) and choices == ("off", "on"):
        value = "on" if value else "off"  # YAML 1.1 reads an unquoted on / off as a boolean
    value = str(value)
    if choices and value not in choices:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(choices)}", f"use one of {', '.join(choices)}")
    return value


def _string_map(value: Any, key: str, problems: list[ConfigError], names: str, fix: str) -> dict[str, str]:
    """A mapping of names to values as strings (``${VAR}`` expanded); None (every line commented
    out) is empty; what cannot be read goes to ``problems`` and the rest is still read."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(ConfigError(key, f"must be a mapping of {names} to values", fix))
        return {}
    out = {}
    for name, v in value.items():
        try:
            out[str(name)] = str(_expand_env(v, f"{key}.{name}"))
        except ConfigError as exc:
            problems.append(exc)
    return out


def _build(cls, section: str, raw: Mapping[str, Any], problems: list[ConfigError]):
    """The section's settings; every key's problem goes to ``problems`` (the defaults stand in)."""
    by_yaml = {f.metadata.get("yaml", f.name): f for f in fields(cls)}
    flat = {}
    for k, v in raw.items():
        if k in by_yaml or not isinstance(v, Mapping):
            flat[k] = v
        else:
            flat.update(_flatten(v, f"{k}."))
    kwargs = {}
    for k, v in flat.items():
        if k not in by_yaml:
            close = difflib.get_close_matches(k, list(by_yaml), n=1, cutoff=0.6)
            hint = f"did you mean '{section}.{close[0]}'?" if close else f"valid keys: {', '.join(sorted(by_yaml))}"
            problems.append(ConfigError(f"{section}.{k}", "is not a known setting", hint))
            continue
        f = by_yaml[k]
        try:
            kwargs[f.name] = _coerce(section, f, v, problems)
        except ConfigError as exc:
            problems.append(exc)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        problems.append(exc)
        return cls()


def validate(settings: Settings) -> Settings:
    """The settings, or every problem they have at once (ConfigErrors; one alone: ConfigError)."""
    _raise_all(list(_problems(settings)))
    return settings


def _problems(settings: Settings) -> Iterator[ConfigError]:
    r = settings.rules
    if r.controller_heartbeat_timeout_ms <= r.broker_heartbeat_interval_ms:
        yield ConfigError("rules.controller.heartbeat.timeout.ms",
                          f"{r.controller_heartbeat_timeout_ms} is not above broker.heartbeat.interval.ms={r.broker_heartbeat_interval_ms}",
                          "the timeout must cover several heartbeat intervals (Kafka: 9000 vs 2000)")
    if r.connection_setup_timeout_max_ms < r.connection_setup_timeout_ms:
        yield ConfigError("rules.socket.connection.setup.timeout.max.ms", "is below socket.connection.setup.timeout.ms",
                          "set the max at least as large as the base timeout (Kafka: 30000 vs 10000)")
    yield from _alertmanager_problems(settings.sinks)
    yield from settings.sinks.labels.problems()
    if not _is_http_url(r.runbook_base_url) or "#" in r.runbook_base_url:
        yield ConfigError("rules.runbook.base.url", f"{r.runbook_base_url!r} is not an http(s) URL without a #fragment",
                          f"give the URL of your copy of docs/alerts.md, e.g. {RUNBOOK_BASE_URL}")
    c = settings.collect
    for key, value in (("interval.ms", c.interval_ms), ("request.timeout.ms", c.request_timeout_ms),
                       ("exporter.timeout.ms", c.exporter_timeout_ms),
                       ("metadata.stale.after.ms", c.metadata_stale_after_ms)):
        if value <= 0:
            yield ConfigError(f"collect.{key}", f"{value} is not above 0", "leave it out for the default, or use e.g. 2000")
    from streaming.collect.probes import client_options

    collect_client_read = True
    try:
        client_options(c.client)  # a security setting the collector's client cannot use fails now, not later
    except ConfigError as exc:
        collect_client_read = False
        yield exc
    if c.offset_commits == "on":
        from streaming.collect.commit_log import kafka_libs, tools_jar

        libs = kafka_libs(c.kafka_libs)
        if tools_jar(libs) is None:
            yield ConfigError("collect.kafka.libs", f"{libs} holds no kafka-tools-*.jar (collect.offset.commits is on)",
                              "point it at a Kafka installation's libs folder (e.g. /opt/kafka/libs), run "
                              "`deploy/local/dev setup`, or set collect.offset.commits: off")
    for u in c.urls():
        if not u.startswith(("http://", "https://")):
            yield ConfigError("collect.exporter.urls", f"{u!r} is not an http(s) URL",
                              "list the exporters' URLs, comma-separated, e.g. http://broker-1:7071/metrics")
    if r.client_shards < 1:
        yield ConfigError("rules.state.client.shards", "must be at least 1",
                          "use the number of state partitions (spark.sql.shuffle.partitions), "
                          "or 1 for many small clusters")
    for key, value in (("state.max.brokers.per.cluster", r.max_brokers), ("state.max.nodes.per.cluster", r.max_nodes),
                       ("state.max.clients.per.cluster", r.max_clients),
                       ("state.max.commit.partitions.per.cluster", r.max_commit_partitions),
                       ("state.max.clusters", r.max_clusters)):
        if value < 1:
            yield ConfigError(f"rules.{key}", f"{value} would refuse every entity",
                              f"use a value above 0, or leave it out for the default ({_DEFAULT_RULES[key]})")
    for key, value in (("event.max.future.ms", r.max_future_ms), ("event.max.past.ms", r.max_past_ms),
                       ("event.max.epoch", r.max_epoch), ("event.max.epoch.jump", r.max_epoch_jump),
                       ("event.max.controller.epoch.jump", r.max_controller_epoch_jump)):
        if value < 1:
            yield ConfigError(f"rules.{key}", f"{value} would refuse every event",
                              f"use a value above 0, or leave it out for the default ({_DEFAULT_RULES[key]})")
    if r.max_past_ms <= r.allowed_lateness_ms:
        yield ConfigError("rules.event.max.past.ms", f"{r.max_past_ms} is not above event.allowed.lateness.ms",
                          "events within the allowed lateness are late, not implausible: use e.g. 604800000 (7 days)")
    if r.max_epoch_jump > r.max_epoch:
        yield ConfigError("rules.event.max.epoch.jump", f"{r.max_epoch_jump} is above event.max.epoch={r.max_epoch}",
                          "a jump cannot be larger than the largest epoch: use e.g. 1099511627776 (2^40)")
    for key, value in ((k, getattr(r, f)) for k, f in _POSITIVE_RULES.items()):
        if value < 1:
            yield ConfigError(f"rules.{key}", f"{value} is not above 0",
                              f"leave it out for the default ({_DEFAULT_RULES[key]}), or use a value above 0")
    if r.client_alerts_examples > MAX_CLIENT_EXAMPLES:
        yield ConfigError("rules.client.alerts.examples", f"{r.client_alerts_examples} clients in every roll-up's "
                          "annotations would make each alert as large as the volume the roll-up avoids",
                          f"use at most {MAX_CLIENT_EXAMPLES} (default 5); the client count covers the rest")
    if settings.sinks.alertmanager_resend_interval_s < 1:
        yield ConfigError("sinks.alertmanager.resend.interval.s", f"{settings.sinks.alertmanager_resend_interval_s} "
                          "is not above 0", "leave it out for the default (60), or use a value above 0")
    for key, port in (("sinks.metrics.port", settings.sinks.metrics_port), ("collect.metrics.port", c.metrics_port)):
        if port > 65535:
            yield ConfigError(key, f"{port} is not a TCP port", "use 1-65535 (0: off)")
    k = settings.kafka
    if not k.bootstrap_servers.strip():
        yield ConfigError("kafka.bootstrap.servers", "is empty",
                          "list the brokers of the events cluster, e.g. kafka-1:9092")
    if c.bootstrap_servers is not None and not c.bootstrap_servers.strip():
        yield ConfigError("collect.bootstrap.servers", "is empty",
                          "list the watched cluster's brokers, or leave it out to watch kafka.bootstrap.servers")
    from udfs.offsets import OffsetSpecError, StartingOffsets

    try:
        StartingOffsets.parse(k.starting_offsets)
    except OffsetSpecError as exc:
        yield ConfigError("kafka.startingOffsets", exc.problem, exc.fix)
    if not _DURATION.fullmatch(settings.trigger_interval.strip()):
        yield ConfigError("trigger_interval", f"{settings.trigger_interval!r} is not a duration",
                          "write a number and a unit, e.g. '1 second', '500 milliseconds', '2 minutes'")
    for section, client in (("kafka", k.client), ("collect", c.client if collect_client_read else {})):
        yield from _librdkafka_problems(section, client)
    yield from _registry_problems(k)


def _registry_problems(k: KafkaSettings) -> Iterator[ConfigError]:
    """What the Schema Registry client would refuse later (values of secrets never quoted)."""
    url, credentials, ca = k.schema_registry_url, k.schema_registry_credentials, k.schema_registry_ca_location
    client_cert = {"ssl.certificate.location": k.schema_registry_certificate_location,
                   "ssl.key.location": k.schema_registry_key_location}
    yield from _registry_client_cert_problems(client_cert)
    if not url:
        for key, value in (("basic.auth.user.info", credentials), ("ssl.ca.location", ca), *client_cert.items()):
            if value:
                yield ConfigError(f"kafka.schema.registry.{key}", "is set but kafka.schema.registry.url is not",
                                  "set kafka.schema.registry.url, or leave this out")
        return
    if not url.startswith(("http://", "https://")):
        yield ConfigError("kafka.schema.registry.url", f"{redact(url)!r} is not an http(s) URL",
                          "e.g. https://registry:8081")
    if k.encoding != "confluent":
        yield ConfigError("kafka.schema.registry.url",
                          f"only applies with kafka.encoding: confluent (it is {k.encoding})",
                          "set kafka.encoding: confluent, or leave the registry out")
    if credentials and ":" not in credentials:
        yield ConfigError("kafka.schema.registry.basic.auth.user.info", "is not USER:PASSWORD",
                          "give it as USER:PASSWORD, e.g. ${EPOCHWATCH_REGISTRY_AUTH} with the variable exported")
    if credentials and redact(url) != url:
        yield ConfigError("kafka.schema.registry.basic.auth.user.info", "is set and the URL carries credentials too",
                          "keep one: take the user info out of kafka.schema.registry.url")
    if ca and not Path(ca).exists():
        yield ConfigError("kafka.schema.registry.ssl.ca.location", f"{ca} does not exist",
                          "give the path of the CA certificate (PEM) that signed the registry's certificate")


def _registry_client_cert_problems(client_cert: Mapping[str, str | None]) -> Iterator[ConfigError]:
    """A client certificate for the registry: both files or neither, and both there."""
    key = "kafka.schema.registry."
    given = [name for name, path in client_cert.items() if path]
    if len(given) == 1:
        [missing] = set(client_cert) - set(given)
        yield ConfigError(f"{key}{missing}", f"is missing ({key}{given[0]} is set)",
                          "a client certificate needs both: ssl.certificate.location (PEM) and ssl.key.location")
    for name in given:
        if not Path(client_cert[name]).is_file():
            what = "client certificate (PEM)" if name == "ssl.certificate.location" else "client certificate's key (PEM)"
            yield ConfigError(f"{key}{name}", f"{client_cert[name]} is not a file",
                              f"give the path of the {what}, readable by the driver and the executors")


def _is_http_url(value: str) -> bool:
    return value.startswith(("http://", "https://")) and len(value.split("://", 1)[1]) > 0


def _alertmanager_problems(s: SinkSettings) -> Iterator[ConfigError]:
    key = "sinks.alertmanager."
    urls = s.alertmanager_urls()
    for url in urls:
        if not _is_http_url(url):
            yield ConfigError(f"{key}url", f"{redact(url)!r} is not an http(s) URL",
                              "e.g. http://127.0.0.1:9093; several: a YAML list or comma-separated")
    if len(set(urls)) < len(urls):
        yield ConfigError(f"{key}url", "lists a URL twice", "list each Alertmanager instance once")
    yield from _alertmanager_secret_file_problems(s)
    password = s.alertmanager_password is not None or s.alertmanager_password_file is not None
    token = s.alertmanager_bearer_token is not None or s.alertmanager_bearer_token_file is not None
    basic = s.alertmanager_username is not None or password
    if s.alertmanager_username is not None and not password:
        yield ConfigError(f"{key}basic.auth.password", "is missing (basic.auth.username is set)",
                          "set both, e.g. password: ${ALERTMANAGER_PASSWORD}, or password.file: a mounted secret")
    if password and s.alertmanager_username is None:
        given = "password.file" if s.alertmanager_password is None else "password"
        yield ConfigError(f"{key}basic.auth.username", f"is missing (basic.auth.{given} is set)",
                          "set both, e.g. username: ${ALERTMANAGER_USERNAME}")
    if basic and token:
        yield ConfigError(f"{key}bearer.token" + ("" if s.alertmanager_bearer_token is not None else ".file"),
                          "is set together with basic.auth.*",
                          "Alertmanager takes one kind of credentials: keep the one its proxy expects")
    if (basic or token) and any(redact(u) != u for u in urls):
        yield ConfigError(f"{key}url", "carries credentials (user:password@) while basic.auth / bearer.token are set",
                          "remove them from the URL")
    for name in ("ca", "cert", "key"):
        path = getattr(s, f"alertmanager_{name}_file")
        if path is not None and not Path(path).is_file():
            yield ConfigError(f"{key}tls.{name}.file", f"{path} is not a file",
                              "give the path of a PEM file readable by the driver (e.g. a mounted secret)")
    if (s.alertmanager_cert_file is None) != (s.alertmanager_key_file is None):
        yield ConfigError(f"{key}tls.{'key' if s.alertmanager_key_file is None else 'cert'}.file",
                          "is missing: a client certificate needs both tls.cert.file and tls.key.file", "set both")
    tls = [n for n in ("ca", "cert", "key") if getattr(s, f"alertmanager_{n}_file") is not None]
    if tls and urls and not any(u.startswith("https://") for u in urls):
        yield ConfigError(f"{key}tls.{tls[0]}.file", "is set but no sinks.alertmanager.url is https",
                          "use https:// URLs, or leave the tls.* keys out")
    if s.external_url is not None and not _is_http_url(s.external_url):
        yield ConfigError("sinks.external.url", f"{redact(s.external_url)!r} is not an http(s) URL",
                          "give the link to this job as people reach it, e.g. https://epochwatch.example.com/metrics")


def _alertmanager_secret_file_problems(s: SinkSettings) -> Iterator[ConfigError]:
    """A secret given as a file: not also inline, and readable now (it is read again at every request)."""
    key = "sinks.alertmanager."
    for inline, name in (("basic.auth.password", "password"), ("bearer.token", "bearer_token")):
        path = getattr(s, f"alertmanager_{name}_file")
        if path is None:
            continue
        if getattr(s, f"alertmanager_{name}") is not None:
            yield ConfigError(f"{key}{inline}.file", f"is set together with {inline}",
                              f"keep one: {inline}.file for a mounted secret, {inline} for ${{ENV_NAME}}")
        problem = _unreadable(path)
        if problem:
            yield ConfigError(f"{key}{inline}.file", f"{path} {problem}",
                              "give the path of a file the driver can read, holding only the secret "
                              "(e.g. a key of a Kubernetes Secret mounted as a volume)")


def _unreadable(path: str) -> str | None:
    """Why the file cannot serve as a secret, or None."""
    try:
        text = Path(path).read_text()
    except IsADirectoryError:
        return "is a directory"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    except UnicodeDecodeError:
        return "is not text"
    return "is empty" if not text.strip() else None


# Rules whose 0 means nothing useful (the pending period and the allowed lateness may be 0: none)
_POSITIVE_RULES = {"broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
                   "broker.flapping.window.ms": "flapping_window_ms",
                   "broker.flapping.transitions": "flapping_transitions",
                   "broker.duplicate.min.heartbeats": "duplicate_min_heartbeats",
                   "metadata.max.age.ms": "metadata_max_age_ms",
                   "metadata.recovery.rebootstrap.trigger.ms": "rebootstrap_trigger_ms",
                   "socket.connection.setup.timeout.ms": "connection_setup_timeout_ms",
                   "connection.storm.window.ms": "storm_window_ms",
                   "connection.storm.min.timeouts": "storm_min_timeouts",
                   "connection.storm.min.clients": "storm_min_clients",
                   "stale.metadata.quiet.ms": "stale_incident_quiet_ms",
                   "state.entity.expiry.ms": "entity_expiry_ms"}
# the example clients one roll-up alert lists (rules.client.alerts.examples)
MAX_CLIENT_EXAMPLES = 100
# what Spark's processing-time trigger takes
_DURATION = re.compile(r"\d+(\.\d+)?\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)", re.I)


def _librdkafka_problems(section: str, client: Mapping[str, str]) -> list[ConfigError]:
    """The settings under ``<section>.client`` that librdkafka itself refuses (an unknown name, a
    value it cannot take), asked of librdkafka, which every client of the job is made with: each
    alone when the whole is refused, so that the error names the key."""
    if not client or _librdkafka_refuses(client) is None:
        return []
    alone = [(name, text) for name in client if (text := _librdkafka_refuses({name: client[name]})) is not None]
    if not alone:   # only together: say what librdkafka said of the whole
        alone = [("", _librdkafka_refuses(client))]
    return [ConfigError(f"{section}.client" + (f".{name}" if name else ""), _hide_secrets(text, client),
                        "use librdkafka's names and values (its CONFIGURATION.md lists them)") for name, text in alone]


def _librdkafka_refuses(client: Mapping[str, str]) -> str | None:
    try:
        from confluent_kafka import KafkaException, Producer
    except ImportError:
        return None
    try:
        Producer({**client, "log_level": 0})   # no bootstrap.servers: nothing is contacted
    except KafkaException as exc:
        return exc.args[0].str().rstrip(".")
    return None


def _hide_secrets(text: str, client: Mapping[str, str]) -> str:
    """librdkafka quotes a value it refuses: never a secret's."""
    for name, value in client.items():
        if value and is_secret(name):
            text = text.replace(str(value), HIDDEN)
    return text


_DEFAULT_RULES = {f.metadata["yaml"]: f.default for f in fields(RuleSettings)}


def load(path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from a YAML file (or defaults) plus dotted overrides like ``kafka.bootstrap.servers``."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("--config", f"file {p} does not exist", "pass the path of a YAML config file")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("--config", f"{p} is not valid YAML ({exc})", "fix the YAML syntax at the position shown") from None
        if not isinstance(raw, dict):
            raise ConfigError("--config", f"{p} must hold a mapping at the top level", "start with 'kafka:' / 'rules:' sections")
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for dotted, value in (overrides or {}).items():
        section, _, rest = dotted.partition(".")
        raw.setdefault(section, {})
        if rest.startswith("client.") and section in ("kafka", "collect"):  # a librdkafka setting
            client = raw[section].setdefault("client", {}) or {}
            raw[section]["client"] = {**client, rest[len("client."):]: value}
        elif isinstance(raw[section], dict) and rest:
            raw[section][rest] = value
        else:
            raw[section] = value
    known = {"kafka", "rules", "sinks", "collect", "checkpoint_location", "trigger_interval", "spark"}
    problems: list[ConfigError] = [ConfigError(k, "is not a known section", f"use one of {', '.join(sorted(known))}")
                                   for k in raw if k not in known]
    top = {}
    for k in ("checkpoint_location", "trigger_interval"):
        if k in raw:
            try:
                top[k] = str(_expand_env(raw[k], k))
            except ConfigError as exc:
                problems.append(exc)
    spark_conf = _string_map(raw.get("spark"), "spark", problems, "Spark conf names",
                             "e.g. spark: {spark.sql.shuffle.partitions: 8}")
    label_block = _take_label_block(raw.get("sinks"), problems)
    sections = {name: _section(cls, name, raw.get(name, {}), problems)
                for name, cls in (("kafka", KafkaSettings), ("rules", RuleSettings), ("sinks", SinkSettings),
                                  ("collect", CollectSettings))}
    sections["sinks"] = dataclasses.replace(
        sections["sinks"], labels=_build(AlertLabelSettings, "sinks.labels", label_block, problems))
    settings = Settings(**sections, spark=spark_conf, **top)
    _raise_all(problems + list(_problems(settings)))
    return settings


def _section(cls, name: str, raw: Any, problems: list[ConfigError]):
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(ConfigError(name, f"must be a mapping of settings, not {raw!r}",
                                    f"indent 'key: value' lines under {name}:"))
        return cls()
    return _build(cls, name, raw, problems)
