"""What a scenario script works with: the simulator, the thresholds, timing helpers and the
ground truth it builds. Scenario functions take a :class:`Script` and return nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from streaming.config import RuleSettings
from streaming.tools.simulate.cluster import ClusterSim
from streaming.tools.simulate.model import BrokerProcess, SimulationError
from streaming.tools.simulate.truth import SEVERITIES, AllowedAlert, ExpectedAlert


def scenario_settings(**overrides) -> RuleSettings:
    """Kafka's defaults with the long timers shortened, so a scenario is minutes of event time.

    The ground truth records the settings used: run the engine with the same ones
    (``GroundTruth.rule_settings()`` or the ``rules:`` keys in ``truth.settings``).
    """
    fast = dict(metadata_max_age_ms=10_000, rebootstrap_trigger_ms=60_000, stopping_grace_ms=60_000,
                not_returned_grace_ms=120_000, flapping_window_ms=180_000, stale_incident_quiet_ms=30_000)
    fast.update(overrides)
    return RuleSettings(**fast)


def warmup_ms(settings: RuleSettings) -> int:
    """Steady state before the incident: every client has accepted metadata (one
    metadata.max.age.ms) and the engine has seen every broker (two heartbeat timeouts)."""
    raw = max(2 * settings.controller_heartbeat_timeout_ms, settings.metadata_max_age_ms) \
        + 2 * settings.broker_heartbeat_interval_ms
    return -(-raw // 1000) * 1000


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    script: Callable[["Script"], None]


class Script:
    def __init__(self, name: str, sim: ClusterSim, seed: int):
        self.name = name
        self.sim = sim
        self.settings = s = sim.settings
        self.shape = sim.shape
        self.rng = random.Random(f"{name}/{seed}")  # the script's own choices; the sim's stream stays put
        self.interval = s.broker_heartbeat_interval_ms
        self.slack = 2 * self.interval
        self.tail_ms = max(30_000, s.controller_heartbeat_timeout_ms + s.heartbeat_timeout_pending_ms + self.slack)
        self.incident_at = sim.start_ms + warmup_ms(s)
        self.has_incident = True
        self.end_ms = self.incident_at
        self.expected: list[ExpectedAlert] = []
        self.allowed: list[AllowedAlert] = []
        self._after: list[Callable[[], None]] = []
        self.broker_ids = sorted(sim.registered)
        self.pick = self.broker_ids[seed % len(self.broker_ids)]  # "broker k" of the scenario

    # --- scheduling ---------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], object]) -> None:
        self.sim.at(time_ms, lambda _: action())

    def end_after(self, time_ms: int) -> None:
        """The scenario runs at least until ``time_ms`` plus the tail."""
        self.end_ms = max(self.end_ms, time_ms + self.tail_ms)

    def after_run(self, fn: Callable[[], None]) -> None:
        """``fn`` runs once the events are generated (to derive the truth from sim facts)."""
        self._after.append(fn)

    def finish(self) -> None:
        for fn in self._after:
            fn()

    def broker(self, broker_id: int) -> BrokerProcess:
        """The process the controller currently knows for ``broker_id``."""
        return self.sim.registered[broker_id]

    def other_broker(self, broker_id: int) -> int:
        return self.broker_ids[(self.broker_ids.index(broker_id) + 1) % len(self.broker_ids)]

    def facts(self, kind: str) -> list[tuple]:
        return [f for f in self.sim.facts if f[0] == kind]

    def require(self, ok: bool, param: str, problem: str, fix: str) -> None:
        if not ok:
            raise SimulationError(param, f"scenario {self.name}: {problem}", fix)

    # --- ground truth -------------------------------------------------------------------------

    def expect(self, alertname: str, *, not_before: int, not_after: int, why: str,
               resolves_by: int | None = None, min_count: int = 1, max_count: int | None = None,
               **labels) -> None:
        self.expected.append(ExpectedAlert(
            alertname, self._labels(labels), SEVERITIES[alertname], int(not_before), int(not_after),
            None if resolves_by is None else int(resolves_by), min_count, max_count, why))

    def allow(self, alertname: str, *, why: str, **labels) -> None:
        self.allowed.append(AllowedAlert(alertname, self._labels(labels), why))

    def allow_lag_while_silent(self, broker_ids, behind_ms: int) -> None:
        """A broker that stopped applying updates may be reported as lagging until the engine can
        tell it is down; with metadata.lag.grace.ms below that time a correct engine may fire."""
        if self.settings.metadata_lag_grace_ms <= behind_ms:
            for bid in broker_ids:
                self.allow("BrokerMetadataLag", broker_id=bid,
                           why=f"metadata.lag.grace.ms is within the {behind_ms} ms it is silent but not yet inactive")

    def _labels(self, labels: dict) -> dict[str, str]:
        return {"cluster": self.sim.cluster_id, **{k: str(v) for k, v in labels.items()}}
