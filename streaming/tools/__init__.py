"""Tools that run real infrastructure for the tests and the demo (a local Kafka KRaft cluster)."""
