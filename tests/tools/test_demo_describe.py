"""The simulated demo's description of what it plays: `epochwatch demo --simulated --scenario all`
crashed on the baseline scenario, which has no incident (incident_at_ms is None)."""

import io

from streaming.tools.demo import describe, play_scenarios


def test_a_scenario_without_an_incident_is_described_as_such():
    events, truths = play_scenarios(["baseline", "partitioned_broker"], seed=1)
    out = io.StringIO()
    describe(["baseline", "partitioned_broker"], events, truths, out)
    text = out.getvalue()
    assert "baseline (cluster sim-baseline), no incident" in text
    assert "partitioned_broker (cluster sim-partitioned-broker), incident at +" in text
