"""streaming.sinks.status: micro-batches in, the status view out, on a clock the test moves.

The cluster cases are a table, Burrow style: each says why its expectation is right."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from streaming.config import RuleSettings
from streaming.engine.local import LocalDetector
from streaming.sinks.base import OutputBatch
from streaming.sinks.status import STALLED_AFTER_MS, StatusBoard
from streaming.tools.simulate import run_scenario
from tests.support.alerts import T0, rec

GRACE_MS = 30_000


def row(broker, state="ACTIVE", since=T0, reason="", epoch=10, cluster="c1"):
    """A broker status row as streaming.rules.brokers reports it."""
    return {"cluster_id": cluster, "broker_id": broker, "state": state, "state_since_ms": since,
            "inactive_reason": reason, "incarnation_id": 1, "metadata_epoch": epoch, "metadata_epoch_lag": 0,
            "restarts": 0}


def epoch(value, cluster="c1"):
    return {"cluster_id": cluster, "shard": 0, "kind": "cluster", "metadata_epoch": value}


def clients(shard, stale=(), overdue=(), cluster="c1"):
    return {"cluster_id": cluster, "shard": shard, "kind": "clients", "stale_clients": len(stale),
            "overdue_clients": len(overdue), "stale_examples": sorted(stale)[:3],
            "overdue_examples": sorted(overdue)[:3]}


def batch(alerts=(), status=(), summaries=()):
    return OutputBatch(0, alerts=list(alerts), broker_status=list(status), summaries=list(summaries))


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self) -> int:
        return self.now


def board_after(steps, now):
    """A board that took ``steps`` [(clock ms, batch)], viewed at ``now``."""
    clock = Clock()
    board = StatusBoard(clock, lag_grace_ms=GRACE_MS)
    for at, b in steps:
        clock.now = at
        board.write(b)
    clock.now = now
    return board


@dataclass
class Case:
    why: str
    steps: list
    now: int
    expect: dict = field(default_factory=dict)   # cluster view key -> exact value


CASES = [
    Case("1: a warning incident firing makes the cluster WARN, its age is the clock minus starts_at",
         [(T0 + 1000, batch([rec("a", starts=T0)]))], T0 + 90_000,
         {"status": "WARN", "incidents_firing": {"total": 1, "critical": 0, "warning": 1},
          "incidents": [{"alertname": "BrokerHeartbeatTimeout", "severity": "warning",
                         "labels": {"alertname": "BrokerHeartbeatTimeout", "cluster": "c1", "severity": "warning",
                                    "broker_id": "1"},
                         "starts_at": "2023-11-14T22:13:20.000Z", "age_s": 90.0, "fingerprint": "a", "summary": "s"}]}),
    Case("2: a critical incident makes it ERR",
         [(T0, batch([rec("old", starts=T0), rec("new", severity="critical", alertname="BrokerMetadataLag",
                                                 starts=T0 + 50_000)]))], T0 + 60_000,
         {"status": "ERR", "incidents_firing": {"total": 2, "critical": 1, "warning": 1}}),
    Case("3: a resolved incident is gone, and a replay of its firing record does not bring it back",
         [(T0, batch([rec("a")], [row(1)])), (T0 + 5000, batch([rec("a", status="resolved", ends=T0 + 4000)])),
          (T0 + 6000, batch([rec("a")]))], T0 + 7000,
         {"status": "OK", "incidents_firing": {"total": 0, "critical": 0, "warning": 0}, "incidents": []}),
    Case("4: an info alert is a one-shot notice, never an incident firing",
         [(T0, batch([rec("r", severity="info", alertname="BrokerRestarted")], [row(1)]))], T0 + 1000,
         {"status": "OK", "incidents": []}),
    Case("5: an INACTIVE broker is fenced, with the rules' reason and how long by the clock",
         [(T0, batch(status=[row(1), row(2, "INACTIVE", since=T0 - 20_000, reason="timeout")],
                     summaries=[epoch(10)]))], T0 + 10_000,
         {"status": "OK", "brokers": {"total": 2, "by_state": {"ACTIVE": 1, "INACTIVE": 1},
                                      "fenced": [{"broker_id": 2, "reason": "timeout",
                                                  "since": "2023-11-14T22:13:00.000Z", "for_s": 30.0,
                                                  "metadata_epoch": 10, "lag": 0}],
                                      "stopping": [], "lagging": []}}),
    Case("6: a STOPPING broker is listed as stopping (a controlled shutdown in progress)",
         [(T0, batch(status=[row(3, "STOPPING", since=T0)]))], T0 + 4000,
         {"brokers": {"total": 1, "by_state": {"STOPPING": 1}, "fenced": [],
                      "stopping": [{"broker_id": 3, "since": "2023-11-14T22:13:20.000Z", "for_s": 4.0}],
                      "lagging": []}}),
    Case("7: a broker behind the cluster's epoch for less than the lag grace is not lagging (brokers apply "
         "a new epoch a moment after the controller writes it)",
         [(T0, batch(status=[row(1, epoch=9)], summaries=[epoch(10)]))], T0 + GRACE_MS - 1,
         {"brokers": {"total": 1, "by_state": {"ACTIVE": 1}, "fenced": [], "stopping": [], "lagging": []}}),
    Case("8: behind for the grace, it is lagging; its lag counts against the cluster's newest epoch, which a "
         "silent broker's own row never sees",
         [(T0, batch(status=[row(1, epoch=9)], summaries=[epoch(10)])),
          (T0 + 20_000, batch(summaries=[epoch(14)]))], T0 + GRACE_MS,
         {"brokers": {"total": 1, "by_state": {"ACTIVE": 1}, "fenced": [], "stopping": [],
                      "lagging": [{"broker_id": 1, "metadata_epoch": 9, "lag": 5, "for_s": 30.0}]}}),
    Case("9: a broker that caught up is not lagging any more",
         [(T0, batch(status=[row(1, epoch=9)], summaries=[epoch(10)])),
          (T0 + 40_000, batch(status=[row(1, epoch=10)], summaries=[epoch(10)]))], T0 + 50_000,
         {"brokers": {"total": 1, "by_state": {"ACTIVE": 1}, "fenced": [], "stopping": [], "lagging": []}}),
    Case("10: client counts add up over the shards, each shard's latest summary counts, the examples merge",
         [(T0, batch(summaries=[clients(0, stale=["c-9", "c-2"]), clients(1, stale=["c-5"], overdue=["c-7"])])),
          (T0 + 1000, batch(summaries=[clients(0, stale=["c-2"])]))], T0 + 2000,
         {"status": "OK", "clients": {"stale": 2, "rebootstrap_overdue": 1, "stale_examples": ["c-2", "c-5"],
                                      "overdue_examples": ["c-7"]}}),
    Case("11: expired brokers leave the view (state.entity.expiry.ms); the others stay",
         [(T0, batch(status=[row(1), row(2)], summaries=[epoch(10)])),
          (T0 + 1000, batch(summaries=[{"cluster_id": "c1", "shard": 0, "kind": "expired", "broker_ids": [2],
                                        "fleet_empty": False, "at_ms": T0}]))], T0 + 2000,
         {"metadata_epoch": 10, "brokers": {"total": 1, "by_state": {"ACTIVE": 1}, "fenced": [], "stopping": [],
                                            "lagging": []}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why.split(":")[0] for c in CASES])
def test_cluster_view(case):
    view = board_after(case.steps, case.now).cluster("c1")
    assert view is not None, case.why
    assert {k: view[k] for k in case.expect} == case.expect, case.why


def test_critical_incidents_come_first_then_the_oldest():
    board = board_after([(T0, batch([rec("w-old", starts=T0), rec("c-new", severity="critical", starts=T0 + 9000),
                                     rec("w-new", starts=T0 + 5000)]))], T0 + 10_000)
    assert [i["fingerprint"] for i in board.cluster("c1")["incidents"]] == ["c-new", "w-old", "w-new"]


def test_a_reset_cluster_is_forgotten_and_a_cluster_never_heard_of_is_unknown():
    """epochwatch reset-cluster: the batch that reaches the reset carries the resolutions of its open
    incidents and a reset summary; the cluster then has nothing left to show."""
    steps = [(T0, batch([rec("a")], [row(1)], [epoch(10), clients(0, stale=["c-1"])])),
             (T0 + 1000, batch([rec("a", status="resolved", ends=T0 + 1000)], summaries=[
                 {"cluster_id": "c1", "kind": "reset", "key_kind": "brokers", "shard": 0, "at_ms": T0 + 1000}]))]
    board = board_after(steps, T0 + 2000)
    assert board.cluster("c1") is None and board.clusters() == []
    assert board.cluster("never") is None


def test_the_last_expired_broker_takes_the_clusters_epoch_along():
    steps = [(T0, batch(status=[row(1)], summaries=[epoch(10)])),
             (T0 + 1000, batch(summaries=[{"cluster_id": "c1", "shard": 0, "kind": "expired", "broker_ids": [1],
                                           "fleet_empty": True, "at_ms": T0}]))]
    assert board_after(steps, T0 + 2000).clusters() == []


def test_seeded_incidents_show_after_a_restart_and_resolved_ones_do_not():
    """After a restart the alerts topic's latest records say what still fires: the view shows it
    before the first micro-batch ends."""
    board = StatusBoard(Clock(T0 + 60_000))
    board.seed([rec("a", starts=T0), rec("b", status="resolved", ends=T0 + 1)])
    assert [i["fingerprint"] for i in board.cluster("c1")["incidents"]] == ["a"]
    board.write(batch([rec("b")]))   # the replayed firing record of what the history says resolved
    assert [i["fingerprint"] for i in board.cluster("c1")["incidents"]] == ["a"]


def test_an_incident_list_is_capped_but_every_incident_is_counted():
    from streaming.sinks.status import INCIDENTS_SHOWN

    board = board_after([(T0, batch([rec(f"fp{i}", starts=T0 + i) for i in range(INCIDENTS_SHOWN + 5)]))], T0)
    view = board.cluster("c1")
    assert len(view["incidents"]) == INCIDENTS_SHOWN and view["incidents_firing"]["total"] == INCIDENTS_SHOWN + 5
    assert view["incidents"][0]["fingerprint"] == "fp0"   # the oldest first


PROGRESS = {"name": "epochwatch", "batchId": 7, "numInputRows": 4, "inputRowsPerSecond": 2.0,
            "processedRowsPerSecond": 4.0, "durationMs": {"triggerExecution": 850},
            "observedMetrics": {"epochwatch_input": {"records": 400}},
            "sources": [{"latestOffset": '{"ev": {"0": 130, "1": 70}}', "endOffset": '{"ev": {"0": 100, "1": 70}}'}],
            "stateOperators": [{"numRowsTotal": 12}]}


def test_the_job_section_follows_its_progress_and_stalls_like_epochwatch_stalled():
    """Why STALLED after 2 min: deploy/prometheus's EpochwatchStalled pages then; the view says the
    same, so what it shows of the clusters is known to be old."""
    clock = Clock()
    board = StatusBoard(clock)
    assert board.overview()["job"]["status"] == "STARTING" and board.overview()["status"] == "WARN"
    board.observe_progress(PROGRESS)
    job = board.overview()["job"]
    assert {k: job[k] for k in ("status", "batch_id", "input_records", "input_records_per_second",
                                "processed_records_per_second", "batch_duration_ms", "source_lag_records",
                                "state_rows", "last_progress_age_s")} == {
        "status": "RUNNING", "batch_id": 7, "input_records": 400, "input_records_per_second": 200.0,
        "processed_records_per_second": 400.0, "batch_duration_ms": 850, "source_lag_records": 30.0,
        "state_rows": 12, "last_progress_age_s": 0.0}
    assert board.overview()["status"] == "OK"
    clock.now += STALLED_AFTER_MS + 1
    assert board.overview()["job"]["status"] == "STALLED" and board.overview()["status"] == "ERR"
    board.observe_idle()   # an idle query is alive
    assert board.overview()["job"]["status"] == "RUNNING"
    board.job_stopped("boom")
    assert {k: board.overview()["job"][k] for k in ("status", "error")} == {"status": "STOPPED", "error": "boom"}


def test_the_overview_is_the_worst_of_the_clusters_and_the_job():
    clock = Clock()
    board = StatusBoard(clock)
    board.observe_progress(PROGRESS)
    board.write(batch([rec("a", severity="critical", alertname="BrokerMetadataLag")],
                      [row(1), row(2, cluster="c2"), row(3, "INACTIVE", reason="timeout", cluster="c2")]))
    overview = board.overview()
    assert overview["status"] == "ERR"
    assert [(c["cluster"], c["status"], c["brokers"]["fenced"], c["incidents_firing"]["total"])
            for c in overview["clusters"]] == [("c1", "ERR", 0, 1), ("c2", "OK", 1, 0)]


def test_the_board_takes_the_rules_own_output():
    """The keys the board reads are the ones the engine writes: a scripted incident run through the
    single-process detector shows its broker fenced and its incident firing."""
    result = run_scenario("broker_not_returned", seed=1)
    rules: RuleSettings = result.truth.rule_settings()
    clock = Clock()
    board, detector = StatusBoard(clock, lag_grace_ms=rules.metadata_lag_grace_ms), LocalDetector(rules)
    for i in range(0, len(result.events), 1000):
        chunk = result.events[i:i + 1000]
        out = OutputBatch(i)
        for step in detector.feed(chunk):
            out.alerts += step.alerts
            out.broker_status += step.status
            out.summaries += step.summaries
        clock.now = chunk[-1]["event_time"]
        board.write(out)
    view = board.cluster(result.truth.cluster_id)
    (expected,) = result.truth.expected
    broker = int(expected.labels["broker_id"])
    assert [(i["alertname"], i["labels"]["broker_id"]) for i in view["incidents"]] == [
        ("BrokerNotReturned", str(broker))]
    assert [f["broker_id"] for f in view["brokers"]["fenced"]] == [broker]
    assert view["brokers"]["total"] == 6 and view["metadata_epoch"] is not None
    assert view["clients"]["stale"] == 0
