"""streaming.spark.sessionless_conf: the driver JVM's threads without a session (transformWithState's
state servers) read the job's SQL conf, and a thread with a session still reads its own."""

import dataclasses
import io
import json
import threading

import pytest

from streaming import config
from streaming.sinks.memory import MemorySink
from streaming.spark.job import start
from streaming.spark.pipeline import EVENT_TIME
from streaming.spark.replay import run_staged, stage_jsonl
from streaming.spark.sessionless_conf import give_sessionless_threads_the_session_conf
from streaming.tools.simulate import run_scenario
from udfs.event_columns import spark_schema

pytestmark = pytest.mark.spark

MODE = "spark.sql.codegen.factoryMode"


def on_a_new_jvm_thread(fn):
    """py4j gives each Python thread a JVM thread of its own, with no active session."""
    out = []

    def run():
        try:
            out.append(fn())
        except Exception as exc:  # handed to the test's thread, where pytest sees it
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if isinstance(out[0], Exception):
        raise out[0]
    return out[0]


def mode_read(spark):
    return lambda: spark._jvm.org.apache.spark.sql.internal.SQLConf.get().codegenFactoryMode().toString()


def put_sparks_getter_back(spark):
    spark._jsparkSession.newSession()  # every SparkSession constructed installs Spark's own getter


def test_threads_without_a_session_read_the_jobs_conf_and_one_with_a_session_its_own(spark):
    other = spark._jsparkSession.newSession()  # constructing it put Spark's getter back (put_sparks_getter_back)
    other.conf().set(MODE, "CODEGEN_ONLY")
    assert spark.conf.get(MODE) == "NO_CODEGEN"  # streaming.spark.session's default
    assert on_a_new_jvm_thread(mode_read(spark)) == "FALLBACK", "Spark's getter: its defaults"

    assert give_sessionless_threads_the_session_conf(spark)
    assert on_a_new_jvm_thread(mode_read(spark)) == "NO_CODEGEN"

    sessions = spark._jvm.org.apache.spark.sql.classic.SparkSession

    def with_the_other_session():
        sessions.setActiveSession(other)
        try:
            return mode_read(spark)()
        finally:
            sessions.clearActiveSession()

    assert on_a_new_jvm_thread(with_the_other_session) == "CODEGEN_ONLY"


def staged_events(tmp_path):
    result = run_scenario("zombie_incarnation")
    staged = tmp_path / "events"
    staged.mkdir()
    stage_jsonl(io.StringIO("".join(json.dumps(ev) + "\n" for ev in result.events[:800])), "scenario", staged, 400)
    return result.truth.rule_settings(), staged


def through_the_job(spark, settings, staged, checkpoint):
    events = spark.readStream.schema(spark_schema(True)).parquet(str(staged))
    settings = dataclasses.replace(settings, checkpoint_location=checkpoint)
    query = start(spark, settings, [MemorySink()], time_mode=EVENT_TIME, available_now=True, events_df=events)
    query.awaitTermination()
    assert query.exception() is None


def through_the_replay(spark, settings, staged, checkpoint):
    run_staged(spark, settings, staged, [MemorySink()], checkpoint)


@pytest.mark.parametrize("run", [through_the_job, through_the_replay], ids=["job", "replay"])
def test_a_query_start_hands_the_conf_on_again_after_its_cloned_session_took_it_back(spark, tmp_path, run):
    rules, staged = staged_events(tmp_path)
    settings = dataclasses.replace(config.load(), rules=rules)
    put_sparks_getter_back(spark)
    assert on_a_new_jvm_thread(mode_read(spark)) == "FALLBACK"
    run(spark, settings, staged, str(tmp_path / "ckpt"))
    assert on_a_new_jvm_thread(mode_read(spark)) == "NO_CODEGEN"
