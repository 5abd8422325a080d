"""`epochwatch run` stops its query between micro-batches: a stop inside one interrupts the
foreachBatch call (Spark then logs a Py4J traceback and a java.lang.StackOverflowError, and the
batch runs again at the next start)."""

import logging
import threading
import time

import pytest

from streaming.commands.run import stop_between_batches
from streaming.sinks.base import Dispatcher
from tests.support.polling import wait_until


class Frame:
    """What foreachBatch hands the Dispatcher: collect() is where the micro-batch runs."""

    def __init__(self, during=lambda: None):
        self.during = during

    def collect(self):
        self.during()
        return []


class Query:
    def __init__(self):
        self.stopped_at = None

    def stop(self):
        self.stopped_at = time.monotonic()


class FailingSink:
    def write(self, batch):
        raise RuntimeError("alerts topic unreachable")

    def close(self):
        pass


def test_dispatcher_is_busy_only_while_a_micro_batch_runs():
    dispatcher = Dispatcher([])
    seen = []
    assert dispatcher.idle.is_set()
    dispatcher(Frame(lambda: seen.append(dispatcher.idle.is_set())), 0)
    assert seen == [False], "busy while the batch computes"
    assert dispatcher.idle.is_set(), "idle again once its sinks have it"


def test_dispatcher_is_idle_again_after_a_failed_batch():
    dispatcher = Dispatcher([FailingSink()])
    with pytest.raises(RuntimeError):
        dispatcher(Frame(), 0)
    assert dispatcher.idle.is_set(), "a failed batch must not hold a stop for the whole wait"


def test_stop_waits_for_the_batch_in_flight_and_comes_right_after_its_sinks():
    dispatcher, query = Dispatcher([]), Query()
    in_batch, release, done_at = threading.Event(), threading.Event(), []

    def computing():
        in_batch.set()
        assert release.wait(10)
        assert query.stopped_at is None, "stopped inside the batch"

    class Marker:
        def write(self, batch):
            done_at.append(time.monotonic())

        def close(self):
            pass

    dispatcher.sinks.append(Marker())
    batch = threading.Thread(target=dispatcher, args=(Frame(computing), 7))
    batch.start()
    assert in_batch.wait(10)
    stopper = threading.Thread(target=stop_between_batches, args=(query, dispatcher), kwargs={"wait_s": 10})
    stopper.start()
    wait_until(lambda: dispatcher._after_batch, 10, what="the stop waiting for the batch")
    assert query.stopped_at is None
    release.set()
    batch.join(10)
    stopper.join(10)
    assert done_at and query.stopped_at >= done_at[0], "stopped only after the batch reached its sinks"
    # "right after" is a thread's wake-up, against the 10 s wait: 5 s is room for a loaded host
    assert query.stopped_at - done_at[0] < 5, "and right after it, not after the wait"


def test_a_busy_querys_stop_comes_after_a_batch_even_when_it_came_between_two():
    """Why: with batches back to back, the dispatcher is idle only while the next batch commits and
    plans; a stop started then landed inside that batch's foreachBatch (CI saw the interruption
    trace). The stop now waits for a batch to leave its sinks."""
    dispatcher, query = Dispatcher([]), Query()
    stopper = threading.Thread(target=stop_between_batches, args=(query, dispatcher),
                               kwargs={"wait_s": 10, "idle_grace_s": 5})
    stopper.start()
    wait_until(lambda: dispatcher._after_batch, 10, what="the stop waiting for a batch")
    assert query.stopped_at is None, "idle now: a stop here used to go ahead at once"
    ended = []
    dispatcher(Frame(lambda: ended.append(query.stopped_at)), 8)
    stopper.join(10)
    assert ended == [None] and query.stopped_at is not None


def test_stop_goes_ahead_after_the_wait_and_says_so(caplog):
    dispatcher, query = Dispatcher([]), Query()
    dispatcher.idle.clear()  # a batch that does not finish
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="epochwatch"):
        stop_between_batches(query, dispatcher, wait_s=0.2)
    assert query.stopped_at is not None and query.stopped_at - started >= 0.2
    assert "did not finish within" in caplog.text


def test_an_idle_query_stops_after_the_short_grace():
    dispatcher, query = Dispatcher([]), Query()
    started = time.monotonic()
    stop_between_batches(query, dispatcher, wait_s=10, idle_grace_s=0.3)
    assert 0.3 <= query.stopped_at - started < 5  # the grace, not the 10 s wait (room for a loaded host)
