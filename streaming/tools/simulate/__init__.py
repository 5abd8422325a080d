"""Realistic Kafka cluster telemetry with ground truth: the steady state, scripted incidents
(``SCENARIOS``) and a checker for an engine's alerts. Seeded and deterministic."""

from streaming.tools.simulate.model import DEFAULT_START_MS, ClusterShape, SimulationError
from streaming.tools.simulate.scenarios import (
                                          SCENARIOS,
                                          ScenarioResult,
                                          run_scenario,
                                          scenario_settings,
                                          steady_state,
                                          steady_truth,
)
from streaming.tools.simulate.truth import AllowedAlert, ExpectedAlert, GroundTruth, TruthReport, check

__all__ = ["DEFAULT_START_MS", "ClusterShape", "SimulationError", "SCENARIOS", "ScenarioResult", "run_scenario",
           "scenario_settings", "steady_state", "steady_truth", "AllowedAlert", "ExpectedAlert", "GroundTruth",
           "TruthReport", "check"]
