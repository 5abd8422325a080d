"""Reading a node's JMX exporter page: both naming styles teams run, and what is left out."""

from pathlib import Path

import pytest

from streaming.collect import exporter

FIXTURE = (Path(__file__).parent / "fixtures" / "kafka-4.1.2-combined-node.prom").read_text()


def test_a_real_page_of_kafka_4_1_gives_every_value_the_collector_reads():
    m = exporter.parse(FIXTURE)
    assert (m.node_id, m.start_time_ms, m.broker_state) == (1, 1795627548940, exporter.BROKER_RUNNING)
    assert (m.applied_offset, m.applied_timestamp_ms) == (167, 1795627627008)
    assert (m.current_controller_id, m.raft_leader, m.raft_epoch, m.high_watermark) == (1, 1, 1, 168)
    assert m.is_active_controller
    assert m.registration == {1: exporter.REGISTRATION_ACTIVE}
    assert m.since_heartbeat_ms == {1: 336}


def test_strimzi_style_names_read_the_same():
    page = "\n".join([
        'kafka_server_brokermetadatametrics_last_applied_record_offset 42.0',
        'kafka_server_raftmetrics_current_leader 3000.0',
        'kafka_controller_kafkacontroller_activecontrollercount 1.0',
        'kafka_controller_kafkacontroller_brokerregistrationstate{broker="2"} 20.0',
        'kafka_controller_kafkacontroller_timesincelastheartbeatreceivedms{broker="2"} 1500.0',
        'kafka_server_app_info_start_time_ms{id="3000"} 1.7e12',
    ]) + "\n"
    m = exporter.parse(page)
    assert m.node_id == 3000 and m.start_time_ms == 1_700_000_000_000
    assert (m.applied_offset, m.raft_leader) == (42, 3000)
    assert m.registration == {2: exporter.REGISTRATION_CONTROLLED_SHUTDOWN} and m.since_heartbeat_ms == {2: 1500}


def test_the_thousands_of_other_samples_of_a_page_are_left_out_before_parsing():
    """Why: a broker's page has ~3,000 samples and the collector reads a dozen; prometheus-client's
    parser took 23-400 ms a page on a loaded machine, and a round waits for its slowest page."""
    others = "".join(f'# TYPE kafka_server_brokertopicmetrics_bytesinpersec_total counter\n'
                     f'kafka_server_brokertopicmetrics_bytesinpersec_total{{topic="t{i}"}} {i}.0\n'
                     f'kafka_server_kafkaserver_value{{name="LinuxDiskReadBytes{i}"}} 1.0\n' for i in range(1500))
    assert exporter.parse(FIXTURE + others) == exporter.parse(others + FIXTURE) == exporter.parse(FIXTURE)
    kept = exporter._wanted_lines(FIXTURE + others)
    assert "bytesinpersec" not in kept and "LinuxDisk" not in kept and len(kept.splitlines()) < 40


def test_an_inactive_controller_gives_no_per_broker_view():
    """Only the active controller's gauges are the truth; a standby's would be stale."""
    page = FIXTURE.replace('name="ActiveControllerCount"} 1.0', 'name="ActiveControllerCount"} 0.0')
    m = exporter.parse(page)
    assert not m.is_active_controller and m.registration == {} and m.since_heartbeat_ms == {}


def test_a_broker_only_node_has_no_controller_view():
    page = "\n".join(line for line in FIXTURE.splitlines() if "kafkacontroller" not in line) + "\n"
    m = exporter.parse(page)
    assert m.broker_state == exporter.BROKER_RUNNING and not m.is_active_controller


def test_a_page_that_is_not_the_text_format_is_a_scrape_error():
    with pytest.raises(exporter.ScrapeError, match="not the Prometheus text format"):
        exporter.scrape("http://127.0.0.1:1/metrics", 1.0, fetch=lambda url, timeout: "<html>login</html> {{{")


def test_an_unreachable_exporter_is_a_scrape_error_not_an_exception_of_requests():
    with pytest.raises(exporter.ScrapeError, match="127.0.0.1:9"):
        exporter.scrape("http://127.0.0.1:9/metrics", 0.5)
