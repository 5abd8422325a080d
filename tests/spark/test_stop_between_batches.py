"""`epochwatch run` stops its query between micro-batches: a stop inside one interrupts the
foreachBatch call (Spark then logs a Py4J traceback and a java.lang.StackOverflowError, and the
batch runs again at the next start)."""

import logging
import threading
import time

import pytest

from streaming.commands.run import stop_between_batches
from streaming.sinks.base import Dispatcher


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


class WatchedEvent(threading.Event):
    """An Event that says when somebody starts waiting on it."""

    def __init__(self):
        super().__init__()
        self.waited_on = threading.Event()

    def wait(self, timeout=None):
        self.waited_on.set()
        return super().wait(timeout)


def test_stop_waits_for_the_batch_in_flight():
    dispatcher, query = Dispatcher([]), Query()
    dispatcher.idle = WatchedEvent()  # cleared: a batch is running
    done_at = []

    def batch_ends():
        # the batch ends only once the stop is waiting for it
        assert dispatcher.idle.waited_on.wait(10), "the stop never waited"
        assert query.stopped_at is None, "stopped inside the batch"
        done_at.append(time.monotonic())
        dispatcher.idle.set()

    ender = threading.Thread(target=batch_ends)
    ender.start()
    stop_between_batches(query, dispatcher, wait_s=10)
    ender.join()
    assert done_at and query.stopped_at >= done_at[0], "stopped only after the batch reached its sinks"


def test_stop_goes_ahead_after_the_wait_and_says_so(caplog):
    dispatcher, query = Dispatcher([]), Query()
    dispatcher.idle.clear()  # a batch that does not finish
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="epochwatch"):
        stop_between_batches(query, dispatcher, wait_s=0.2)
    assert query.stopped_at is not None and query.stopped_at - started >= 0.2
    assert "did not finish within" in caplog.text


def test_an_idle_query_stops_at_once():
    dispatcher, query = Dispatcher([]), Query()
    started = time.monotonic()
    stop_between_batches(query, dispatcher, wait_s=10)
    assert query.stopped_at - started < 1
