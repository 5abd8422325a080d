"""streaming.sinks.base.OutputBatch reads what a key's step outputs (streaming.spark.key_steps)."""

from streaming.config import RuleSettings
from streaming.sinks.base import OutputBatch
from streaming.spark.key_steps import KeySteps
from tests.support.builders import heartbeats
from tests.support.key_feed import empty_state, packed, request

KEY = ("c1", "brokers", 0)


def test_a_brokers_step_outputs_one_status_row_that_becomes_a_status_per_broker():
    """Why: the status of every broker a step touched travels as one output row (a JSON array:
    ~1,000 rows per live micro-batch otherwise); the sinks still see one status per broker."""
    rules = RuleSettings()
    step = request(rules, KEY, packed(heartbeats((1, 2, 3), 0, 10_000), KEY), None, 10_000)
    out = KeySteps().step(step, empty_state())
    assert [r["kind"] for r in out.rows].count("broker_status") == 1
    batch = OutputBatch.from_rows(5, out.rows)
    assert sorted(s["broker_id"] for s in batch.broker_status) == [1, 2, 3]
    assert {(s["cluster_id"], s["state"]) for s in batch.broker_status} == {("c1", "ACTIVE")}
