"""Scripted incidents with ground truth, and the steady state.

``run_scenario("partitioned_broker")`` -> :class:`ScenarioResult` (events in event-time order +
:class:`~streaming.tools.simulate.truth.GroundTruth`). Every scenario is: a steady-state warm-up, the
incident, recovery, and a tail long enough for the last expected alert (and its resolution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from streaming.config import RuleSettings
from streaming.tools.simulate.cluster import ClusterSim
from streaming.tools.simulate.model import DEFAULT_START_MS, ClusterShape, SimulationError
from streaming.tools.simulate.scenarios import brokers, clients
from streaming.tools.simulate.scenarios.base import Scenario, Script, scenario_settings, warmup_ms
from streaming.tools.simulate.truth import GroundTruth, settings_dict

_ALL = [
    Scenario("baseline", "steady state only: nothing may fire", brokers.baseline),
    Scenario("rolling_restart", "each broker in turn: controlled shutdown, then a higher incarnation",
             brokers.rolling_restart),
    Scenario("partitioned_broker", "one broker loses the controller but keeps serving its old epoch, then heals",
             brokers.partitioned_broker),
    Scenario("partitioned_broker_fleet", "one broker loses the controller but keeps serving its old epoch; every "
             "client asks it once (--clients 10000: the volume per-client alerts roll up)",
             brokers.partitioned_broker_fleet),
    Scenario("zombie_incarnation", "a broker restarts fast; its old process sends a heartbeat or two",
             brokers.zombie_incarnation),
    Scenario("duplicate_broker_id", "a second process with the same broker id; both keep heartbeating",
             brokers.duplicate_broker_id),
    Scenario("controller_failover", "a new controller (controller_epoch + 1); metadata epochs keep growing",
             clients.controller_failover),
    Scenario("metadata_epoch_regression", "the controller numbers an update below the previous one",
             clients.metadata_epoch_regression),
    Scenario("all_brokers_replaced", "every broker decommissioned and replaced; 'none' clients stay stuck",
             clients.all_brokers_replaced),
    Scenario("proxy_rebootstrap_required", "a proxy node answers REBOOTSTRAP_REQUIRED (129) to many clients",
             clients.proxy_rebootstrap_required),
    Scenario("wrong_cluster_rebootstrap", "a client rebootstraps into another cluster",
             clients.wrong_cluster_rebootstrap),
    Scenario("connection_storm", "a node is unreachable: many clients' connection setups time out (KIP-601)",
             clients.connection_storm),
    Scenario("flapping_broker", "a broker goes silent and returns, again and again", brokers.flapping_broker),
    Scenario("cluster_silent", "every broker stops heartbeating at once, later all come back",
             brokers.cluster_silent),
    Scenario("stuck_stopping", "a broker stays STOPPING past broker.stopping.grace.ms", brokers.stuck_stopping),
    Scenario("broker_not_returned", "a broker shuts down and does not come back", brokers.broker_not_returned),
    Scenario("commit_epoch_regression", "a consumer commits with an older metadata epoch",
             clients.commit_epoch_regression),
]
SCENARIOS: dict[str, Scenario] = {s.name: s for s in _ALL}


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    events: list[dict]
    truth: GroundTruth


def run_scenario(name: str, *, settings: RuleSettings | None = None, shape: ClusterShape | None = None,
                 seed: int = 1, start_ms: int = DEFAULT_START_MS) -> ScenarioResult:
    """Generate one scenario's events and ground truth (``settings`` default: scenario_settings())."""
    if name not in SCENARIOS:
        raise SimulationError("--scenario", f"unknown scenario {name!r}",
                              f"use one of {', '.join(SCENARIOS)} (epochwatch simulate --list)")
    settings = settings or scenario_settings()
    sim = ClusterSim(shape or ClusterShape(), settings, seed=seed, start_ms=start_ms)
    script = Script(name, sim, seed)
    SCENARIOS[name].script(script)
    generated = list(sim.run(script.end_ms))
    script.finish()
    truth = GroundTruth(
        scenario=name, seed=seed, cluster_id=sim.cluster_id, settings=settings_dict(settings),
        start_ms=start_ms, end_ms=script.end_ms,
        incident_at_ms=script.incident_at if script.has_incident else None,
        expected=tuple(script.expected), allowed=tuple(script.allowed), description=SCENARIOS[name].description)
    late = [e for e in truth.expected if max(e.not_after_ms, e.resolves_by_ms or 0) > truth.end_ms]
    if late:  # a scenario bug: the stream would end before the engine could be judged
        raise AssertionError(f"{name}: expectations past the end of the stream: {late}")
    return ScenarioResult(name, generated, truth)


def steady_state(*, duration_ms: int, settings: RuleSettings | None = None, shape: ClusterShape | None = None,
                 seed: int = 1, start_ms: int = DEFAULT_START_MS) -> Iterator[dict]:
    """The steady state as a stream (nothing materialised: use it for millions of events)."""
    if duration_ms <= 0:
        raise SimulationError("--duration", f"{duration_ms} ms is not positive", "pass e.g. --duration 10m")
    sim = ClusterSim(shape or ClusterShape(), settings or scenario_settings(), seed=seed, start_ms=start_ms)
    return sim.run(start_ms + duration_ms)


def steady_truth(*, duration_ms: int, settings: RuleSettings | None = None, shape: ClusterShape | None = None,
                 seed: int = 1, start_ms: int = DEFAULT_START_MS) -> GroundTruth:
    """Steady state: nothing may fire."""
    return GroundTruth(scenario="steady", seed=seed, cluster_id=(shape or ClusterShape()).cluster_id,
                       settings=settings_dict(settings or scenario_settings()), start_ms=start_ms,
                       end_ms=start_ms + duration_ms, incident_at_ms=None,
                       description="steady state only: nothing may fire")


__all__ = ["SCENARIOS", "Scenario", "ScenarioResult", "Script", "run_scenario", "scenario_settings",
           "steady_state", "steady_truth", "warmup_ms"]
