"""streaming.spark.listeners with a real query: each progress reaches a listener as Spark's JSON of
it, observed metrics included, without PySpark's field-by-field conversion (which cost the driver
JVM a third of its time in the live benchmark)."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming import listener as pyspark_listener

from streaming.spark.listeners import JsonProgressListener

pytestmark = pytest.mark.spark


class Collecting(JsonProgressListener):
    def __init__(self, name: str):
        self.name, self.progress, self.started = name, [], threading.Event()
        self.arrived = threading.Condition()

    def onQueryStarted(self, event) -> None:
        self.started.set()

    def on_progress(self, progress: dict) -> None:
        if progress["name"] == self.name:
            with self.arrived:
                self.progress.append(progress)
                self.arrived.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def test_each_progress_arrives_as_json_without_pyspark_building_it(spark, tmp_path, monkeypatch):
    built = []
    original = pyspark_listener.StreamingQueryProgress.fromJObject.__func__
    monkeypatch.setattr(pyspark_listener.StreamingQueryProgress, "fromJObject",
                        classmethod(lambda cls, j: built.append(1) or original(cls, j)))
    listener = Collecting(f"json-{tmp_path.name}")
    spark.streams.addListener(listener)
    try:
        rows = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
                .observe("counted", F.count(F.lit(1)).alias("rows")))
        query = (rows.writeStream.format("noop").queryName(listener.name).trigger(processingTime="200 milliseconds")
                 .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        try:
            with listener.arrived:
                assert listener.arrived.wait_for(lambda: len(listener.progress) >= 3, 60)
        finally:
            query.stop()
    finally:
        spark.streams.removeListener(listener)
    assert listener.started.is_set(), "the other events still reach the listener"
    first = listener.progress[0]
    assert first["id"] == query.id and isinstance(first["durationMs"]["triggerExecution"], int)
    assert [p["batchId"] for p in listener.progress] == sorted({p["batchId"] for p in listener.progress})
    assert sum(p["observedMetrics"]["counted"]["rows"] for p in listener.progress if p["observedMetrics"]) > 0
    assert built == [], "PySpark's own progress objects were built"
