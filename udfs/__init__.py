"""Code that runs on Spark executors: Avro encode/decode and the Kafka Python data sources."""
