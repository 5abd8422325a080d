"""What `epochwatch run` prints when the query fails, and what it refuses to start."""

import pytest

from streaming.spark.job import failure_text

# Spark 4's message for a checkpoint whose brokers variable was a ListState (measured: a query
# declaring a ValueState of the same name on that checkpoint)
SPARK_LAYOUT_ERROR = ("[STREAM_FAILED] Query [id = 2ce9e037, runId = d8255001] terminated with exception: "
                      "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing "
                      "state value schema.")


def test_a_checkpoint_with_another_state_layout_gets_the_fix():
    """Why: Spark's message names neither the checkpoint nor what to do; on-call needs both."""
    text = failure_text(RuntimeError(SPARK_LAYOUT_ERROR))
    assert text.startswith(SPARK_LAYOUT_ERROR)
    assert "checkpoint_location" in text and "new checkpoint" in text and "docs/operations.md" in text


def test_other_failures_are_printed_as_they_are():
    assert failure_text(RuntimeError("broker unreachable")) == "broker unreachable"


def test_available_now_in_processing_time_is_refused_before_anything_starts():
    """Spark's stateful operator asks for another batch after every processing-time batch: the
    query would never end (it ran 2,858 empty batches in 14 minutes before this check)."""
    from streaming import config
    from streaming.spark.job import start
    from streaming.spark.pipeline import PROCESSING_TIME

    with pytest.raises(ValueError, match="EventTime"):
        start(None, config.load(), [], time_mode=PROCESSING_TIME, available_now=True)
