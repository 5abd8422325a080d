"""streaming.sinks.endpoint over real HTTP on a free loopback port: /status answers as Burrow's HTTP
API does, /metrics stays prometheus_client's, and requests never trip over batches being written."""

from __future__ import annotations

import threading
from urllib.parse import quote

import pytest
import requests

from streaming.sinks.base import OutputBatch
from streaming.sinks.metrics import Metrics
from streaming.sinks.status import StatusBoard
from tests.support.alerts import T0, rec


def broker_row(broker, cluster="c1", state="ACTIVE"):
    return {"cluster_id": cluster, "broker_id": broker, "state": state, "state_since_ms": T0,
            "inactive_reason": "", "incarnation_id": 1, "metadata_epoch": 5, "metadata_epoch_lag": 0, "restarts": 0}


@pytest.fixture
def served():
    """(base URL, metrics, board): the job's metrics and status board on one port, as `run` serves them."""
    metrics, board = Metrics(), StatusBoard(lambda: T0 + 30_000)
    port = metrics.serve(0, status=board)
    yield f"http://127.0.0.1:{port}", metrics, board
    metrics.stop()


def test_status_lists_every_cluster_in_burrows_envelope(served):
    url, metrics, board = served
    batch = OutputBatch(1, alerts=[rec("a", starts=T0)], broker_status=[broker_row(1), broker_row(2, "c2")])
    metrics.write(batch)
    board.write(batch)
    response = requests.get(f"{url}/status", timeout=5)
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert {k: body[k] for k in ("error", "message")} == {"error": False, "message": "status of 2 cluster(s) returned"}
    assert body["request"]["url"] == "/status" and body["request"]["host"]
    assert body["status"]["status"] == "WARN"
    assert [(c["cluster"], c["status"], c["oldest_incident_age_s"]) for c in body["status"]["clusters"]] == [
        ("c1", "WARN", 30.0), ("c2", "OK", None)]


def test_one_cluster_in_full_and_an_unknown_one_is_a_404_that_names_the_known(served):
    url, _, board = served
    board.write(OutputBatch(1, alerts=[rec("a", starts=T0)], broker_status=[broker_row(1), broker_row(1, "kc/ü 1")]))
    body = requests.get(f"{url}/status/c1", timeout=5).json()
    assert body["message"] == "cluster status returned" and body["request"]["url"] == "/status/c1"
    assert body["status"]["cluster"] == "c1"
    assert [(i["alertname"], i["age_s"]) for i in body["status"]["incidents"]] == [("BrokerHeartbeatTimeout", 30.0)]
    odd = requests.get(f"{url}/status/{quote('kc/ü 1', safe='')}", timeout=5).json()
    assert odd["status"]["cluster"] == "kc/ü 1"   # any cluster id, percent-encoded in the URL

    missing = requests.get(f"{url}/status/nope", timeout=5)
    assert missing.status_code == 404
    assert missing.json() == {"error": True, "message": "cluster 'nope' not found: the job knows c1, kc/ü 1",
                              "request": {"url": "/status/nope", "host": body["request"]["host"]}}


def test_only_get_is_answered(served):
    url, _, _ = served
    response = requests.post(f"{url}/status", timeout=5)
    assert response.status_code == 405 and response.headers["Allow"] == "GET"
    assert response.json()["error"] is True


def test_metrics_are_still_prometheus_clients_own(served):
    """The endpoint hands everything but /status to prometheus_client's WSGI app: the text format,
    OpenMetrics when Prometheus asks for it, and the name[] filter."""
    url, metrics, _ = served
    metrics.observe_broker_status([broker_row(1)])
    text = requests.get(f"{url}/metrics", timeout=5)
    assert text.headers["Content-Type"].startswith("text/plain")
    assert 'epochwatch_broker_state{broker_id="1",kafka_cluster="c1",state="ACTIVE"} 1.0' in text.text
    openmetrics = requests.get(f"{url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=5)
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")
    only_up = requests.get(f"{url}/metrics", params={"name[]": "epochwatch_up"}, timeout=5).text
    assert "epochwatch_up" in only_up and "epochwatch_broker_state" not in only_up


def test_requests_while_batches_are_written_all_get_a_whole_answer(served):
    """The HTTP threads read while foreachBatch writes: every answer is complete JSON, none fails."""
    url, _, board = served
    stop, written = threading.Event(), []

    def write_batches():
        i = 0
        while not stop.is_set():
            board.write(OutputBatch(i, alerts=[rec(f"fp{i}", starts=T0)],
                                    broker_status=[broker_row(b, f"c{i % 7}") for b in range(50)]))
            if i > 20:
                board.write(OutputBatch(i, alerts=[rec(f"fp{i - 20}", status="resolved", ends=T0 + 1)]))
            written.append(i)
            i += 1

    writer = threading.Thread(target=write_batches)
    writer.start()
    try:
        answers = [requests.get(f"{url}/status", timeout=5) for _ in range(30)]
        details = [requests.get(f"{url}/status/c{i % 7}", timeout=5) for i in range(30)]
    finally:
        stop.set()
        writer.join()
    assert len(written) > 20, "the writer ran alongside the requests"
    assert all(a.status_code == 200 and a.json()["error"] is False for a in answers)
    assert all(d.status_code in (200, 404) and d.json()["request"]["url"].startswith("/status/c") for d in details)
    assert any(d.status_code == 200 for d in details)
