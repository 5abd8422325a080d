"""ClientRollup: the engine's per-client alert records in, roll-ups out (numbered cases, each saying
why its expectation is right). Records are made by the catalog as the engine makes them; a case is a
list of micro-batches, and what it checks is what each batch delivers to people (OutputBatch.pages:
the records not rolled up, then the roll-ups)."""

from __future__ import annotations

import pytest

from streaming.config import RuleSettings
from streaming.rules.catalog import RULES, alert_record
from streaming.rules.rollup import (
    CLIENT_COUNT,
    EXAMPLE_CLIENTS,
    PEAK_CLIENT_COUNT,
    PER_BROKER,
    PER_CLIENT,
    PER_CLUSTER,
    ROLLED_UP,
    ClientRollup,
    RollupPolicy,
    is_rollup,
    rolled_up,
)
from streaming.sinks.alert_book import BookSettings, alertmanager_payload, latest_alert_states

BROKER, CLUSTER = RollupPolicy(PER_BROKER), RollupPolicy(PER_CLUSTER)
CLIENT = RollupPolicy(PER_CLIENT, max_per_cluster=2)


def incident(name: str, client: str, since: int = 1000, broker: int | None = 3, cluster: str = "c1") -> dict:
    """A per-client incident's firing record, as the engine writes it."""
    labels = {"client_id": client} | ({} if broker is None else {"broker_id": str(broker)})
    return alert_record(RULES[name], cluster, tuple(sorted(labels.items())), "firing", since, since, "")


def stale(client: str, since: int = 1000, broker: int = 3, cluster: str = "c1") -> dict:
    return incident("StaleMetadataResponse", client, since, broker, cluster)


def overdue(client: str, since: int = 1000) -> dict:
    return incident("ClientRebootstrapOverdue", client, since, broker=None)


def ended(record: dict, at: int) -> dict:
    """The incident's resolution at ``at`` (same fingerprint)."""
    return {**record, "status": "resolved", "event_id": f"{record['fingerprint']}:resolved", "event_time": at,
            "ends_at": at}


def lag(broker: int = 3) -> dict:
    return alert_record(RULES["BrokerMetadataLag"], "c1", (("broker_id", str(broker)),), "firing", 900, 900, "")


A, B, C = stale("a"), stale("b"), stale("c")


def pages(policy: RollupPolicy, batches: list[list[dict]]) -> list[list[tuple]]:
    """What each batch delivers, in short: (alertname, whose, status, client_count or None)."""
    rollup, out = ClientRollup(policy), []
    for batch in batches:
        records, rollups = rollup.step(batch)
        out.append([_short(r) for r in [r for r in records if not rolled_up(r)] + rollups])
    return out


def _short(record: dict) -> tuple:
    labels = record["labels"]
    whose = labels.get("client_id") or (f"broker {labels['broker_id']}" if "broker_id" in labels else labels["cluster"])
    # a roll-up's count; a resolved one's is the peak (the most clients it counted at once)
    count = record["annotations"].get(CLIENT_COUNT if record["status"] == "firing" else PEAK_CLIENT_COUNT)
    return record["alertname"], whose, record["status"], None if count is None else int(count)


S, R = "StaleMetadataResponse", "ClientRebootstrapOverdue"

