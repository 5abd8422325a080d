"""The collect loop's wiring, with the cluster's answers given by hand: which source feeds which
observation, what an unreachable cluster or exporter turns into, and the collector's metrics."""

import threading
import time
from pathlib import Path

from prometheus_client import generate_latest

from streaming import config
from streaming.collect import exporter
from streaming.collect.collector import Calls, Collector
from streaming.collect.metrics import CollectorMetrics
from streaming.collect.probes import BrokerRegistration, ClusterState, MetadataAnswer, ProbeError, QuorumState
from tests.support.polling import wait_until

PAGE = (Path(__file__).parent / "fixtures" / "kafka-4.1.2-combined-node.prom").read_text()
NOW_S = 1795627627.5  # half a second after the page's last applied record


class Probe:
    def __init__(self, down: bool = False, failing: frozenset = frozenset()):
        self.down, self.failing = down, failing

    def cluster(self):
        if self.down:
            raise ProbeError("NO_NODE_AVAILABLE", "bootstrap failed")
        return ClusterState("cluster-a", {1: BrokerRegistration(1, "127.0.0.1", 9092, False)})

    def quorum(self):
        return QuorumState(1, 4, 170, {1: (168, 1795627627000)})

    def metadata(self, broker_id):
        if broker_id in self.failing:
            raise ProbeError("REQUEST_TIMEOUT", "slow")
        return MetadataAnswer(broker_id, "cluster-a", 0, (1,), {("t", 0): 3})

    def close(self):
        pass


def collector(probe, pages=(PAGE,), metrics=None, **overrides):
    settings = config.load(overrides={"collect.exporter.urls": ",".join(f"http://127.0.0.1:1/{i}" for i in range(len(pages))),
                                      **overrides})
    by_url = dict(zip(settings.collect.urls(), pages))

    def scrape(url, timeout_s):
        if by_url[url] is None:
            raise exporter.ScrapeError(f"{url}: timed out")
        return exporter.parse(by_url[url])

    c = Collector(settings, None, probe=probe, scrape=scrape, clock=lambda: NOW_S, metrics=metrics,
                  broker_probe=lambda address: c.probe)  # the same fake answers for every broker
    return c


def second_round(c):
    """The first round learns the brokers (DescribeCluster); the second asks each of them."""
    c.run_round()
    return c.run_round()


def test_every_source_feeds_the_round_and_the_controller_comes_from_the_quorum():
    c = collector(Probe())
    first, _ = c.run_round()
    assert [e["event_type"] for e in first] == ["broker_heartbeat", "metadata_update"]
    events, report = c.run_round()
    assert [e["event_type"] for e in events] == ["metadata_response"]  # nothing new to say but the answer
    hb = first[0]
    assert (hb["controller_id"], hb["controller_epoch"]) == (1, 4)          # DescribeQuorum
    assert hb["event_time"] == int(NOW_S * 1000) - 336                      # the controller's gauge
    assert hb["incarnation_id"] == 1795627548940                            # the broker's app-info
    assert first[1]["metadata_epoch"] == 167                                # applied, not fetched (168)
    assert report.reachable and (report.probes_ok, report.scrapes_ok) == (1, 1)


def test_without_exporters_the_quorum_alone_gives_heartbeats_and_offsets():
    times = iter([NOW_S, NOW_S + 5])  # two rounds, half a session apart: no page will tell a start time
    c = collector(Probe(), pages=(None,))
    c.clock = lambda: next(times)
    first, report = c.run_round()
    assert [e["event_type"] for e in first] == ["metadata_update"] and first[0]["metadata_epoch"] == 168
    assert report.scrapes_ok == 0
    hb = [e for e in c.run_round()[0] if e["event_type"] == "broker_heartbeat"]
    assert [(e["event_time"], e["incarnation_id"]) for e in hb] == [(1795627627000, 0)]  # the last fetch


