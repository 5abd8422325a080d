"""streaming.spark.packs: routed rows -> one pack per state key -> the same events back."""

import pickle
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pytest

from streaming.engine.keys import CLOCK
from streaming.spark.packs import (
    PACK_SCHEMA,
    PickledStateError,
    from_ipc_chunks,
    pack,
    ready_and_waiting,
    route_and_pack,
    to_ipc_chunks,
    unpack,
)
from streaming.spark.validity import Limits

T0 = 1_700_000_000_000
# the batch's own times as its clock: T0 is years behind the wall clock
EVENT_TIME_LIMITS = Limits(wall_clock=False)


def routed(kind, shard, t, cluster="c1", **fields):
    return {"cluster_id": cluster, "kind": kind, "shard": shard, "event_ms": t,
            "event_time": None if t is None else datetime.fromtimestamp(t / 1000, timezone.utc), **fields}


def table(rows):
    """Arrow infers each column from all rows (from_pylist would take the first row's keys only)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    return pa.table({k: pa.array([r.get(k) for r in rows]) for k in names})


ROWS = [
    routed("brokers", 0, T0 + 5, event_type="broker_heartbeat", broker_id=1, incarnation_id=7,
           kafka_timestamp=datetime.fromtimestamp((T0 + 6) / 1000, timezone.utc)),
    routed("clients", 3, T0 + 1, event_type="metadata_response", client_id="a", metadata_epoch=4),
    routed("brokers", 0, T0 + 9, event_type="metadata_response", client_id="a", metadata_epoch=4, broker_id=2),
    routed("brokers", 0, T0 + 2, cluster="c2", event_type="broker_heartbeat", broker_id=1, incarnation_id=1),
    routed("dead_letter", 1, None, cluster="", dlq_reason="bad_magic_byte", raw_value=b"\x07junk"),
]


def test_one_pack_per_state_key_in_order_of_first_appearance():
    """Why: the grouping key must arrive whole; order keeps packs deterministic."""
    out = pack(table(ROWS)).to_pylist()
    assert [(p["cluster_id"], p["kind"], p["shard"], p["events"]) for p in out] == [
        ("c1", "brokers", 0, 2), ("c1", "clients", 3, 1), ("c2", "brokers", 0, 1), ("", "dead_letter", 1, 1),
        ("", CLOCK, 0, 0)]


def test_packs_have_no_time_and_one_clock_row_carries_the_newest_event_time():
    """Why: Spark drops rows older than the watermark; a pack must never be dropped (its events
    are applied late and counted instead), while the watermark moves as with one row per event.
    A dead letter's time (maybe the year 3000) must not move it at all."""
    out = pack(table(ROWS)).to_pylist()
    assert [p["event_time"] for p in out[:-1]] == [None] * 4
    assert out[-1]["event_time"] == datetime.fromtimestamp((T0 + 9) / 1000, timezone.utc)
    only_dead = pack(table(ROWS[-1:])).to_pylist()
    assert [p["kind"] for p in only_dead] == ["dead_letter"]  # no clock row: no event time to report
    assert only_dead[0]["clock_ms"] is None


def test_every_pack_carries_its_batch_newest_event_time_in_ms():
    """Why: in event-time mode a key applies its events up to that time minus the allowed lateness
    in the same micro-batch (streaming.spark.processor), not only once the next watermark passes."""
    out = pack(table(ROWS)).to_pylist()
    assert {p["clock_ms"] for p in out} == {T0 + 9}


def test_the_clock_stops_at_a_lagging_partitions_first_unread_event():
    """Why (issue 27): the planner found a partition behind whose next event is at T0 + 3; neither
    the watermark (the clock row) nor any key's horizon (the packs' clock_ms) may pass it, though
    this batch read events up to T0 + 9 from the partitions ahead. A cap above the batch's newest
    time changes nothing."""
    out = pack(table(ROWS), clock_cap_ms=T0 + 3).to_pylist()
    assert {p["clock_ms"] for p in out} == {T0 + 3}
    assert out[-1]["event_time"] == datetime.fromtimestamp((T0 + 3) / 1000, timezone.utc)
    assert {p["clock_ms"] for p in pack(table(ROWS), clock_cap_ms=T0 + 60).to_pylist()} == {T0 + 9}


