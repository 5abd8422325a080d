"""Pure detection rules (no Spark): state records + events + ``now`` -> conditions.

Each module owns one kind of state key: brokers (one key per cluster), clients and commits
(sharded per cluster), nodes (one key per cluster). Times are event-time milliseconds; the clock
is always passed in.
"""