def test_an_unreachable_cluster_after_it_was_seen_is_reported_as_a_failure_event():
    c = collector(Probe())
    c.run_round()
    c.probe = Probe(down=True, failing=frozenset({1}))
    events, report = c.run_round()
    failures = [e for e in events if e["event_type"] == "metadata_request_failed"]
    assert [(f["node_id"], f["reason"]) for f in failures] == [(None, "NO_NODE_AVAILABLE"), (1, "REQUEST_TIMEOUT")]
    assert not report.reachable and report.cluster_id == "cluster-a"


def test_a_cluster_never_reached_gives_no_events_it_could_not_name():
    events, report = collector(Probe(down=True)).run_round()
    assert events == [] and report.cluster_id is None


def test_a_broker_whose_probe_fails_is_a_failure_with_its_node_id():
    events, _ = second_round(collector(Probe(failing=frozenset({1}))))
    assert [(e["node_id"], e["reason"]) for e in events if e["event_type"] == "metadata_request_failed"] == [
        (1, "REQUEST_TIMEOUT")]


def test_the_collectors_metrics_say_it_runs_and_whether_it_reaches_the_cluster():
    metrics = CollectorMetrics()
    c = collector(Probe(), metrics=metrics)
    c.run(rounds=1, status=None)
    c.probe = Probe(down=True)
    c.run(rounds=1, status=None)
    text = generate_latest(metrics.registry).decode()
    assert 'epochwatch_collector_up{kafka_cluster="cluster-a"} 1.0' in text
    assert 'epochwatch_collector_cluster_reachable{kafka_cluster="cluster-a"} 0.0' in text
    assert 'epochwatch_collector_rounds_total{kafka_cluster="cluster-a"} 2.0' in text
    assert 'epochwatch_collector_events_total{event_type="broker_heartbeat",kafka_cluster="cluster-a"} 1.0' in text


def test_a_call_that_outlives_the_round_is_taken_by_the_next_one_and_not_started_twice():
    release, started = threading.Event(), []
    calls = Calls(timeout_s=5)

    def slow():
        started.append(1)
        release.wait(5)
        return "late answer"

    calls.start("k", slow)
    assert calls.take(["k"], deadline=0) == {}
    calls.start("k", slow)  # still running: not started again
    release.set()
    assert calls.take(["k"], deadline=time.monotonic() + 5) == {"k": "late answer"} and len(started) == 1
    calls.close()


def test_a_target_that_was_late_is_not_waited_for_once_the_others_have_answered():
    paused, calls = threading.Event(), Calls(timeout_s=1)
    calls.start("paused", lambda: paused.wait(30) and "answer")
    calls.start("healthy", lambda: "ok")
    assert calls.take(["paused", "healthy"], deadline=time.monotonic() + 1) == {"healthy": "ok"}
    assert calls.deferred == set()  # waited for up to the deadline: late
    calls.start("healthy", lambda: "ok")
    before = time.monotonic()
    assert calls.take(["paused", "healthy"], deadline=before + 30) == {"healthy": "ok"}
    assert calls.deferred == {"paused"} and time.monotonic() - before < 15  # not waited for
    paused.set()
    wait_until(lambda: calls._running["paused"].done(), timeout_s=10, what="the paused call's return")
    calls.start("healthy", lambda: "ok")
    assert calls.take(["paused", "healthy"], deadline=time.monotonic() + 30) == {"healthy": "ok", "paused": "answer"}
    # that answer took longer than the timeout: still not waited for
    slow = threading.Event()
    calls.start("paused", lambda: slow.wait(30) and "prompt answer")
    calls.start("healthy", lambda: "ok")
    assert calls.take(["paused", "healthy"], deadline=time.monotonic() + 30) == {"healthy": "ok"}
    assert calls.deferred == {"paused"}
    slow.set()
    wait_until(lambda: calls._running["paused"].done(), timeout_s=10, what="the prompt answer")
    assert calls.take(["paused"], deadline=time.monotonic() + 30) == {"paused": "prompt answer"}
    # answered within the timeout, if a round late: waited for again (up to the deadline: late)
    hung = threading.Event()
    calls.start("paused", lambda: hung.wait(30) and "answer")
    calls.start("healthy", lambda: "ok")
    assert calls.take(["paused", "healthy"], deadline=time.monotonic() + 1) == {"healthy": "ok"}
    assert calls.deferred == set()
    hung.set()
    calls.close()