CASES = [
    (1, BROKER, [[A, B, C]], [[(S, "broker 3", "firing", 3)]],
     "three clients stale from one broker are one alert carrying the count"),
    (2, BROKER, [[A, B, stale("c", broker=4)]], [[(S, "broker 3", "firing", 2), (S, "broker 4", "firing", 1)]],
     "per broker: each broker the clients got stale metadata from is its own alert"),
    (3, BROKER, [[overdue("a"), overdue("b")]], [[(R, "c1", "firing", 2)]],
     "an alert without a broker rolls up per cluster whatever the mode"),
    (4, BROKER, [[A, stale("b", cluster="c2")]], [[(S, "broker 3", "firing", 1), (S, "broker 3", "firing", 1)]],
     "clusters never share a roll-up (broker 3 of c1 is not broker 3 of c2)"),
    (5, BROKER, [[A], [B]], [[(S, "broker 3", "firing", 1)], [(S, "broker 3", "firing", 2)]],
     "a client joining later updates the count (the same alert: see the fingerprint test)"),
    (6, BROKER, [[A, B], [ended(A, 5000)], [ended(B, 6000)]],
     [[(S, "broker 3", "firing", 2)], [(S, "broker 3", "firing", 1)], [(S, "broker 3", "resolved", 2)]],
     "a client leaving updates the count; the roll-up resolves with the last client, telling its peak"),
    (7, CLUSTER, [[A, stale("a", broker=4), stale("b", broker=4)]], [[(S, "c1", "firing", 2)]],
     "per cluster: one alert for both brokers, counting clients (a stale from two brokers is one client)"),
    (8, CLIENT, [[A, B, C]], [[(S, "a", "firing", None), (S, "b", "firing", None), (S, "broker 3", "firing", 1)]],
     "per client up to the cap (2): the third client is counted in a roll-up of its broker"),
    (9, CLIENT, [[A, B, C], [ended(A, 5000), stale("d", 6000)]],
     [[(S, "a", "firing", None), (S, "b", "firing", None), (S, "broker 3", "firing", 1)],
      [(S, "a", "resolved", None), (S, "d", "firing", None)]],
     "a slot freed goes to the next new incident; c stays counted where it started (no second page for it)"),
    (10, BROKER, [[lag(), A]], [[("BrokerMetadataLag", "broker 3", "firing", None), (S, "broker 3", "firing", 1)]],
     "alerts that are not per client pass as they are"),
    (11, BROKER, [[A, B, ended(A, 5000), ended(B, 6000)]],
     [[(S, "broker 3", "firing", 2), (S, "broker 3", "resolved", 2)]],
     "opened and closed within one batch: still on record, with the count at its peak"),
    (12, BROKER, [[A, B], [A, B]], [[(S, "broker 3", "firing", 2)], [(S, "broker 3", "firing", 2)]],
     "a replayed batch counts no client twice"),
    (13, BROKER, [[ended(A, 5000)]], [[]],
     "a replayed resolution of an incident already resolved: rolled up as the mode says, not delivered alone"),
    (14, CLIENT, [[ended(A, 5000)]], [[(S, "a", "resolved", None)]],
     "per client, a resolution not known here is delivered alone (Alertmanager takes an unknown resolution quietly)"),
    (15, BROKER, [[A, ended(A, 5000), stale("b", 6000)]],
     [[(S, "broker 3", "firing", 1), (S, "broker 3", "resolved", 1), (S, "broker 3", "firing", 1)]],
     "the last client gone resolves the roll-up at once: a later client opens a new one, whatever the batches"),
    (16, BROKER, [[A, B, ended(A, 5000), stale("d", 5500), ended(B, 6000)], [ended(stale("d", 5500), 9000)]],
     [[(S, "broker 3", "firing", 2), (S, "broker 3", "firing", 1)], [(S, "broker 3", "resolved", 2)]],
     "clients churning within a batch: announced once when the first one leaves, then as the batch ends; "
     "the resolution tells the most it counted at once"),
]


@pytest.mark.parametrize("case,policy,batches,expected,why", CASES, ids=[f"{c[0]}" for c in CASES])
def test_rollup_cases(case, policy, batches, expected, why):
    assert pages(policy, batches) == expected, why


def test_updates_keep_the_fingerprint_and_labels_a_new_incident_gets_its_own():
    rollup = ClientRollup(BROKER)
    first = rollup.step([A])[1][0]
    update = rollup.step([B])[1][0]
    _, (resolution,) = rollup.step([ended(A, 5000), ended(B, 6000)])
    _, (again,) = rollup.step([stale("c", since=1000)])   # starts at the same moment as the first one
    assert update["fingerprint"] == first["fingerprint"] == resolution["fingerprint"]
    assert update["labels"] == first["labels"] == {"alertname": S, "cluster": "c1", "severity": "warning",
                                                   "broker_id": "3"}
    assert update["starts_at"] == first["starts_at"] == 1000
    assert update["event_id"] != first["event_id"], "an update is a new record of the alerts topic"
    assert resolution["ends_at"] == 6000 and resolution["status"] == "resolved"
    assert again["fingerprint"] != first["fingerprint"], "a resolved fingerprint is never delivered again"


