"""Hypothesis strategies for VALID events (every one passes ``streaming.events.normalize``) with
absurd values: ids at the ends of their Avro range, negative ids where the schema allows an int,
metadata epochs that jump backwards by 2**62, incarnations near 2**63-1, empty strings, times far
in the past and the future.

Values come mostly from small pools so that events of one stream hit the same brokers, clients
and nodes (rules only interact within an entity); the pools carry the absurd values too.
"""

from __future__ import annotations

import os

from hypothesis import strategies as st

from streaming import events

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
# The widest event time a Spark timestamp (microseconds in a long) can carry: what can reach the
# rules through the job. Beyond it the source cannot even build the row (see test_decoder_fuzz).
SPARK_MAX_MS = INT64_MAX // 1000
T0 = 1_790_000_000_000


def examples(default: int) -> int:
    """Examples per property: fast by default; EPOCHWATCH_FUZZ_EXAMPLES=5000 for a deeper hunt."""
    return int(os.environ.get("EPOCHWATCH_FUZZ_EXAMPLES", default))


def hang_timeout_s(default_examples: int) -> float:
    """pytest-timeout budget of one property: a hang fails the test instead of blocking the run
    (a normal run takes a few seconds; the budget grows with EPOCHWATCH_FUZZ_EXAMPLES)."""
    return 120 * max(1.0, examples(default_examples) / default_examples)


def pool(common: list, absurd: list, lo: int, hi: int) -> st.SearchStrategy[int]:
    """Mostly the common values (collisions), sometimes an absurd one or anything in range."""
    return st.one_of(*[st.sampled_from(common)] * 14, st.sampled_from(absurd), st.integers(lo, hi))


def int32(*common: int) -> st.SearchStrategy[int]:
    return pool(list(common), [-1, INT32_MIN, INT32_MAX], INT32_MIN, INT32_MAX)


def int64(*common: int) -> st.SearchStrategy[int]:
    return pool(list(common), [-1, INT64_MIN, INT64_MAX], INT64_MIN, INT64_MAX)


broker_ids = int32(0, 1, 2, 3)
controller_ids = int32(3000, 3001)
controller_epochs = int32(1, 2, 5)
incarnations = int64(1, 2, 3, INT64_MAX - 2, INT64_MAX - 1)
# an epoch 2**62 ahead, then the ordinary ones: a jump backwards by 2**62
metadata_epochs = int64(1, 2, 3, 10, 2**62, 2**62 + 1, -2)
error_codes = int32(0, 0, 0, events.STALE_BROKER_EPOCH, events.DUPLICATE_BROKER_REGISTRATION,
                    events.BROKER_ID_NOT_REGISTERED, events.INCONSISTENT_CLUSTER_ID, events.REBOOTSTRAP_REQUIRED,
                    events.INVALID_INCARNATION_ID)
# "x" * 255: the longest id an event may carry (events.MAX_ID_BYTES); longer ones are dead letters
names = st.sampled_from(["a", "b", "c"] * 4 + ["", "ünïcødé-☃", "x" * 255])
cluster_ids = st.sampled_from(["c1"] * 8 + ["c2", ""])
states = st.sampled_from(events.BROKER_STATES)
maybe_bool = st.sampled_from([None, False, True])
# mostly a plausible timeline (ten minutes after T0), sometimes far in the past or the future
times = st.one_of(
    st.integers(T0, T0 + 600_000), st.integers(T0, T0 + 600_000), st.integers(T0, T0 + 600_000),
    st.sampled_from([-SPARK_MAX_MS, -2**40, 0, 1, T0 - 2**40, T0 + 2**40, SPARK_MAX_MS - 10**9]),
)


def _event(event_type: str, **fields) -> st.SearchStrategy[dict]:
    base = {"event_type": st.just(event_type), "event_id": st.just("pending"), "cluster_id": cluster_ids,
            "event_time": times}
    return st.fixed_dictionaries({**base, **fields}).map(events.normalize)


heartbeat = _event(
    "broker_heartbeat", controller_id=controller_ids, controller_epoch=controller_epochs, broker_id=broker_ids,
    incarnation_id=incarnations, incarnation_uuid=st.sampled_from([None, "18072e8c-35bf-492d-89e9-c616612e7696"]),
    target_state=states, want_fence=maybe_bool, want_shutdown=maybe_bool,
    current_metadata_offset=st.one_of(st.none(), int64(0, 100)), error_code=error_codes,
    current_state=st.one_of(st.none(), states))
metadata_update = _event("metadata_update", controller_id=controller_ids, controller_epoch=controller_epochs,
                         metadata_epoch=metadata_epochs, broker_id=broker_ids)
