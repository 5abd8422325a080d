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


@pytest.mark.spark
def test_a_checkpoint_of_a_retired_state_layout_is_refused_before_the_query_starts(spark, tmp_path):
    """Why: Spark starts a query on a checkpoint whose state variables it no longer declares, each
    new variable empty: a job upgraded from a build with a variable per kind of key would forget
    every broker and client it knew, and say nothing (seen: its first batches resolved every open
    alert of a cluster it no longer held)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    from streaming.config import ConfigError
    from streaming.spark.session import refuse_retired_state

    class OldLayout(StatefulProcessor):
        def init(self, handle):
            self.brokers = handle.getValueState("brokers", "count long")

        def handleInputRows(self, key, rows, timerValues):
            count = sum(len(pdf) for pdf in rows)
            self.brokers.update((count,))
            yield pd.DataFrame({"k": [key[0]], "n": [count]})

    source = tmp_path / "in"
    spark.createDataFrame([("c1",), ("c1",), ("c2",)], "k string").write.parquet(str(source))
    checkpoint = str(tmp_path / "ckpt")
    refuse_retired_state(spark, checkpoint)  # nothing there yet: nothing to refuse
    query = (spark.readStream.schema("k string").parquet(str(source)).groupBy("k")
             .transformWithStateInPandas(OldLayout(), outputStructType="k string, n long", outputMode="Append",
                                         timeMode="None")
             .writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    with pytest.raises(ConfigError, match="brokers") as refused:
        refuse_retired_state(spark, checkpoint)
    assert refused.value.key == "checkpoint_location" and "new checkpoint" in refused.value.fix
