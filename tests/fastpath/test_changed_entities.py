"""streaming.fastpath.changed_entities: a clients or commits key evaluates only the entities changed
since its last evaluation or whose time has come, not every one. That is only worth having if it
is exact, so the engine with it must give exactly what it gives with every entity evaluated each
time (rules.fast.paths off): every step's alerts (and their order), transitions, status rows,
summaries, refusals, touched ids, late count and deadline, and the state it keeps."""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.config import RuleSettings
from streaming.engine.evaluation import EveryEntity
from streaming.engine.key_engine import KeyEngine, StepResult
from streaming.engine.local import LocalDetector
from streaming.fastpath.changed_entities import ChangedEntities
from streaming.rules.lifecycle import AlertTracker, condition
from streaming.rules.records import NO_TIME, expire, expire_among, first_after
from streaming.rules.table import RulesTable
from streaming.tools.simulate import SCENARIOS, ClusterShape, run_scenario
from tests.support.builders import CLUSTER, commit, failed, rebootstrap, reset, response
from tests.support.event_strategies import examples


def _plain(rule_settings: RuleSettings) -> RuleSettings:
    return dataclasses.replace(rule_settings, fast_paths="off")


def _step_outputs(result: StepResult) -> tuple:
    return (result.alerts, result.transitions, result.status, result.summaries,
            [(ev["event_id"], why) for ev, why in result.invalid + result.refused + result.capped],
            result.touched, result.late, result.deadline)


def _kept_state(engine: KeyEngine) -> tuple:
    """What the state store keeps of a key: its entities, the open alerts in their order, horizon
    and waiting events (entities compared as a mapping: the quiet-run pass, another fast path,
    adds clients in another order)."""
    entities = {key: dataclasses.asdict(r) for key, r in getattr(engine.table, engine.kind).items()}
    cluster = dataclasses.asdict(engine.table.cluster) if engine.kind == "brokers" else None
    return entities, cluster, engine.tracker.to_rows(), engine.horizon, engine.buffer


def _reloaded(engine: KeyEngine) -> KeyEngine:
    """A key rebuilt from what the state store keeps of it (as streaming.spark.key_steps.load does):
    nothing an evaluation built along the way survives."""
    fresh = KeyEngine.new(engine.kind, engine.cluster_id, engine.shard, engine.settings)
    store = getattr(fresh.table, engine.kind)
    for key, record in getattr(engine.table, engine.kind).items():
        store[key] = copy.deepcopy(record)
    if engine.kind == "brokers":
        fresh.table.cluster = copy.deepcopy(engine.table.cluster)
    fresh.tracker = AlertTracker.from_rows(engine.cluster_id, engine.settings, engine.tracker.to_rows())
    fresh.horizon, fresh.buffer = engine.horizon, list(engine.buffer)
    return fresh


def _detect(events: list[dict], rule_settings: RuleSettings, batch: int, until: int,
            reload_at: frozenset = frozenset()) -> tuple[list, dict]:
    """The single-process detector over ``events``, ``batch`` at a time, then to ``until``: every
    key's step outputs in order, and every key's kept state. Before each batch in ``reload_at``
    every key is rebuilt from its kept state."""
    detector = LocalDetector(rule_settings)
    steps = []
    for n, start in enumerate(range(0, len(events), batch)):
        if n in reload_at:
            detector.engines = {key: _reloaded(e) for key, e in detector.engines.items()}
        steps.append([_step_outputs(r) for r in detector.feed(events[start:start + batch])])
    steps.append([_step_outputs(r) for r in detector.advance(until)])
    return steps, {key: _kept_state(e) for key, e in detector.engines.items()}


def _assert_same(events: list[dict], rule_settings: RuleSettings, batch: int, until: int, **kw) -> list:
    """Both evaluations give the same; the step outputs."""
    changed = _detect(events, rule_settings, batch, until, **kw)
    every = _detect(events, _plain(rule_settings), batch, until, **kw)
    for n, (a, b) in enumerate(zip(changed[0], every[0])):
        assert a == b, f"step {n} differs"
    assert changed == every
    return changed[0]


@pytest.mark.parametrize("batch", [97, 5000])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_gives_what_evaluating_every_entity_gives(name, batch):
    result = run_scenario(name)
    _assert_same(result.events, result.truth.rule_settings(), batch, result.truth.end_ms + 3_600_000)


def _out_of_order(events: list[dict], lateness_ms: int, seed: int) -> list[dict]:
    """``events`` as a lagging producer delivers them: each moved by up to the allowed lateness (out
    of order, not late), and one in 30 by 2-40 times it (late: applied behind the key's horizon)."""
    rng = random.Random(seed)

    def delivered(ev):
        late = rng.random() < 1 / 30
        return ev["event_time"] + (rng.randint(2, 40) * lateness_ms if late else rng.randrange(lateness_ms))

    return sorted(events, key=delivered)