def test_a_target_that_failed_is_waited_for_when_nothing_else_is_running():
    release, calls = threading.Event(), Calls(timeout_s=5)

    def fails():
        raise ProbeError("REQUEST_TIMEOUT", "paused")

    calls.start("broker", fails)
    assert isinstance(calls.take(["broker"], deadline=time.monotonic() + 5)["broker"], ProbeError)
    calls.start("broker", lambda: release.wait(30) and "answer")
    threading.Timer(0.3, release.set).start()
    # alone in the round: waiting for it holds nothing else back
    assert calls.take(["broker"], deadline=time.monotonic() + 30) == {"broker": "answer"}
    calls.close()


class PausedBroker(Probe):
    """Broker 1's Metadata requests hang until released, then time out as the client would."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def metadata(self, broker_id):
        self.release.wait(30)
        raise ProbeError("REQUEST_TIMEOUT", "paused")


# A round defers a slow call only when its other calls finish before the request timeout: 2 s
# leaves room on a loaded host (at 200 ms, a CI run's round once did not get its fake page and
# metadata answers in time).
ROOMY_TIMEOUT = {"collect.request.timeout.ms": 2000}


def test_a_paused_broker_is_a_timeout_when_its_request_times_out_not_while_the_round_did_not_wait():
    c = collector(PausedBroker(), **ROOMY_TIMEOUT)
    c.run_round()
    events, _ = c.run_round()  # waited for up to the request timeout: a timeout
    assert [(e["node_id"], e["reason"]) for e in events if e["event_type"] == "metadata_request_failed"] == [
        (1, "REQUEST_TIMEOUT")]
    events, report = c.run_round()  # still running, not waited for: nothing said yet
    assert [e for e in events if e["event_type"] == "metadata_request_failed"] == [] and report.probes_ok == 0
    c.probe.release.set()
    wait_until(lambda: c.calls._running[("metadata", 1)].done(), timeout_s=10, what="the request's timeout")
    events, _ = c.run_round()  # its answer: the client's own timeout
    assert [(e["node_id"], e["reason"]) for e in events if e["event_type"] == "metadata_request_failed"] == [
        (1, "REQUEST_TIMEOUT")]
    c.close()


class SlowAdminApi(Probe):
    """DescribeCluster answers at once until ``hold`` is cleared, then when it is set again."""

    def __init__(self):
        super().__init__()
        self.hold = threading.Event()
        self.hold.set()

    def cluster(self):
        self.hold.wait(30)
        return super().cluster()


def test_a_describe_cluster_not_waited_for_leaves_the_cluster_as_reachable_as_it_last_was():
    c = collector(SlowAdminApi(), **ROOMY_TIMEOUT)
    assert c.run_round()[1].reachable
    c.probe.hold.clear()
    assert not c.run_round()[1].reachable  # waited for up to the request timeout: no answer
    c.probe.hold.set()
    wait_until(lambda: c.calls._running["cluster"].done(), timeout_s=10, what="the late answer")
    assert c.run_round()[1].reachable  # the late answer
    c.probe.hold.clear()
    _, report = c.run_round()  # still running, not waited for: nothing new is known
    assert report.reachable and "cluster" in c.calls.deferred
    c.probe.hold.set()
    c.close()


def test_a_saturated_heartbeat_gauge_is_no_heartbeat_even_when_the_page_arrives_late():
    """The page arrives after the round started: 'arrival minus 9000' would pass for a heartbeat
    less than a session old at the round's start. Nor does the broker's last metadata fetch
    (later than its last heartbeat) stand in while the controller's page says it is silent."""
    page = PAGE.replace('name="TimeSinceLastHeartbeatReceivedMs"} 336.0', 'name="TimeSinceLastHeartbeatReceivedMs"} 9000.0')
    times = iter([NOW_S, NOW_S + 1.2, NOW_S + 1.2, NOW_S + 1.2])  # round start, then the page's arrival
    c = collector(Probe(), pages=(page,))
    c.clock = lambda: next(times, NOW_S + 1.2)
    events, _ = c.run_round()
    assert [e for e in events if e["event_type"] == "broker_heartbeat"] == []


