"""Events each check of streaming.rules.validity refuses, and valid ones of every kind."""

from __future__ import annotations

from tests.support.builders import attempt, commit, failed, hb, rebootstrap, reset, response, update

VALID = [hb(10, 1), update(20, 1, 7), response(30, "app", 1, -1), failed(40, "app"), rebootstrap(50, "app"),
         attempt(60, "app", 2), commit(70, "g", 7), reset(80)]

BROKEN = [
    # (why, event, reason)
    ("an event of no cluster", {**hb(10, 1), "cluster_id": ""}, "cluster_id is empty"),
    ("a time before 1970 (-1 is the rules' 'never')", {**commit(10, "g", 1), "event_time": -5},
     "event_time -5 is before 1970"),
    ("a control record is checked too", {**reset(10), "cluster_id": ""}, "cluster_id is empty"),
    ("a heartbeat of no broker", hb(10, -1), "broker_id -1 is negative"),
    ("an update to no broker", update(10, -3, 7), "broker_id -3 is negative"),
    ("an incarnation below 0", hb(10, 1, inc=-2), "incarnation_id -2 is negative"),
    ("-1 is 'unknown', -2 is nothing", response(10, "app", 1, -2), "metadata_epoch -2 is below -1"),
    ("a commit's epoch too", commit(10, "g", -9), "metadata_epoch -9 is below -1"),
    ("a controller epoch below 0", hb(10, 1, controller_epoch=-1), "controller_id / controller_epoch is negative"),
    ("a controller id below 0", update(10, 1, 7, controller=-1), "controller_id / controller_epoch is negative"),
    ("a response to no client", response(10, "", 1, 7), "client_id is empty"),
    ("a failure of no client", failed(10, ""), "client_id is empty"),
    ("a rebootstrap of no client", rebootstrap(10, ""), "client_id is empty"),
    ("an attempt of no client", attempt(10, "", 2), "client_id is empty"),
    ("a negative partition", commit(10, "g", 1, partition=-1), "partition is negative or group_id empty"),
    ("a commit of no group", commit(10, "", 1), "partition is negative or group_id empty"),
    ("a negative setup timeout", attempt(10, "app", 2, timeout=-1),
     "setup_timeout_ms / consecutive_failures is negative"),
    ("negative failures", attempt(10, "app", 2, failures=-1), "setup_timeout_ms / consecutive_failures is negative"),
    ("the first failing check is the one reported", {**hb(-1, -1), "cluster_id": ""}, "cluster_id is empty"),
]
