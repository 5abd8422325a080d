"""Engine hosts as the processor reaches them: a key, a host's stats, what a step kept."""

from __future__ import annotations

from streaming.rules.records import BrokerRecord
from streaming.spark.json_tables import from_json_rows

KEY = ("c1", "brokers", 0)


def host_stats(address: str) -> dict | None:
    from multiprocessing.connection import Client

    try:
        with Client(address, family="AF_UNIX") as conn:
            conn.send(("stats",))
            return conn.recv()[1]
    except (FileNotFoundError, ConnectionRefusedError):
        return None


def broker_ids(out) -> set[int]:
    return {b.broker_id for b in from_json_rows(BrokerRecord, out.entities[1])}
