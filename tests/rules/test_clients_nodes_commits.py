"""Client, node and commit rules, table style: each case says why its expectation is right."""

import pytest

from streaming.config import RuleSettings
from streaming.engine.local import LocalDetector
from streaming.rules.clients import ClientShard, _has_open
from streaming.rules.nodes import follows_kip601, setup_timeout_bounds
from streaming.rules.records import ClientRecord
from streaming.tools.simulate import SCENARIOS, run_scenario
from tests.support.builders import attempt, commit, failed, rebootstrap, response, run, summary

S = RuleSettings()


def refresh(client, start, end, every=10000, epoch_at=lambda t: 1 + t // 3000, broker=1):
    return [response(t, client, broker, epoch_at(t)) for t in range(start, end, every)]


CLIENT_CASES = [
    pytest.param(refresh("a", 0, 100000), 100000, [], id="1-epochs only go up: nothing stale"),
    pytest.param(refresh("a", 0, 50000) + [response(50500, "a", 3, 2), response(51000, "a", 3, 2)], 200000,
                 [("firing", "StaleMetadataResponse", "a"), ("resolved", "StaleMetadataResponse", "a")],
                 id="2-two stale answers from one broker are ONE incident, closed after the quiet period"),
    pytest.param(refresh("a", 0, 50000) + [response(50500, "a", 3, -1)], 100000, [],
                 id="3-epoch -1 means unknown: never stale"),
    pytest.param(refresh("a", 0, 30000) + [failed(t, "a") for t in range(30000, 400000, 5000)], 400000,
                 [("firing", "ClientRebootstrapOverdue", "a")],
                 id="4-no metadata for 300 s since the first failure: rebootstrap overdue"),
    pytest.param(refresh("a", 0, 30000) + [failed(t, "a") for t in range(30000, 200000, 5000)]
                 + refresh("a", 200000, 400000), 400000, [],
                 id="5-a success before the trigger clears the clock (KIP-899)"),
    pytest.param(refresh("a", 0, 30000) + [rebootstrap(31000, "a", before="kc-1", after="kc-2")], 60000,
                 [("firing", "ClusterIdMismatch", "a")],
                 id="6-rebootstrap into another cluster id: the client must fail, page"),
    pytest.param(refresh("a", 0, 30000) + [rebootstrap(31000, "a", before="kc-1", after="kc-1")]
                 + refresh("a", 32000, 60000), 60000, [],
                 id="7-rebootstrap into the same cluster is fine"),
    pytest.param(refresh("a", 0, 30000) + [response(31000, "a", 1, 40, error=129, brokers=0)]
                 + [failed(t, "a") for t in range(32000, 400000, 10000)], 400000,
                 [("firing", "ClientRebootstrapOverdue", "a")],
                 id="8-REBOOTSTRAP_REQUIRED carries no metadata: the trigger clock runs"),
]


def storm(node, clients, start, per_client=4, base=10000, cap=30000, off_formula=False):
    out = []
    for c in range(clients):
        t = start + c * 100
        for f in range(per_client):
            timeout = base * 2 ** f if not off_formula else base
            out.append(attempt(t, f"c{c}", node, timeout=min(cap, timeout), failures=f))
            t += min(cap, timeout)
    return out


NODE_CASES = [
    pytest.param(storm(7, 10, 0), 200000, [("firing", "ConnectionSetupTimeoutStorm", "7"),
                                           ("resolved", "ConnectionSetupTimeoutStorm", "7")],
                 id="1-ten clients timing out on node 7 within a minute: a storm, over when they stop"),
    pytest.param(storm(7, 2, 0, per_client=20), 200000, [],
                 id="2-many timeouts from only two clients: not a storm across clients"),
    pytest.param([attempt(t, f"c{t}", 7, outcome="CONNECTED") for t in range(0, 60000, 100)], 100000, [],
                 id="3-connections that succeed are no storm"),
    pytest.param([response(1000 + i * 10, f"c{i}", 9000, -1, error=129, brokers=0) for i in range(12)], 200000,
                 [("firing", "RebootstrapRequired", "9000"), ("resolved", "RebootstrapRequired", "9000")],
                 id="4-a proxy answering REBOOTSTRAP_REQUIRED: one alert for the node, not per client"),
]


def test_storm_description_counts_timeouts_off_kip601():
    """Why: a client whose timeouts do not grow (no KIP-601 or a bad config) makes storms worse."""
    alerts, _ = run("nodes", storm(7, 10, 0, off_formula=True), 30000)
    firing = [a for a in alerts if a["alertname"] == "ConnectionSetupTimeoutStorm"]
    assert firing and "outside KIP-601" in firing[0]["annotations"]["description"]
    off = int(firing[0]["annotations"]["description"].split("; ")[1].split()[0])
    assert off > 0


KIP601 = [
    (0, 10000, True, "first attempt: the base timeout exactly"),
    (0, 8000, True, "first attempt, lowest jitter (0.8)"),
    (0, 7900, False, "below the jitter band (0.8 * base, 1 ms rounding slack)"),
    (1, 24000, True, "second attempt doubles: 20000 * 1.2"),
    (2, 30000, True, "third attempt 40000 is capped at the 30000 max"),
    (5, 30000, True, "any later attempt stays at the cap"),
    (3, 10000, False, "a client that never grows its timeout"),
]


@pytest.mark.parametrize("failures,timeout,ok,why", KIP601, ids=[c[3] for c in KIP601])
def test_kip601_formula(failures, timeout, ok, why):
    assert follows_kip601(timeout, failures, 10000, 30000) is ok


def test_kip601_bounds_cap():
    assert setup_timeout_bounds(10, 10000, 30000) == (30000, 30000)


COMMIT_CASES = [
    pytest.param([commit(t, "g", 1 + t // 1000) for t in range(0, 10000, 1000)], 100000, [],
                 id="1-epochs grow with every commit: fine"),
    pytest.param([commit(0, "g", 5), commit(1000, "g", 3), commit(2000, "g", 6)], 100000,
                 [("firing", "OffsetCommitEpochRegression", "g"), ("resolved", "OffsetCommitEpochRegression", "g")],
                 id="2-a commit below the last epoch is INVALID_METADATA_EPOCH; a good commit ends it"),
    pytest.param([commit(0, "g", 5), commit(1000, "g", -1)], 100000, [],
                 id="3-epoch -1 (older client) is never a regression"),
    pytest.param([commit(0, "g", 5, partition=0), commit(1000, "g", 3, partition=1)], 100000, [],
                 id="4-epochs are compared per partition"),
]


def test_client_conditions_come_in_client_id_order_whatever_order_the_clients_were_seen_in():
    """Why: the quiet-run pass creates client records in another order than applying event by
    event, and the alerts of one evaluation follow the conditions' order; hypothesis found two
    alerts of one evaluation swapped between the two ways (session 7)."""
    shard = ClientShard("c1", RuleSettings())
    for client in ("b", "c", "a"):  # first seen in this order
        shard.clients[client] = ClientRecord(client, known_cluster_id="kc-1", mismatch_since_ms=300,
                                             mismatch_cluster_id="kc-2", stale_broker_ids=[1], stale_since_ms=[300],
                                             stale_last_ms=[300], stale_counts=[1])
    order = [(c.alertname, dict(c.labels)["client_id"]) for c in shard.conditions(400)]
    assert order == [(name, client) for client in "abc" for name in ("StaleMetadataResponse", "ClusterIdMismatch")]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_clients_kept_as_open_are_those_a_pass_over_every_client_finds(name):
    """Why: a shard's summary and evaluations look again only at the clients open last time and
    those touched since (ClientShard._open), every step; a change that did not mark its client
    touched would leave its incident out of the summary, or a closed one in. After every step of
    every client shard, the kept set is what a pass over every client finds."""
    result = run_scenario(name)
    detector = LocalDetector(result.truth.rule_settings())
    largest = 0
    for start in range(0, len(result.events), 97):
        detector.feed(result.events[start:start + 97])
        for engine in detector.engines.values():
            table = engine.table
            if engine.kind == "clients" and table.open_ids is not None:
                assert table.open_ids == {i for i, c in table.clients.items() if _has_open(c)}, start
                largest = max(largest, len(table.open_ids))
    client_alerts = {"StaleMetadataResponse", "ClientRebootstrapOverdue", "ClusterIdMismatch"}
    if any(e.alertname in client_alerts for e in result.truth.expected):
        assert largest > 0, "a client had an incident open"


@pytest.mark.parametrize("kind,events,until,expected", [
    pytest.param(kind, *case.values, id=f"{kind}-{case.id}")
    for kind, cases in (("clients", CLIENT_CASES), ("nodes", NODE_CASES), ("commits", COMMIT_CASES)) for case in cases])
def test_rules_of_a_kind(kind, events, until, expected):
    """Each case: a key of ``kind`` applies the events and evaluates up to ``until``; the alerts it
    emits, in order (the case's id says why)."""
    alerts, _ = run(kind, events, until)
    assert summary(alerts) == expected
