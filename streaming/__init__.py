"""epochwatch: a Spark Structured Streaming monitor for Kafka controller heartbeats,
broker incarnations, metadata epochs and client rebootstrap."""

__version__ = "0.1.0"