metadata_response = _event(
    "metadata_response", client_id=names, broker_id=int32(0, 1, 2, 9000), metadata_epoch=metadata_epochs,
    error_code=error_codes, broker_count=int32(0, 3, 6),
    response_cluster_id=st.sampled_from([None, "kc-1", "kc-2", ""]))
request_failed = _event(
    "metadata_request_failed", client_id=names, node_id=st.one_of(st.none(), int32(0, 1, -1)),
    reason=st.sampled_from(["CONNECTION_SETUP_TIMEOUT", "DISCONNECTED", "NO_NODE_AVAILABLE", "REQUEST_TIMEOUT"]))
rebootstrap = _event(
    "client_rebootstrap", client_id=names,
    reason=st.sampled_from(["NO_NODE_AVAILABLE", "TRIGGER_TIMEOUT", "REBOOTSTRAP_REQUIRED"]),
    cluster_id_before=st.sampled_from([None, "kc-1", "kc-2", ""]),
    cluster_id_after=st.sampled_from([None, "kc-1", "kc-2", ""]))
connection_attempt = _event(
    "connection_attempt", client_id=names, node_id=int32(0, 1, -1, -2),
    outcome=st.sampled_from(["CONNECTED", "SETUP_TIMEOUT", "SETUP_TIMEOUT", "FAILED"]),
    setup_timeout_ms=int64(10_000, 20_000, 30_000), consecutive_failures=int32(0, 1, 5, 62))
offset_commit = _event(
    "offset_commit", group_id=names, topic=st.sampled_from(["orders", "", "t" * 249]),
    partition=int32(0, 1), offset=int64(0, 99), metadata_epoch=metadata_epochs)

input_events = st.one_of(heartbeat, metadata_update, metadata_response, request_failed, rebootstrap,
                         connection_attempt, offset_commit)

alert_events = st.fixed_dictionaries({
    "event_type": st.just("alert"), "event_id": st.just("fp:firing"), "cluster_id": cluster_ids, "event_time": times,
    "alertname": names, "severity": st.sampled_from(["info", "warning", "critical"]),
    "status": st.sampled_from(["firing", "resolved"]), "labels": st.dictionaries(names, names, max_size=4),
    "annotations": st.dictionaries(names, names, max_size=3), "starts_at": times,
    "ends_at": st.one_of(st.none(), times), "fingerprint": names,
}).map(events.normalize)


@st.composite
def steady_traffic(draw) -> list[dict]:
    """Plausible traffic for the hostile events to land in: brokers 1-3 of c1 heartbeat every 2 s
    and apply a metadata update every 5 s, client "a" fetches metadata every 3 s; one broker goes
    quiet for a while (a timeout that later resolves)."""
    start = T0 + draw(st.integers(0, 60_000))
    end = start + draw(st.integers(0, 120_000))
    quiet_broker, quiet_from = draw(st.integers(1, 3)), draw(st.integers(start, end))
    quiet_for = draw(st.integers(0, 60_000))
    out = []

    def emit(event_type: str, t: int, **fields) -> None:
        out.append(events.normalize({"event_type": event_type, "event_id": "pending", "cluster_id": "c1",
                                     "event_time": t, **fields}))

    for t in range(start, end, 1000):
        epoch = (t - start) // 5000 + 1
        for b in (1, 2, 3):
            if (t - start) % 2000 == 0 and not (b == quiet_broker and quiet_from <= t < quiet_from + quiet_for):
                emit("broker_heartbeat", t, controller_id=3000, controller_epoch=5, broker_id=b, incarnation_id=7,
                     target_state="ACTIVE", current_state="ACTIVE")
            if (t - start) % 5000 == 0:
                emit("metadata_update", t, controller_id=3000, controller_epoch=5, metadata_epoch=epoch, broker_id=b)
        if (t - start) % 3000 == 0:
            emit("metadata_response", t, client_id="a", broker_id=1, broker_count=3, metadata_epoch=epoch,
                 response_cluster_id="kc-1")
    return out


@st.composite
def event_streams(draw, max_events: int = 60) -> list[dict]:
    """Hostile events (over plausible traffic, sometimes) in roughly event-time order, with
    reordered pairs and duplicated events (a duplicate keeps its event_id: the same record
    delivered twice)."""
    hostile = draw(st.lists(input_events, max_size=max_events))
    background = draw(st.one_of(st.just([]), steady_traffic()))
    stream = sorted(hostile + background, key=lambda e: e["event_time"])
    for i, ev in enumerate(stream):
        ev["event_id"] = f"e{i}"
    if stream:
        index = st.integers(0, len(stream) - 1)
        for i, j in draw(st.lists(st.tuples(index, index), max_size=8)):
            stream[i], stream[j] = stream[j], stream[i]
        for i, at in draw(st.lists(st.tuples(index, index), max_size=8)):
            stream.insert(at, dict(stream[i]))
    return stream