@pytest.mark.parametrize("batch", [97, 1000])
def test_a_fleet_incident_out_of_order_and_late(batch):
    """Why: every client of the partitioned broker opens and closes an incident, in event order or
    not; the late ones are applied behind the horizon (evaluated once, at it), and the
    evaluations in between must find every incident the full one finds."""
    result = run_scenario("partitioned_broker_fleet", shape=ClusterShape(clients=300))
    rule_settings = result.truth.rule_settings()
    events = _out_of_order(result.events, rule_settings.allowed_lateness_ms, seed=batch)
    steps = _assert_same(events, rule_settings, batch, result.truth.end_ms + 3_600_000)
    outputs = [key_step for step in steps for key_step in step]
    assert sum(late for *_, late, _ in outputs) > 100, "events applied behind the horizon"
    stale = {a["labels"]["client_id"] for alerts, *_ in outputs for a in alerts
             if a["alertname"] == "StaleMetadataResponse" and a["status"] == "resolved"}
    # (a client whose stale answer is read before the newer one it contradicts sees no incident)
    assert len(stale) > 250, "hundreds of incidents opened and ended"


TIGHT = RuleSettings(rebootstrap_trigger_ms=3000, stale_incident_quiet_ms=2000, entity_expiry_ms=8000,
                     allowed_lateness_ms=300, client_shards=2)
# one shard, and entities forgotten sooner than a stale incident ends: a silent client is kept by
# its open alert until the incident ends without any event of it
SOON_FORGOTTEN = dataclasses.replace(TIGHT, client_shards=1, entity_expiry_ms=2500, stale_incident_quiet_ms=6000)


@st.composite
def client_and_commit_streams(draw):
    """A few clients and consumer groups, small steps and long gaps (entities forgotten while an
    alert keeps others), stale answers, failures past the rebootstrap trigger, rebootstraps into
    another cluster, commits at older epochs, resets, out-of-order and late arrivals."""
    events, t = [], 0
    for _ in range(draw(st.integers(1, 120))):
        t += draw(st.sampled_from([0, 1, 50, 300, 1100, 2500, 6000, 9000]))
        at = max(0, t - draw(st.sampled_from([0, 0, 0, 0, 200, 1500, 9000])))
        client = draw(st.sampled_from(["a", "b", "c", "d", "e"]))
        kind = draw(st.sampled_from(["response"] * 6 + ["failed", "rebootstrap", "commit", "commit", "reset"]))
        if kind == "response":
            events.append(response(at, client, draw(st.integers(1, 3)), draw(st.integers(7, 11)),
                                   error=draw(st.sampled_from([0] * 8 + [129])),
                                   cluster=draw(st.sampled_from(["kc-1"] * 8 + [None, "kc-2"]))))
        elif kind == "failed":
            events.append(failed(at, client))
        elif kind == "rebootstrap":
            events.append(rebootstrap(at, client, after=draw(st.sampled_from(["kc-1", "kc-2"]))))
        elif kind == "commit":
            events.append(commit(at, draw(st.sampled_from(["g1", "g2", "g3"])), draw(st.integers(4, 8)),
                                 partition=draw(st.integers(0, 2))))
        elif draw(st.integers(0, 4)) == 0:
            events.append(reset(at))
    return events


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=client_and_commit_streams(), batch=st.sampled_from([1, 3, 17, 10_000]),
       reload_at=st.frozensets(st.integers(0, 40), max_size=4),
       rule_settings=st.sampled_from([TIGHT, SOON_FORGOTTEN]))
def test_random_streams_give_what_evaluating_every_entity_gives(events, batch, reload_at, rule_settings):
    """Reloads: a key rebuilt from the state store (another worker, a restart) evaluates every
    entity once, then again only those changed or due."""
    until = max((e["event_time"] for e in events), default=0) + 60_000
    _assert_same(events, rule_settings, batch, until, reload_at=reload_at)


def test_the_switch_chooses_the_evaluation():
    """The switch the equivalence tests flip must reach the engine: on, the clients and commits
    keys evaluate changed entities alone; off, and for the brokers and nodes keys, every one."""
    for fast, kind, expected in [("on", "clients", ChangedEntities), ("on", "commits", ChangedEntities),
                                 ("on", "brokers", EveryEntity), ("on", "nodes", EveryEntity),
                                 ("off", "clients", EveryEntity), ("off", "commits", EveryEntity)]:
        engine = KeyEngine.new(kind, CLUSTER, 0, RuleSettings(fast_paths=fast))
        engine.step([], 1000)
        assert type(engine.evaluation) is expected, (fast, kind)


def test_an_evaluation_looks_only_at_what_changed_or_is_due():
    """Why (the point of it all): with 2,000 clients in a stale incident, a new stale answer must
    not make the engine list every client's conditions again."""
    engine = KeyEngine.new("clients", CLUSTER, 0, RuleSettings())
    clients = [f"c{i:04d}" for i in range(2000)]
    engine.step([response(1000, c, 1, 9) for c in clients] + [response(2000, c, 2, 8) for c in clients], 2000)
    assert len(engine.tracker.open) == 2000
    asked = []
    conditions_of = engine.table.conditions_of
    engine.table.conditions_of = lambda ids, now: asked.append(set(ids)) or conditions_of(ids, now)
    result = engine.step([response(2100, "c0007", 3, 8)], 2100)
    assert [a["labels"]["client_id"] for a in result.alerts] == ["c0007"]
    assert {"c0007"} in asked and all(ids <= {"c0007"} for ids in asked), "c0007 alone, at every evaluation"