def test_the_roll_up_reaches_alertmanager_with_its_count_and_examples():
    rollup = ClientRollup(RollupPolicy(PER_BROKER, examples=3))
    _, (record,) = rollup.step([stale(f"app-{i:02d}") for i in reversed(range(12))])
    payload = alertmanager_payload(record, 2000, BookSettings())
    assert payload["labels"] == {"alertname": S, "cluster": "c1", "severity": "warning", "broker_id": "3"}
    assert payload["annotations"][CLIENT_COUNT] == "12"
    assert payload["annotations"][EXAMPLE_CLIENTS] == "app-00,app-01,app-02", "the first ones, sorted"
    assert payload["annotations"]["summary"] == "12 client(s) got stale metadata from broker 3"
    assert payload["annotations"]["runbook_url"].endswith("#stalemetadataresponse")


def test_per_client_records_stay_marked_for_the_alerts_topic():
    records, _ = ClientRollup(BROKER).step([lag(), A])
    assert records[0] == lag(), "not a per-client alert: untouched"
    assert records[1]["annotations"] == {**A["annotations"], ROLLED_UP: PER_BROKER}
    assert records[1]["fingerprint"] == A["fingerprint"] and records[1]["labels"] == A["labels"]


def test_the_policy_comes_from_the_rules_settings():
    policy = RollupPolicy.from_settings(RuleSettings(client_alerts="per_client", client_alerts_examples=3,
                                                     client_alerts_max_per_cluster=50))
    assert policy == RollupPolicy(PER_CLIENT, examples=3, max_per_cluster=50)
    assert RollupPolicy.from_settings(RuleSettings()) == RollupPolicy(PER_BROKER, examples=5, max_per_cluster=20)


# --- after a restart: the alerts topic is the state -----------------------------------------------

def topic(*batches: tuple[list[dict], list[dict]]) -> list[dict]:
    """The alerts topic's latest record per fingerprint after these (records, roll-ups) were written."""
    return list(latest_alert_states(r for records, rollups in batches for r in records + rollups).values())


def test_a_restart_continues_the_same_alert_and_counts():
    before = ClientRollup(BROKER)
    written = [before.step([A, B])]
    after = ClientRollup(BROKER)
    seeded = after.seed(topic(*written))
    assert [r for r in seeded if is_rollup(r)] == written[0][1], "Alertmanager gets the roll-up it had, nothing else"
    assert after.repairs == [], "the topic holds the roll-up as it stands: nothing to write again"
    continued = after.step([C])[1]
    uninterrupted = before.step([C])[1]
    assert continued == uninterrupted


def test_a_crash_before_the_roll_up_was_written_opens_it_from_its_clients():
    """The Kafka sink writes a batch's per-client records, then its roll-ups: a crash in between
    leaves clients in the topic that no roll-up record counts (and nobody was told of)."""
    records, _ = ClientRollup(BROKER).step([A, B])
    after = ClientRollup(BROKER)
    seeded = after.seed(topic((records, [])))
    (rollup,) = [r for r in seeded if is_rollup(r)]
    assert rollup["status"] == "firing" and rollup["annotations"][CLIENT_COUNT] == "2"
    assert after.repairs == [rollup], "written to the topic with the next batch"
    assert not any(rolled_up(r) for r in seeded), "the clients it counts are not delivered alone"


def test_a_crash_before_the_resolution_was_written_resolves_it():
    before = ClientRollup(BROKER)
    first = before.step([A, B])
    records, rollups = before.step([ended(A, 5000), ended(B, 6000)])
    after = ClientRollup(BROKER)
    seeded = after.seed(topic(first, (records, [])))
    (resolution,) = [r for r in seeded if is_rollup(r)]
    assert (resolution["status"], resolution["ends_at"], resolution["fingerprint"]) == \
        ("resolved", 6000, first[1][0]["fingerprint"]), "resolved when its last client's incident ended"
    assert after.repairs == [resolution]
    assert after.step([])[1] == [resolution], "owed to the alerts topic: written with the next batch"
    assert after.open == {} and after.members == {}


def test_incidents_alerted_alone_still_count_against_the_cap_after_a_restart():
    before = ClientRollup(CLIENT)
    written = before.step([A, B, C])
    after = ClientRollup(CLIENT)
    seeded = after.seed(topic(written))
    assert sorted(r["labels"].get("client_id", "rollup") for r in seeded) == ["a", "b", "rollup"]
    _, rollups = after.step([stale("d")])
    assert [r["annotations"][CLIENT_COUNT] for r in rollups] == ["2"], "d goes beyond the cap of 2: counted"
    records, _ = after.step([ended(A, 5000)])
    assert not rolled_up(records[0]), "a was alerted alone before the restart: its resolution is delivered"