def test_unpack_gives_back_each_event_with_its_own_fields_and_times_in_ms():
    """Why: rules read optional fields with .get and times as integer milliseconds."""
    first = unpack(pack(table(ROWS)).column("payload")[0].as_py())
    assert first == [
        {"cluster_id": "c1", "event_type": "broker_heartbeat", "broker_id": 1, "incarnation_id": 7,
         "kafka_timestamp": T0 + 6, "event_time": T0 + 5},
        {"cluster_id": "c1", "event_type": "metadata_response", "client_id": "a", "metadata_epoch": 4,
         "broker_id": 2, "event_time": T0 + 9},
    ]


def test_a_brokers_pack_carries_of_a_response_only_what_the_brokers_key_reads():
    """Why: most of a busy brokers key's events are the epochs its brokers served, shuffled and
    read back every micro-batch; the clients key that owns the response (and dead-letters it if
    invalid) must still get every field, and the brokers' own events keep theirs."""
    response = dict(event_type="metadata_response", event_id="e1", client_id="a", broker_id=2, metadata_epoch=4,
                    error_code=0, broker_count=3, response_cluster_id="c1", kafka_offset=17)
    beat = dict(event_type="broker_heartbeat", event_id="e2", broker_id=1, incarnation_id=7, kafka_offset=18)
    rows = [routed("brokers", 0, T0 + 1, **response), routed("clients", 3, T0 + 1, **response),
            routed("brokers", 0, T0 + 2, **beat)]
    brokers, clients = (unpack(p["payload"]) for p in pack(table(rows)).to_pylist()[:2])
    assert brokers == [
        {"cluster_id": "c1", "event_type": "metadata_response", "client_id": "a", "broker_id": 2,
         "metadata_epoch": 4, "error_code": 0, "event_time": T0 + 1},
        {"cluster_id": "c1", **beat, "event_time": T0 + 2}]
    assert clients == [{"cluster_id": "c1", **response, "event_time": T0 + 1}]


def test_dead_letter_bytes_survive_the_pack():
    (letter,) = unpack(pack(table(ROWS)).column("payload")[3].as_py())
    assert letter == {"cluster_id": "", "dlq_reason": "bad_magic_byte", "raw_value": b"\x07junk"}


def test_map_in_arrow_function_routes_packs_skips_empty_batches_and_matches_the_declared_schema():
    from streaming.spark.replay import rows_to_batch
    from tests.support.builders import hb, response

    evs = [dict(hb(1, 1), event_time=T0 + 1), dict(response(2, "a", 1, 5), event_time=T0 + 2)]
    batch = rows_to_batch(evs)
    out = list(route_and_pack(16, EVENT_TIME_LIMITS)([batch.slice(0, 0), batch]))
    assert len(out) == 1
    assert out[0].schema.names == PACK_SCHEMA.names
    packs = out[0].to_pylist()
    # the clock row counts records: the response is in two packs but one record
    assert sorted((p["kind"], p["events"]) for p in packs) == [("brokers", 2), ("clients", 1), (CLOCK, 2)]


