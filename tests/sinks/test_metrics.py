"""streaming.sinks.metrics: scrape the registry's text after each call, as Prometheus would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.sinks.metrics import Metrics, input_records, source_lag
from streaming.spark.packs import INPUT_METRIC
from tests.support.metrics import scrape

CONTRACT = {  # docs/CONTRACTS.md: metric -> (type, labels)
    "epochwatch_broker_state": ("gauge", {"kafka_cluster", "broker_id", "state"}),
    "epochwatch_broker_incarnation": ("gauge", {"kafka_cluster", "broker_id"}),
    "epochwatch_broker_restarts_total": ("counter", {"kafka_cluster", "broker_id"}),
    "epochwatch_broker_metadata_epoch": ("gauge", {"kafka_cluster", "broker_id"}),
    "epochwatch_broker_metadata_epoch_lag": ("gauge", {"kafka_cluster", "broker_id"}),
    "epochwatch_cluster_metadata_epoch": ("gauge", {"kafka_cluster"}),
    "epochwatch_clients_stale_metadata": ("gauge", {"kafka_cluster"}),
    "epochwatch_clients_rebootstrap_overdue": ("gauge", {"kafka_cluster"}),
    "epochwatch_alerts_firing": ("gauge", {"kafka_cluster", "alertname", "severity"}),
    "epochwatch_alert_transitions_total": ("counter", {"alertname", "severity", "status"}),
    "epochwatch_dead_letters_total": ("counter", {"reason"}),
    "epochwatch_late_events_total": ("counter", set()),
    "epochwatch_input_events_total": ("counter", set()),
    "epochwatch_source_data_loss_total": ("counter", set()),
    "epochwatch_input_rows_per_second": ("gauge", set()),
    "epochwatch_processed_rows_per_second": ("gauge", set()),
    "epochwatch_batch_duration_seconds": ("histogram", set()),
    "epochwatch_state_rows": ("gauge", set()),
    "epochwatch_source_lag_records": ("gauge", set()),
    "epochwatch_last_batch_timestamp_seconds": ("gauge", set()),
    "epochwatch_alertmanager_backlog": ("gauge", {"alertmanager"}),
    "epochwatch_alertmanager_delivery_failures_total": ("counter", {"alertmanager"}),
    "epochwatch_up": ("gauge", set()),
}


def value(metrics: Metrics, name: str, **labels) -> float | None:
    return scrape(metrics).get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def firing_gauge(metrics: Metrics, alertname: str, severity: str, cluster: str = "c1") -> float | None:
    return value(metrics, "epochwatch_alerts_firing", alertname=alertname, kafka_cluster=cluster, severity=severity)


def populated() -> Metrics:
    m = Metrics()
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 1, "state": "ACTIVE", "incarnation_id": 7,
                              "metadata_epoch": 40, "metadata_epoch_lag": 2, "restarts": 1}])
    m.observe_cluster("c1", 42)
    m.observe_client_summary("c1", 0, 1, 1)
    m.observe_alerts([alert("f1")])
    m.observe_dead_letters({"bad_magic_byte": 1})
    m.observe_progress(PROGRESS)
    m.batch_finished(1000.0)
    m.set_alertmanager_backlog("http://am-1:9093", 0)
    m.count_alertmanager_failures("http://am-1:9093", 0)
    return m


def test_exactly_the_contract_names_types_and_labels():
    text = generate_latest(populated().registry).decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert types == {name: typ for name, (typ, _) in CONTRACT.items()}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        for s in family.samples:
            assert set(s.labels) - {"le"} == CONTRACT[name][1], s


def test_broker_state_is_one_hot_and_follows_the_latest_row():
    m = Metrics()
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 3, "state": "ACTIVE", "incarnation_id": 10,
                              "metadata_epoch": 5, "metadata_epoch_lag": 0, "restarts": 0}])
    states = {s: value(m, "epochwatch_broker_state", broker_id=3, kafka_cluster="c1", state=s)
              for s in ("INITIAL", "INACTIVE", "ACTIVE", "STOPPING")}
    assert states == {"INITIAL": 0, "INACTIVE": 0, "ACTIVE": 1, "STOPPING": 0}
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 3, "state": "STOPPING", "incarnation_id": 11,
                              "metadata_epoch": 9, "metadata_epoch_lag": 3, "restarts": 1}])
    assert value(m, "epochwatch_broker_state", broker_id=3, kafka_cluster="c1", state="ACTIVE") == 0
    assert value(m, "epochwatch_broker_state", broker_id=3, kafka_cluster="c1", state="STOPPING") == 1
    assert value(m, "epochwatch_broker_incarnation", broker_id=3, kafka_cluster="c1") == 11
    assert value(m, "epochwatch_broker_restarts_total", broker_id=3, kafka_cluster="c1") == 1
    assert value(m, "epochwatch_broker_metadata_epoch", broker_id=3, kafka_cluster="c1") == 9
    assert value(m, "epochwatch_broker_metadata_epoch_lag", broker_id=3, kafka_cluster="c1") == 3


def test_a_silent_brokers_epoch_lag_follows_the_cluster():
    """Why: a broker cut off from the controller sends nothing, so no new status row comes for it:
    its lag must grow with the cluster's newest epoch, not stay at what it was when last heard from
    (the status view counts the same way)."""
    m = Metrics()
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 3, "state": "ACTIVE", "metadata_epoch": 5,
                              "metadata_epoch_lag": 0},
                             {"cluster_id": "c1", "broker_id": 4, "state": "INITIAL", "metadata_epoch": -1,
                              "metadata_epoch_lag": 0}])
    m.observe_cluster("c1", 5)
    assert value(m, "epochwatch_broker_metadata_epoch_lag", broker_id=3, kafka_cluster="c1") == 0
    m.observe_cluster("c1", 9)
    assert value(m, "epochwatch_broker_metadata_epoch_lag", broker_id=3, kafka_cluster="c1") == 4
    # an epoch not known yet is behind on nothing
    assert value(m, "epochwatch_broker_metadata_epoch_lag", broker_id=4, kafka_cluster="c1") == 0
    m.forget_cluster("c1")
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 3, "state": "ACTIVE", "metadata_epoch": 5,
                              "metadata_epoch_lag": 1}])
    assert value(m, "epochwatch_broker_metadata_epoch_lag", broker_id=3, kafka_cluster="c1") == 1, \
        "the forgotten cluster's epoch is gone with it"


def test_a_partial_broker_row_keeps_the_other_fields():
    m = Metrics()
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 1, "state": "ACTIVE", "incarnation_id": 4}])
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 1, "state": "INACTIVE", "incarnation_id": None}])
    assert value(m, "epochwatch_broker_incarnation", broker_id=1, kafka_cluster="c1") == 4
    assert value(m, "epochwatch_broker_state", broker_id=1, kafka_cluster="c1", state="INACTIVE") == 1


def test_client_summary_is_summed_over_shards_per_cluster():
    m = Metrics()
    m.observe_client_summary("c1", 0, stale_clients=2, overdue_clients=1)
    m.observe_client_summary("c1", 1, stale_clients=3, overdue_clients=0)
    m.observe_client_summary("c2", 0, stale_clients=7, overdue_clients=7)
    assert value(m, "epochwatch_clients_stale_metadata", kafka_cluster="c1") == 5
    assert value(m, "epochwatch_clients_rebootstrap_overdue", kafka_cluster="c1") == 1
    m.observe_client_summary("c1", 0, stale_clients=0, overdue_clients=0)   # shard 0 recovered
    assert value(m, "epochwatch_clients_stale_metadata", kafka_cluster="c1") == 3
    assert value(m, "epochwatch_clients_stale_metadata", kafka_cluster="c2") == 7


def alert(fp, status="firing", severity="warning", name="BrokerHeartbeatTimeout", cluster="c1"):
    return {"fingerprint": fp, "status": status, "severity": severity, "alertname": name, "cluster_id": cluster,
            "labels": {"alertname": name, "cluster": cluster, "severity": severity}}


ALERT_CASES = [
    # (num, why, records, firing gauge value, firing transitions, resolved transitions)
    (1, "a firing record opens an incident", [alert("a")], 1, 1, 0),
    (2, "two incidents of the same rule and cluster add up", [alert("a"), alert("b")], 2, 2, 0),
    (3, "a replayed firing record (same fingerprint) counts once", [alert("a"), alert("a")], 1, 1, 0),
    (4, "the resolution closes it", [alert("a"), alert("a", "resolved")], 0, 1, 1),
    (5, "a replayed resolution counts once", [alert("a"), alert("a", "resolved"), alert("a", "resolved")], 0, 1, 1),
    (6, "a firing copy after the resolution cannot reopen it", [alert("a"), alert("a", "resolved"), alert("a")], 0, 1, 1),
    (7, "a resolution of an incident opened before a restart counts, the gauge never goes negative",
     [alert("z", "resolved")], 0, 0, 1),
]


@pytest.mark.parametrize("num, why, records, firing, opened, closed", ALERT_CASES)
def test_alert_transitions_and_firing_gauge(num, why, records, firing, opened, closed):
    m = Metrics()
    for r in records:           # one call per record: state must carry across batches
        m.observe_alerts([r])
    gauge = firing_gauge(m, "BrokerHeartbeatTimeout", "warning")
    assert (gauge or 0) == firing, f"case {num}: {why}"
    t = "epochwatch_alert_transitions_total"
    got = [value(m, t, alertname="BrokerHeartbeatTimeout", severity="warning", status=s) or 0
           for s in ("firing", "resolved")]
    assert got == [opened, closed], f"case {num}: {why}"


def test_info_alerts_count_as_transitions_but_never_stay_firing():
    m = Metrics()
    m.observe_alerts([alert("i", severity="info", name="BrokerRestarted")])
    assert value(m, "epochwatch_alert_transitions_total", alertname="BrokerRestarted", severity="info",
                 status="firing") == 1
    assert firing_gauge(m, "BrokerRestarted", "info") is None


def test_seed_alerts_restores_the_gauge_without_counting_transitions():
    m = Metrics()
    m.seed_alerts([alert("a"), alert("b", "resolved"), alert("c", severity="critical", name="ClusterSilent")])
    assert firing_gauge(m, "BrokerHeartbeatTimeout", "warning") == 1
    assert firing_gauge(m, "ClusterSilent", "critical") == 1
    assert value(m, "epochwatch_alert_transitions_total", alertname="BrokerHeartbeatTimeout", severity="warning",
                 status="firing") is None
    m.observe_alerts([alert("b")])                   # replay of a resolved incident
    m.observe_alerts([alert("a", "resolved")])
    assert firing_gauge(m, "BrokerHeartbeatTimeout", "warning") == 0


PROGRESS = {
    "id": "q", "batchId": 7, "numInputRows": 1200, "inputRowsPerSecond": 600.0, "processedRowsPerSecond": 1500.5,
    "durationMs": {"triggerExecution": 800, "addBatch": 600},
    "stateOperators": [{"numRowsTotal": 300, "numRowsDroppedByWatermark": 4},
                       {"numRowsTotal": 50, "numRowsDroppedByWatermark": 0}],  # clock rows: not events
    "sources": [{"description": "KafkaV2[Subscribe[events]]",
                 "startOffset": {"events": {"0": 100, "1": 100}},
                 "endOffset": {"events": {"0": 700, "1": 700}},
                 "latestOffset": {"events": {"0": 1000, "1": 700}},
                 "metrics": {"avgOffsetsBehindLatest": "150.0", "maxOffsetsBehindLatest": "300"}}],
}


def test_observe_progress():
    m = Metrics()
    m.observe_progress(PROGRESS)
    m.observe_progress({**PROGRESS, "numInputRows": 0, "inputRowsPerSecond": "NaN",
                        "durationMs": {"triggerExecution": 2500}, "stateOperators": [{"numRowsTotal": 351}]})
    assert value(m, "epochwatch_input_events_total") == 1200
    assert value(m, "epochwatch_input_rows_per_second") == 0          # Spark's NaN for an empty batch
    assert value(m, "epochwatch_processed_rows_per_second") == 1500.5
    assert value(m, "epochwatch_batch_duration_seconds_count") == 2
    assert value(m, "epochwatch_batch_duration_seconds_sum") == pytest.approx(3.3)
    assert value(m, "epochwatch_batch_duration_seconds_bucket", le="1.0") == 1
    assert value(m, "epochwatch_state_rows") == 351
    assert value(m, "epochwatch_late_events_total") == 0  # Spark's late rows are clock rows, not events
    assert value(m, "epochwatch_source_lag_records") == 300


def test_input_is_counted_in_records_when_the_rows_are_packs():
    """Why: the job's input rows are packs of many records (streaming.spark.packs); on-call reads the
    rates in records, which the pipeline counts in an observed metric."""
    m = Metrics()
    packed = {**PROGRESS, "numInputRows": 40, "inputRowsPerSecond": 20.0, "processedRowsPerSecond": 50.0,
              "observedMetrics": {INPUT_METRIC: {"records": 12_000}}}
    assert input_records(packed) == (12_000, 6000.0, 15_000.0)
    m.observe_progress(packed)
    assert value(m, "epochwatch_input_events_total") == 12_000
    assert value(m, "epochwatch_input_rows_per_second") == 6000.0
    assert value(m, "epochwatch_processed_rows_per_second") == 15_000.0
    empty = {**packed, "numInputRows": 0, "observedMetrics": {INPUT_METRIC: {"records": None}}}
    assert input_records(empty) == (0, 0.0, 0.0)
    assert input_records(PROGRESS) == (1200, 600.0, 1500.5), "no observed metric: rows are records"


def test_late_events_come_from_the_engines_late_summaries_per_batch():
    """Why: packs are never dropped as late; the engine applies late events and says how many."""
    from streaming.sinks.base import OutputBatch

    m = Metrics()
    m.write(OutputBatch(7, summaries=[{"kind": "late", "key_kind": "brokers", "shard": 0, "events": 3},
                                      {"kind": "late", "key_kind": "clients", "shard": 5, "events": 2},
                                      {"kind": "cluster", "cluster_id": "c1", "metadata_epoch": 4}]))
    m.write(OutputBatch(8))
    assert value(m, "epochwatch_late_events_total") == 5
    assert (m.late_in_batch(7), m.late_in_batch(8), m.late_in_batch(9)) == (5, 0, 0)


LAG_CASES = [
    (1, "Kafka offsets as JSON text, two partitions behind",
     {"endOffset": '{"t":{"0":5,"1":7}}', "latestOffset": '{"t":{"0":9,"1":8}}'}, 5),
    (2, "a partition only in latestOffset (new partition) is not guessed", {"endOffset": {"t": {"0": 5}},
                                                                           "latestOffset": {"t": {"0": 5, "1": 9}}}, 0),
    (3, "end ahead of latest (latest read earlier) never counts negative",
     {"endOffset": {"p": [10, 20]}, "latestOffset": {"p": [8, 25]}}, 5),
    (4, "no latestOffset: fall back to the source's own offsetsBehindLatest metric",
     {"endOffset": {"t": {"0": 1}}, "metrics": {"maxOffsetsBehindLatest": "12"}}, 12),
    (5, "nothing comparable: unknown, the gauge keeps its last value", {"endOffset": "not json"}, None),
]


@pytest.mark.parametrize("num, why, source, expected", LAG_CASES)
def test_source_lag(num, why, source, expected):
    assert source_lag(source) == expected, f"case {num}: {why}"


def test_dead_letters_by_reason_accumulate():
    m = Metrics()
    m.observe_dead_letters({"bad_magic_byte": 2, "unknown_schema_id": 0})
    m.observe_dead_letters({"bad_magic_byte": 1, "not_avro": 3})
    assert value(m, "epochwatch_dead_letters_total", reason="bad_magic_byte") == 3
    assert value(m, "epochwatch_dead_letters_total", reason="not_avro") == 3
    assert value(m, "epochwatch_dead_letters_total", reason="unknown_schema_id") is None


def test_batch_finished_and_stopped():
    m = Metrics()
    assert value(m, "epochwatch_up") == 0
    m.batch_finished(1_700_000_000.5)
    assert value(m, "epochwatch_up") == 1
    assert value(m, "epochwatch_last_batch_timestamp_seconds") == 1_700_000_000.5
    m.mark_stopped()
    assert value(m, "epochwatch_up") == 0


def test_alertmanager_delivery_metrics_are_per_url_without_credentials():
    m = Metrics()
    m.set_alertmanager_backlog("http://am-1:9093", 3)
    m.count_alertmanager_failures("http://am-1:9093")
    m.count_alertmanager_failures("http://am-1:9093", 2)
    m.set_alertmanager_backlog("http://am-2:9093", 0)
    m.count_alertmanager_failures("https://pager:hunter2@am-3:9093")
    assert value(m, "epochwatch_alertmanager_backlog", alertmanager="http://am-1:9093") == 3
    assert value(m, "epochwatch_alertmanager_delivery_failures_total", alertmanager="http://am-1:9093") == 3
    assert value(m, "epochwatch_alertmanager_backlog", alertmanager="http://am-2:9093") == 0
    assert value(m, "epochwatch_alertmanager_delivery_failures_total", alertmanager="https://***@am-3:9093") == 1
    assert "hunter2" not in generate_latest(m.registry).decode()


def test_instances_do_not_share_state_or_the_global_registry():
    a, b = Metrics(), Metrics()
    a.batch_finished(5.0)
    assert value(b, "epochwatch_up") == 0


def test_serve_on_a_free_loopback_port_and_stop():
    import requests

    m = populated()
    port = m.serve(0)
    try:
        body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'epochwatch_broker_state{broker_id="1",kafka_cluster="c1",state="ACTIVE"} 1.0' in body
        with pytest.raises(RuntimeError, match="already served"):
            m.serve(0)
    finally:
        m.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_broker_state_given_as_kip343_number():
    m = Metrics()
    m.observe_broker_status([{"cluster_id": "c1", "broker_id": 1, "state": 3}])
    assert value(m, "epochwatch_broker_state", broker_id=1, kafka_cluster="c1", state="STOPPING") == 1


def test_write_takes_a_dispatcher_batch():
    from streaming.sinks.base import OutputBatch

    batch = OutputBatch(
        1,
        alerts=[alert("a")],
        broker_status=[{"cluster_id": "c1", "broker_id": 4, "state": "INACTIVE", "incarnation_id": 2,
                        "metadata_epoch": 9, "metadata_epoch_lag": 1, "restarts": 0}],
        summaries=[{"cluster_id": "c1", "kind": "cluster", "metadata_epoch": 10},
                   {"cluster_id": "c1", "kind": "clients", "shard": 3, "stale_clients": 2, "overdue_clients": 1}],
        dead_letters=[{"reason": "bad_magic_byte"}, {"reason": "bad_magic_byte"}, {"reason": "future_event_time"}],
    )
    m = Metrics()
    m.write(batch)
    assert firing_gauge(m, "BrokerHeartbeatTimeout", "warning") == 1
    assert value(m, "epochwatch_broker_state", broker_id=4, kafka_cluster="c1", state="INACTIVE") == 1
    assert value(m, "epochwatch_cluster_metadata_epoch", kafka_cluster="c1") == 10
    assert value(m, "epochwatch_clients_stale_metadata", kafka_cluster="c1") == 2
    assert value(m, "epochwatch_dead_letters_total", reason="bad_magic_byte") == 2
    assert value(m, "epochwatch_dead_letters_total", reason="future_event_time") == 1
    m.batch_finished(1.0)
    m.close()
    assert value(m, "epochwatch_up") == 0


def test_the_batch_line_says_what_was_refused_and_a_batch_of_nothing_else_is_an_error(caplog):
    """Why (issue #22): a job that turns every record into a dead letter (a producer on another
    encoding) detects nothing; its batch line said only how many events it read. It names the
    refusals by reason now, and such a batch is an ERROR (the job goes on: a producer's garbage
    must not stop it)."""
    import json as _json
    import logging

    from streaming.sinks.base import OutputBatch
    from streaming.spark.listeners import ProgressListener

    m, lines = Metrics(), []
    listener = ProgressListener(m, emit=lines.append)

    class Event:
        def __init__(self, batch_id, records):
            self.progress = type("P", (), {"json": _json.dumps({
                **PROGRESS, "batchId": batch_id, "numInputRows": 1,
                "observedMetrics": {INPUT_METRIC: {"records": records}}})})()

    m.write(OutputBatch(1, dead_letters=[{"reason": "bad_magic_byte"}, {"reason": "future_event_time"}]))
    with caplog.at_level(logging.ERROR, logger="epochwatch"):
        listener.onQueryProgress(Event(1, 5))
        assert not caplog.records
        m.write(OutputBatch(2, dead_letters=[{"reason": "bad_magic_byte"}] * 3))
        listener.onQueryProgress(Event(2, 3))
    assert lines[0].endswith("refused 2 (bad_magic_byte=1, future_event_time=1)")
    assert lines[1].endswith("refused 3 (bad_magic_byte=3)")
    assert "every one of the 3 records read was refused" in caplog.text
    assert m.refusals.total == 5 and m.records_read == 8
