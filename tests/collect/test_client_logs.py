"""ClientLogReader on librdkafka's own lines (recorded from librdkafka 2.16 against Kafka 4.1.2),
and what the rules make of the events it derives."""

from __future__ import annotations

from streaming.collect.client_logs import ClientLogReader
from streaming.config import RuleSettings
from streaming.engine.local import detect_all

T0 = 1_767_225_600_000
CLUSTER = "TdOqulSwP09iYiE51yBM9Q"


def response(node: str, epochs: dict[tuple[str, int], int], cluster: str = CLUSTER, brokers: int = 3) -> list[str]:
    """The debug=metadata lines of one MetadataResponse, as librdkafka logs them."""
    name = f"127.0.0.1:16408/{node}"
    topics = sorted({t for t, _ in epochs})
    lines = [f"METADATA [rdkafka#producer-3] [thrd:main]: {name}: ===== Received metadata (for {len(topics)} "
             f"requested topics): periodic topic and broker list refresh =====",
             f"METADATA [rdkafka#producer-3] [thrd:main]: {name}: ClusterId: {cluster}, ControllerId: 2",
             f"METADATA [rdkafka#producer-3] [thrd:main]: {name}: {brokers} brokers, {len(topics)} topics"]
    lines += [f"METADATA [rdkafka#producer-3] [thrd:main]: {name}:   Broker #{i}/{brokers}: 127.0.0.1:{9000 + i} "
              f"NodeId {i + 1}" for i in range(brokers)]
    for topic in topics:
        parts = sorted(p for t, p in epochs if t == topic)
        lines.append(f"METADATA [rdkafka#producer-3] [thrd:main]: {name}:   Topic {topic} with {len(parts)} partitions")
        lines += [f"METADATA [rdkafka#producer-3] [thrd:main]: Topic {topic} [{p}] Leader 1 Epoch {epochs[(topic, p)]}"
                  for p in parts]
    return lines


