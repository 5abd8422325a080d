"""Where alert records go besides the Kafka alerts topic (the durable record)."""

from streaming.sinks.alert_book import AlertBook, AlertRecordError, BookSettings, latest_alert_states
from streaming.sinks.alertmanager import AlertmanagerSink

__all__ = ["AlertBook", "AlertRecordError", "AlertmanagerSink", "BookSettings", "latest_alert_states"]
