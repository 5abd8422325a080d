"""Collectors: turn what a stock Apache Kafka (KRaft) cluster shows an outside process into the
events of docs/events.md.

- ``exporter``  reads the Prometheus JMX exporter that teams attach to brokers and controllers
- ``probes``    the Kafka protocol calls (DescribeQuorum, DescribeCluster, Metadata per broker),
                through kafka-python's generated protocol types: nothing is hand-encoded
- ``derive``    pure: one round of observations + what was already sent -> contract events
- ``commits``   pure: a record of ``__consumer_offsets`` (as Kafka's formatter prints it) -> offset_commit
- ``commit_log`` reads ``__consumer_offsets`` through Kafka's stock console consumer (optional)
- ``publish``   produces the events to the events topic (bounded, never blocks the loop for long)
- ``collector`` the loop that ties them together, one status line per interval
"""