def test_a_batch_of_only_dead_letters_is_counted_by_a_clock_row_without_time():
    """Why: Spark's input rows are packs; the records a batch read are counted from the clock rows
    (streaming.sinks.metrics.input_records), and undecodable records are records too. Their time is no
    event time, so that clock row moves no watermark and no key's horizon."""
    dead = pa.RecordBatch.from_pylist([{"event_type": None, "event_time": None, "cluster_id": None,
                                        "error_code": None, "metadata_epoch": None, "client_id": None,
                                        "group_id": None, "kafka_partition": p, "dlq_reason": "bad_magic_byte",
                                        "dlq_detail": "", "raw_value": b"x"} for p in range(3)],
                                      schema=pa.schema([("event_type", pa.string()), ("event_time", pa.timestamp("us", "UTC")),
                                                        ("cluster_id", pa.string()), ("error_code", pa.int32()),
                                                        ("metadata_epoch", pa.int64()), ("client_id", pa.string()),
                                                        ("group_id", pa.string()), ("kafka_partition", pa.int32()),
                                                        ("dlq_reason", pa.string()), ("dlq_detail", pa.string()),
                                                        ("raw_value", pa.binary())]))
    (out,) = list(route_and_pack(16, EVENT_TIME_LIMITS)([dead]))
    clock = [p for p in out.to_pylist() if p["kind"] == CLOCK]
    assert [(c["events"], c["event_time"], c["clock_ms"]) for c in clock] == [(3, None, None)]
    assert sum(p["events"] for p in out.to_pylist() if p["kind"] == "dead_letter") == 3


def test_a_keys_packs_unpack_together_in_order_whatever_columns_each_kept():
    """Why: the processor converts all packs of a key at once; a column one pack dropped (all
    null there) must not leak a None into the other pack's events or lose an event."""
    heartbeat = routed("brokers", 0, T0 + 1, event_type="broker_heartbeat", broker_id=1, incarnation_id=7)
    response = routed("brokers", 0, T0 + 2, event_type="metadata_response", client_id="a", metadata_epoch=4,
                      broker_id=2)
    first, second = (pack(table([row])).column("payload")[0].as_py() for row in (heartbeat, response))
    assert unpack(first, second) == unpack(first) + unpack(second)
    assert "client_id" not in unpack(first, second)[0] and "incarnation_id" not in unpack(first, second)[1]
    assert unpack() == []


def test_map_in_arrow_function_gathers_small_input_batches_into_one_pack_per_key():
    """Why: Spark cuts a task's rows into 10,000-row Arrow batches; a pack per key per batch made
    most packs a handful of events, each paying a pack's fixed cost in the stateful stage."""
    from streaming.spark.replay import rows_to_batch
    from tests.support.builders import hb

    batches = [rows_to_batch([dict(hb(1, 1), event_time=T0 + i)]) for i in range(5)]
    (gathered,) = list(route_and_pack(16, EVENT_TIME_LIMITS)(iter(batches)))
    assert [(p["kind"], p["events"]) for p in gathered.to_pylist()] == [("brokers", 5), (CLOCK, 5)]
    bounded = list(route_and_pack(16, EVENT_TIME_LIMITS, pack_rows=2)(iter(batches)))
    assert [sum(p["events"] for p in out.to_pylist() if p["kind"] == "brokers") for out in bounded] == [2, 2, 1]


def _timed(*pairs):
    return pa.table({"event_time": [t for t, _ in pairs], "event_id": [i for _, i in pairs]})


def test_ready_and_waiting_orders_by_time_what_waited_first_on_ties():
    """Why: the engine applies events in event-time order, ties in arrival order, and events that
    waited arrived before the new ones: the split must give exactly that order (the engine's own
    buffer did: buffer + new, sorted stably)."""
    waited = _timed((300, "w1"), (500, "w2"))
    new = _timed((500, "n1"), (100, "n2"), (300, "n3"), (900, "n4"))
    ready, waiting = ready_and_waiting(waited, new, horizon=500)
    assert ready.column("event_id").to_pylist() == ["n2", "w1", "n3", "w2", "n1"]  # horizon included
    assert waiting.column("event_id").to_pylist() == ["n4"]


def test_ready_and_waiting_with_nothing_on_either_side():
    new = _timed((100, "a"), (200, "b"))
    ready, waiting = ready_and_waiting(None, new, horizon=1000)
    assert ready.column("event_id").to_pylist() == ["a", "b"] and waiting is None
    ready, waiting = ready_and_waiting(new, None, horizon=50)
    assert ready is None and waiting.column("event_id").to_pylist() == ["a", "b"]
    assert ready_and_waiting(None, None, horizon=0) == (None, None)



