"""The hook's callbacks inside an application's client configuration, without a broker: what they
hand the hook, and that nothing of the hook reaches the application's own callbacks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streaming.collect.client_hook import ClientHook


@pytest.fixture
def hook():
    h = ClientHook("127.0.0.1:1", "prod", clock=lambda: 1_767_225_600.0)   # nothing listens: nothing is sent
    h._stop.set()          # no background drains: the test reads the queue itself
    h._thread.join(5)
    yield h
    h._publisher.close(0.1)


def tp(topic="orders", partition=0, offset=10, leader_epoch=4, error=None):
    return SimpleNamespace(topic=topic, partition=partition, offset=offset, leader_epoch=leader_epoch, error=error)


def test_commits_need_the_consumers_group(hook):
    with pytest.raises(ValueError, match="group.id"):
        hook.instrument({"bootstrap.servers": "kafka:9092"}, commits=True)


def test_a_successful_commit_is_queued_and_the_applications_on_commit_still_called(hook):
    app_saw = []
    conf = hook.instrument({"group.id": "billing", "client.id": "billing-app",
                            "on_commit": lambda err, tps: app_saw.append((err, len(tps)))}, commits=True)
    conf["on_commit"](None, [tp(), tp(partition=1, error="OFFSET_METADATA_TOO_LARGE")])
    conf["on_commit"]("REBALANCE_IN_PROGRESS", [tp(partition=2)])
    assert app_saw == [(None, 2), ("REBALANCE_IN_PROGRESS", 1)]
    [(_, _, kind, (group, partitions))] = list(hook._queue)
    assert (kind, group, partitions) == ("commit", "billing", [("orders", 0, 10, 4)]), \
        "a failed commit and a failed partition report nothing"


def test_a_failure_inside_the_hook_never_reaches_the_applications_callbacks(hook):
    app_saw = []
    conf = hook.instrument({"group.id": "billing", "on_commit": lambda err, tps: app_saw.append("commit"),
                            "error_cb": lambda err: app_saw.append("error")}, commits=True)
    hook._offer = None     # the hook broken: calling it raises TypeError
    conf["on_commit"](None, [tp()])
    conf["error_cb"](SimpleNamespace(name=lambda: "_ALL_BROKERS_DOWN", str=lambda: "1/1 brokers are down"))
    assert app_saw == ["commit", "error"]


def test_without_commits_the_applications_on_commit_is_left_as_it_was(hook):
    mine = lambda err, tps: None   # noqa: E731
    assert hook.instrument({"group.id": "billing", "on_commit": mine})["on_commit"] is mine
