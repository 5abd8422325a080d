"""The key engine: one (cluster, kind, shard) key's rules, alert lifecycle and event-time horizon,
and the single-process detector that runs every key in one process (no Spark)."""