def test_ready_and_waiting_leaves_out_what_skip_picks_among_the_ready_rows_only():
    """Why: the brokers key leaves its repeated serves out of ready without copying them; skip
    must see the ready rows in the engine's order, and what waits must stay whole (a row past
    the horizon is not this step's to judge)."""
    waited = _timed((300, "w1"))
    new = _timed((200, "n1"), (100, "n2"), (900, "n3"))
    seen = []

    def skip(table, rows):
        seen.append(table.take(rows).column("event_id").to_pylist())
        return np.array([eid == "w1" for eid in seen[-1]])

    ready, waiting = ready_and_waiting(waited, new, horizon=500, skip=skip)
    assert seen == [["n2", "n1", "w1"]]
    assert ready.column("event_id").to_pylist() == ["n2", "n1"]
    assert waiting.column("event_id").to_pylist() == ["n3"]
    everything = lambda table, rows: np.ones(len(rows), bool)
    assert ready_and_waiting(None, new, horizon=500, skip=everything)[0] is None

def test_waiting_events_round_trip_through_ipc_chunks():
    """Why: waiting events are stored in bounded chunks."""
    table = _timed(*((t, f"e{t}") for t in range(25)))
    chunks = to_ipc_chunks(table, rows=10)
    assert [count for count, _ in chunks] == [10, 10, 5]
    assert from_ipc_chunks([blob for _, blob in chunks]).equals(table)
    assert from_ipc_chunks([]) is None


class _RunsCode:
    """What a pickle in a tampered checkpoint could hold: unpickling it calls os.system."""

    def __reduce__(self):
        import os

        return os.system, ("touch " + str(_RunsCode.marker),)


def test_a_pickled_chunk_is_refused_and_never_unpickled(tmp_path):
    """Why (issue #22): builds before Arrow IPC pickled the waiting events, and loading them
    unpickled whatever the state store held: whoever could write the checkpoint could run code
    in the job. Such state is refused with the fix, and nothing in it runs."""
    _RunsCode.marker = tmp_path / "ran"
    old = [{"event_time": 1, "event_id": "x", "broker_id": 3}]
    for chunk in (pickle.dumps(old, protocol=5), pickle.dumps([_RunsCode()], protocol=2)):
        with pytest.raises(PickledStateError, match="new checkpoint"):
            from_ipc_chunks([chunk])
    assert not _RunsCode.marker.exists()


def test_packs_are_compressed_and_uncompressed_chunks_of_an_older_version_still_load():
    """Why: a pack crosses Python, the JVM, the shuffle and the state store; ids and event types
    repeat in every event, so LZ4 makes each copy ~3x smaller. Buffer chunks stored by a version
    that wrote plain IPC must still load after the upgrade."""
    rows = [routed("clients", 0, T0 + i, event_type="metadata_response", client_id=f"client-{i % 50}",
                   response_cluster_id="kc-1", metadata_epoch=4, broker_id=i % 3) for i in range(2000)]
    (payload,) = [p for p, kind in zip(*(pack(table(rows)).column(c).to_pylist() for c in ("payload", "kind")))
                  if kind == "clients"]
    events = pa.ipc.open_stream(payload).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, events.schema) as plain:
        plain.write_table(events)
    assert len(payload) * 2 < sink.getvalue().size
    assert from_ipc_chunks([sink.getvalue().to_pybytes()]).equals(events)
    assert unpack(payload) == unpack(sink.getvalue().to_pybytes())


def test_hold_rows_carry_the_held_clock_to_each_shard_and_count_no_records():
    from streaming.engine.keys import HOLD
    from streaming.spark.packs import hold_rows

    rows = hold_rows(1_795_000_010_000, [4, 0, 9]).to_pylist()
    assert [(r["cluster_id"], r["kind"], r["shard"], r["clock_ms"], r["events"]) for r in rows] == [
        ("", HOLD, s, 1_795_000_010_000, 0) for s in (4, 0, 9)]