def feed(reader: ClientLogReader, t: int, lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        out += reader.line(t, line)
    return out + reader.idle(t + 5_000)


def reader(client: str = "orders-app", shared: dict | None = None) -> ClientLogReader:
    return ClientLogReader("prod", client, setup_timeout_ms=10_000, shared=shared)


def test_a_response_names_the_node_the_cluster_id_and_the_broker_count():
    [event] = feed(reader(), T0, response("2", {("orders", 0): 4, ("orders", 1): 7}))
    assert event["event_type"] == "metadata_response"
    assert (event["broker_id"], event["response_cluster_id"], event["broker_count"]) == (2, CLUSTER, 3)
    assert (event["client_id"], event["cluster_id"], event["event_time"]) == ("orders-app", "prod", T0)
    assert event["metadata_epoch"] == 1 and event["error_code"] == 0


def test_a_bootstrap_answer_is_node_minus_one():
    [event] = feed(reader(), T0, response("bootstrap", {("orders", 0): 0}))
    assert event["broker_id"] == -1


def test_the_epoch_grows_with_newer_leader_epochs_and_stays_for_the_same_ones():
    r = reader()
    epochs = [e["metadata_epoch"] for t, lines in [
        (T0, response("1", {("orders", 0): 4})),
        (T0 + 1000, response("2", {("orders", 0): 4})),          # the same: not newer, not older
        (T0 + 2000, response("3", {("orders", 0): 5})),          # a leader elected: newer
        (T0 + 3000, response("1", {("orders", 0): 5, ("orders", 1): 0})),  # a new partition: newer
    ] for e in feed(r, t, lines)]
    assert epochs == [1, 1, 2, 3]


def test_a_response_older_on_one_partition_is_below_the_accepted_epoch_and_raises_stale():
    """Broker 2 cut off from the controller keeps answering partition 1's old leader epoch while
    every other broker has the new one: its answers are stale, the others' are not."""
    r = reader()
    events = []
    events += feed(r, T0, response("1", {("orders", 0): 4, ("orders", 1): 7}))
    events += feed(r, T0 + 1_000, response("3", {("orders", 0): 4, ("orders", 1): 8}))
    events += feed(r, T0 + 2_000, response("2", {("orders", 0): 4, ("orders", 1): 7}))
    assert [e["metadata_epoch"] for e in events] == [1, 2, 1]
    alerts = detect_all(events, RuleSettings(), until=T0 + 10_000)
    assert {(a["alertname"], a["labels"]["broker_id"]) for a in alerts if a["status"] == "firing"} == {
        ("StaleMetadataResponse", "2")}


def test_two_clients_reading_different_topics_raise_nothing():
    """Why per partition: the client of a busy topic sees leader epochs in the hundreds, the other
    one single digits; a comparison of maxima across clients would call the second one stale for
    good. Even sharing what they saw (one process), they never meet."""
    shared: dict = {}
    busy, quiet = reader("busy-app", shared), reader("quiet-app", shared)
    events = []
    for i in range(5):
        events += feed(busy, T0 + i * 1000, response(str(1 + i % 3), {("clicks", 0): 300 + i}))
        events += feed(quiet, T0 + i * 1000 + 500, response(str(1 + i % 3), {("audit", 0): 2}))
    assert detect_all(events, RuleSettings(), until=T0 + 60_000) == []


def test_a_line_of_another_kind_ends_a_response_block():
    r = reader()
    lines = response("1", {("orders", 0): 4})
    out = [e for line in lines for e in r.line(T0, line)]
    assert out == [], "still open: partition lines may follow"
    out = r.line(T0 + 10, "METADATA [rdkafka#producer-3] [thrd:main]: Requesting metadata for 1/1 topics")
    assert [e["event_type"] for e in out] == ["metadata_response"]


def test_setup_timeouts_count_consecutive_failures_per_node_until_it_answers():
    r = reader()
    fail = ("FAIL [rdkafka#producer-1] [thrd:127.0.0.1:48407/2]: 127.0.0.1:48407/2: Connection setup timed out "
            "in state APIVERSION_QUERY (after 10002ms in state APIVERSION_QUERY)")
    attempts = r.line(T0, fail) + r.line(T0 + 10_000, fail)
    assert [(e["node_id"], e["outcome"], e["setup_timeout_ms"], e["consecutive_failures"]) for e in attempts] == [
        (2, "SETUP_TIMEOUT", 10_000, 0), (2, "SETUP_TIMEOUT", 10_000, 1)]
    feed(r, T0 + 20_000, response("2", {("orders", 0): 4}))
    [again] = r.line(T0 + 30_000, fail)
    assert again["consecutive_failures"] == 0, "node 2 answered in between"


def test_a_rebootstrap_says_what_started_it_and_the_cluster_known_before():
    r = reader()
    feed(r, T0, response("1", {("orders", 0): 4}))
    [failed] = r.error(T0 + 1_000, "_ALL_BROKERS_DOWN", "3/3 brokers are down")
    assert (failed["event_type"], failed["reason"], failed["node_id"]) == (
        "metadata_request_failed", "NO_NODE_AVAILABLE", None)
    [event] = r.line(T0 + 2_000, "REBOOTSTRAP [rdkafka#producer-3] [thrd:main]: Starting re-bootstrap sequence")
    assert (event["event_type"], event["reason"], event["cluster_id_before"], event["cluster_id_after"]) == (
        "client_rebootstrap", "NO_NODE_AVAILABLE", CLUSTER, None)


def test_answers_from_another_cluster_after_a_rebootstrap_raise_cluster_id_mismatch():
    r = reader()
    events = feed(r, T0, response("1", {("orders", 0): 4}))
    events += r.line(T0 + 1_000, "REBOOTSTRAP [rdkafka#producer-3] [thrd:main]: Starting re-bootstrap sequence")
    events += feed(r, T0 + 2_000, response("bootstrap", {("orders", 0): 0}, cluster="OtherClusterIdAAAAAAAA"))
    alerts = detect_all(events, RuleSettings(), until=T0 + 10_000)
    assert {(a["alertname"], a["status"]) for a in alerts} == {("ClusterIdMismatch", "firing")}, \
        "the other cluster's lower leader epochs are not stale answers"


def test_the_cluster_id_is_learned_from_the_first_response_and_kept():
    r = ClientLogReader(None, "orders-app", setup_timeout_ms=10_000)
    [before] = r.error(T0, "_ALL_BROKERS_DOWN", "1/1 brokers are down")
    [first] = feed(r, T0 + 1_000, response("1", {("orders", 0): 4}))
    [other] = feed(r, T0 + 2_000, response("1", {("orders", 0): 0}, cluster="OtherClusterIdAAAAAAAA"))
    assert [e["cluster_id"] for e in (before, first, other)] == ["unknown", CLUSTER, CLUSTER]


def test_a_client_that_only_asks_a_cut_off_broker_is_stale_next_to_its_neighbours():
    """librdkafka asks one broker for metadata: the client on broker 2 (cut off from the
    controller) never sees partition 1's new leader epoch itself. Its neighbour in the process,
    on broker 1, does: from then on the first client's answers are behind, for broker 2."""
    shared: dict = {}
    on_2, on_1 = reader("app-on-2", shared), reader("app-on-1", shared)
    events = []
    events += feed(on_2, T0, response("2", {("orders", 0): 4, ("orders", 1): 7}))
    events += feed(on_1, T0 + 100, response("1", {("orders", 0): 4, ("orders", 1): 7}))
    events += feed(on_1, T0 + 10_000, response("1", {("orders", 0): 4, ("orders", 1): 8}))  # leader moved
    events += feed(on_2, T0 + 10_500, response("2", {("orders", 0): 4, ("orders", 1): 7}))
    alerts = detect_all(events, RuleSettings(), until=T0 + 12_000)
    assert {(a["alertname"], a["labels"]["client_id"], a["labels"]["broker_id"]) for a in alerts} == {
        ("StaleMetadataResponse", "app-on-2", "2")}


def test_a_consumers_commits_become_offset_commit_events_and_an_older_epoch_raises_the_regression():
    r = reader("billing-consumer")
    events = r.committed(T0, "billing", [("orders", 0, 120, 5), ("orders", 1, 7, None), ("orders", 2, -1001, 5)])
    assert [(e["group_id"], e["topic"], e["partition"], e["offset"], e["metadata_epoch"], e["event_time"])
            for e in events] == [("billing", "orders", 0, 120, 5, T0), ("billing", "orders", 1, 7, -1, T0)], \
        "no epoch sent is -1 (unknown); an invalid offset (-1001: nothing committed) gives no event"
    events += r.committed(T0 + 5_000, "billing", [("orders", 0, 140, 4)])
    alerts = detect_all(events, RuleSettings(), until=T0 + 6_000)
    assert {(a["alertname"], a["labels"]["group_id"], a["labels"]["partition"]) for a in alerts} == {
        ("OffsetCommitEpochRegression", "billing", "0")}
