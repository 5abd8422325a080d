"""epochwatch status against the job's real endpoint (streaming.sinks.endpoint on a free loopback
port): what is wrong comes first, the exit code says whether anything is, and a job that cannot
answer is one clear line and exit code 2."""

from __future__ import annotations

import json

import pytest

from streaming.commands import main
from streaming.commands.status import age_text
from streaming.sinks.base import OutputBatch
from streaming.sinks.metrics import Metrics
from streaming.sinks.status import StatusBoard
from streaming.tools.embedded import free_port
from tests.support.alerts import T0, rec

PROGRESS = {"name": "epochwatch", "batchId": 41, "numInputRows": 3, "inputRowsPerSecond": 350.0,
            "processedRowsPerSecond": 400.0, "durationMs": {"triggerExecution": 900},
            "sources": [{"latestOffset": {"ev": {"0": 12}}, "endOffset": {"ev": {"0": 12}}}]}


def broker_row(broker, cluster="c1", state="ACTIVE", reason=""):
    return {"cluster_id": cluster, "broker_id": broker, "state": state, "state_since_ms": T0 - 130_000,
            "inactive_reason": reason, "incarnation_id": 1, "metadata_epoch": 5, "metadata_epoch_lag": 0,
            "restarts": 0}


@pytest.fixture
def job():
    """(URL, board): a status board served as `epochwatch run` serves it, on a clock at T0 + 125 s."""
    metrics, board = Metrics(), StatusBoard(lambda: T0 + 125_000)
    port = metrics.serve(0, status=board)
    board.observe_progress(PROGRESS)
    yield f"http://127.0.0.1:{port}", board
    metrics.stop()


def test_what_is_wrong_comes_first_and_exits_1(job, capsys):
    url, board = job
    board.write(OutputBatch(1, alerts=[rec("a", starts=T0), rec("b", severity="critical", alertname="BrokerMetadataLag",
                                                              starts=T0 + 100_000)],
                            broker_status=[broker_row(1), broker_row(2, state="INACTIVE", reason="timeout"),
                                           broker_row(1, cluster="quiet")],
                            summaries=[{"cluster_id": "c1", "shard": 0, "kind": "clients", "stale_clients": 4,
                                        "overdue_clients": 0, "stale_examples": ["app-1", "app-2", "app-3"],
                                        "overdue_examples": []}]))
    assert main(["status", "--url", url]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("ERR  2 incident(s) firing (1 critical) in 1 of 2 cluster(s); job RUNNING, batch 41, "
                        "last progress 0.0s ago, 350 records/s in, 0 records behind")
    assert lines[2].split() == ["FIRING", "CLUSTER", "ALERT", "FOR", "LABELS"]
    assert lines[3].split() == ["critical", "c1", "BrokerMetadataLag", "25s", "broker_id=1"]
    assert lines[4].split() == ["warning", "c1", "BrokerHeartbeatTimeout", "2m05s", "broker_id=1"]
    assert lines[6:8] == ["c1: broker 2 fenced (timeout) for 4m15s",
                          "c1: 4 client(s) with stale metadata: app-1, app-2, app-3, ..."]
    assert [line.split()[:2] for line in lines[9:]] == [["CLUSTER", "STATUS"], ["c1", "ERR"], ["quiet", "OK"]]


def test_all_well_exits_0(job, capsys):
    url, board = job
    board.write(OutputBatch(1, broker_status=[broker_row(1)]))
    assert main(["status", "--url", url + "/"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK   nothing firing in 1 cluster(s); job RUNNING")
    assert "ALERT" not in out   # no incidents table


def test_one_cluster_in_full(job, capsys):
    url, board = job
    board.write(OutputBatch(1, alerts=[rec("a", starts=T0)], broker_status=[broker_row(1), broker_row(1, "other")]))
    assert main(["status", "--url", url, "--cluster", "c1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("WARN cluster c1: 1 incident(s) firing (0 critical); brokers 1 (1 ACTIVE)")
    assert lines[3].split() == ["warning", "BrokerHeartbeatTimeout", "2m05s", "2023-11-14T22:13:20.000Z",
                                "broker_id=1"]


def test_json_is_the_endpoints_own_answer(job, capsys):
    url, board = job
    board.write(OutputBatch(1, alerts=[rec("a", starts=T0)], broker_status=[broker_row(1)]))
    assert main(["status", "--url", url, "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["error"] is False and body["request"]["url"] == "/status"
    assert body["status"]["clusters"][0]["incidents_firing"]["total"] == 1
    assert main(["status", "--url", url, "--json", "--cluster", "c1"]) == 1
    assert json.loads(capsys.readouterr().out)["status"]["incidents"][0]["age_s"] == 125.0


def test_an_unknown_cluster_is_exit_2_with_the_clusters_it_knows(job, capsys):
    url, board = job
    board.write(OutputBatch(1, broker_status=[broker_row(1)]))
    assert main(["status", "--url", url, "--cluster", "c9"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "epochwatch status: cluster 'c9' not found: the job knows c1\n"


def test_an_unreachable_job_is_one_line_and_exit_2(capsys):
    url = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    assert main(["status", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"epochwatch status: the job is not reachable at {url}/status")


def test_a_port_without_the_status_view_says_so(capsys):
    """A /metrics endpoint without the status view (an older epochwatch, the collector's port)
    answers /status with its metrics text: not the JSON the command reads."""
    metrics = Metrics()
    port = metrics.serve(0)
    try:
        assert main(["status", "--url", f"http://127.0.0.1:{port}"]) == 2
    finally:
        metrics.stop()
    assert "without the status view's JSON" in capsys.readouterr().err


@pytest.mark.parametrize("seconds, text", [(0.25, "0.2s"), (9.96, "10.0s"), (42.4, "42s"), (125, "2m05s"),
                                           (3 * 3600 + 7 * 60, "3h07m"), (2 * 86400 + 4 * 3600 + 59, "2d04h")])
def test_ages_read_at_a_glance(seconds, text):
    assert age_text(seconds) == text


def test_the_config_names_the_endpoint(job, capsys, tmp_path):
    """`--config` asks where the job's config serves: its sinks.metrics.address and port (a
    wildcard address is asked on loopback); a config with the port off has no status view."""
    url, _ = job
    port = url.rsplit(":", 1)[1]
    served = tmp_path / "served.yaml"
    served.write_text(f"sinks:\n  metrics.port: {port}\n  metrics.address: 0.0.0.0\n")
    assert main(["status", "--config", str(served)]) == 0
    assert "OK" in capsys.readouterr().out
    off = tmp_path / "off.yaml"
    off.write_text("sinks:\n  metrics.port: 0\n")
    assert main(["status", "--config", str(off)]) == 2
    assert "sinks.metrics.port: 0" in capsys.readouterr().err