def test_two_exporters_claiming_one_node_id_make_the_running_one_the_node_and_the_other_a_claim():
    second = (PAGE.replace("1.79562754894E12", "1.79562760000E12")
                  .replace('name="BrokerState"} 3.0', 'name="BrokerState"} 1.0'))  # starting, refused
    events, _ = collector(Probe(), pages=(PAGE, second)).run_round()
    hb = [(e["incarnation_id"], e["error_code"]) for e in events if e["event_type"] == "broker_heartbeat"]
    assert hb == [(1795627548940, 0), (1795627600000, 101)]


def test_the_collect_settings_never_show_the_watched_clusters_secrets():
    settings = config.load(overrides={"collect.client.sasl.password": "hunter2",
                                      "collect.exporter.urls": "http://scraper:s3cret@broker-1:7071/metrics"})
    for text in (repr(settings.collect), repr(settings)):
        assert "hunter2" not in text and "s3cret" not in text and "sasl.password" in text


class CommitLog:
    """Stands in for streaming.collect.commit_log.CommitLogReader: hands over what it is given."""

    def __init__(self):
        from streaming.collect.commits import CommitCounts

        self.pending, self.counts, self.running, self.started = [], CommitCounts(), True, 0
        self.state, self.reading_partitions = "reading 50 partitions", 50
        self.dropped = self.restarts = 0
        self.last_exit = ""

    def ensure_running(self):
        self.started += 1

    def take(self):
        out, self.pending = self.pending, []
        for o in out:
            self.counts.add(o)
        return out

    def close(self):
        self.running = False


def test_commits_wait_for_the_cluster_id_then_go_out_with_the_round():
    """A commit read while the cluster cannot be reached has no cluster to belong to yet: it is
    held, and sent by the first round that learns the id; tombstones are counted, never sent."""
    from streaming.collect.commits import Commit, Outcome

    log = CommitLog()
    settings = config.load()
    c = Collector(settings, None, probe=Probe(down=True), scrape=None, clock=lambda: NOW_S, commit_log=log,
                  broker_probe=lambda address: c.probe)
    log.pending = [Outcome("commit", Commit("billing", "clicks", 0, 7, 5, 1_767_225_600_000)), Outcome("tombstone")]
    events, report = c.run_round()
    assert events == [] and log.started == 1
    assert "commits +0 (reading 50 partitions; tombstones 1" in report.line(None)
    c.probe = Probe()
    events, report = c.run_round()
    [commit] = [e for e in events if e["event_type"] == "offset_commit"]
    assert (commit["cluster_id"], commit["group_id"], commit["metadata_epoch"]) == ("cluster-a", "billing", 5)
    assert "commits +1 (reading 50 partitions" in report.line(None)
    c.close()
    assert not log.running


def test_without_the_commit_log_source_the_status_line_says_nothing_of_commits():
    c = collector(Probe())
    assert c.commit_log is None and "commits" not in c.run_round()[1].line(None)


def test_the_commit_log_reader_shows_on_metrics():
    """A reader that runs but reads nothing (joining, down) must be visible where alerts are written."""
    from streaming.collect.commits import Outcome

    log, metrics = CommitLog(), CollectorMetrics()
    c = Collector(config.load(), None, probe=Probe(), scrape=None, clock=lambda: NOW_S, commit_log=log,
                  metrics=metrics, broker_probe=lambda address: c.probe)
    log.pending = [Outcome("tombstone"), Outcome("unknown_version", detail="version 9")]
    c.run(status=None, rounds=1)
    page = generate_latest(metrics.registry).decode()
    assert 'epochwatch_collector_commit_log_partitions{kafka_cluster="cluster-a"} 50.0' in page
    assert 'epochwatch_collector_commit_log_records{kafka_cluster="cluster-a",kind="unknown_version"} 1.0' in page
    c.close()
