"""Realistic Kafka cluster telemetry with ground truth: the steady state, scripted incidents
(``SCENARIOS``) and a checker for an engine's alerts. Seeded and deterministic."""

from streaming.simulate.model import DEFAULT_START_MS, ClusterShape, SimulationError
from streaming.simulate.scenarios import (SCENARIOS, ScenarioResult, run_scenario, scenario_settings,
                                          steady_state, steady_truth)
from streaming.simulate.truth import AllowedAlert, ExpectedAlert, GroundTruth, TruthReport, check

__all__ = ["DEFAULT_START_MS", "ClusterShape", "SimulationError", "SCENARIOS", "ScenarioResult", "run_scenario",
           "scenario_settings", "steady_state", "steady_truth", "AllowedAlert", "ExpectedAlert", "GroundTruth",
           "TruthReport", "check"]