# --- a table whose alerts wait out a pending period ----------------------------------------
# No client or commit rule has one, so the pending alerts' firing times (kept with the entities'
# deadlines) are proven on a table of their own: each entity's condition holds from an event on
# for HOLDS_MS (a deadline), as a BrokerHeartbeatTimeout (fires after its pending period).

HOLDS_MS = 4000
PENDING = RuleSettings(heartbeat_timeout_pending_ms=3000, entity_expiry_ms=6000)


@dataclasses.dataclass
class Thing:
    client_id: str
    since_ms: int = NO_TIME
    last_event_ms: int = NO_TIME


class PendingTable(RulesTable):
    evaluates_entities = True

    def __init__(self):
        self.clients: dict[str, Thing] = {}
        self.changed: set[str] = set()

    def heard(self, client_id: str, t: int, holds: bool) -> None:
        thing = self.clients.setdefault(client_id, Thing(client_id))
        thing.last_event_ms = max(thing.last_event_ms, t)
        thing.since_ms = (t if thing.since_ms == NO_TIME else thing.since_ms) if holds else NO_TIME
        self.changed.add(client_id)

    def take_changed(self) -> set[str]:
        taken, self.changed = self.changed, set()
        return taken

    def advance(self, now: int) -> None:
        self.advance_entities(list(self.clients), now)

    def advance_entities(self, client_ids, now: int) -> None:
        for thing in filter(None, map(self.clients.get, client_ids)):
            if thing.since_ms != NO_TIME and now >= thing.since_ms + HOLDS_MS:
                thing.since_ms = NO_TIME

    def conditions(self, now: int) -> list:
        return [c for conditions in self.conditions_of(self.clients, now).values() for c in conditions]

    def conditions_of(self, client_ids, now: int) -> dict:
        held = [t for t in filter(None, map(self.clients.get, client_ids)) if t.since_ms != NO_TIME]
        return {t.client_id: [condition("BrokerHeartbeatTimeout", t.since_ms, client_id=t.client_id, broker_id=1)]
                for t in sorted(held, key=lambda t: t.client_id)}

    def next_deadline(self, now: int) -> int | None:
        return first_after([d for c in self.clients for d in self.entity_deadlines(c)], now)

    def entity_deadlines(self, client_id: str) -> list[int]:
        thing = self.clients.get(client_id)
        return [thing.since_ms + HOLDS_MS] if thing is not None and thing.since_ms != NO_TIME else []

    def expire(self, now: int, has_open_alert) -> list:
        return expire(self.clients, now, PENDING.entity_expiry_ms, has_open_alert)

    def expire_entities(self, client_ids, now: int, has_open_alert) -> list:
        return expire_among(self.clients, client_ids, now, PENDING.entity_expiry_ms, has_open_alert)


def _drive(evaluation: type, heard: list[tuple[int, str, bool]]) -> tuple:
    """Evaluate as the key engine does: at every deadline before an event, then at the event."""
    table, tracker = PendingTable(), AlertTracker(CLUSTER, PENDING)
    how = evaluation("clients", table, tracker, PENDING)
    outputs, now = [], 0
    for t, client_id, holds in heard + [(10**6, None, False)]:
        while (deadline := how.deadline(now)) is not None and deadline < t:
            records, gone = how.run(deadline)
            outputs.append((deadline, records, sorted(gone)))
            now = deadline
        if client_id is not None:
            table.heard(client_id, t, holds)
            records, gone = how.run(t)
            outputs.append((t, records, sorted(gone)))
            now = t
    return outputs, tracker.to_rows(), sorted(table.clients)


@settings(max_examples=examples(300), deadline=None)
@given(heard=st.lists(st.tuples(st.sampled_from([0, 0, 400, 1500, 2500, 5000, 9000]),
                                st.sampled_from(["a", "b", "c", "d"]), st.booleans()), max_size=40))
def test_pending_alerts_fire_as_when_every_entity_is_evaluated(heard):
    events, t = [], 0
    for gap, client_id, holds in heard:
        t += gap
        events.append((t, client_id, holds))
    assert _drive(ChangedEntities, events) == _drive(EveryEntity, events)


def test_the_pending_table_fires_after_the_pending_period():
    """The property above is about something: an alert held 4 s fires after its 3 s, resolves at 4 s."""
    outputs, _, _ = _drive(ChangedEntities, [(0, "a", True)])
    assert [(a["status"], a["event_time"]) for _, records, _ in outputs for a in records] == [
        ("firing", 3000), ("resolved", 4000)]
