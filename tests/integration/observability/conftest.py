"""Fixtures starting the real Alertmanager and Prometheus on free loopback ports."""

from __future__ import annotations

import pytest

from streaming.sinks.metrics import Metrics
from tests.integration.observability.services import (
    WebhookReceiver,
    alertmanager_process,
    prometheus_config_for_test,
    prometheus_process,
    render_alertmanager_config,
)


@pytest.fixture
def webhook():
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def alertmanager(tmp_path, webhook):
    """A fresh Alertmanager per test (it starts in milliseconds), routing to ``webhook``."""
    config = render_alertmanager_config(tmp_path / "alertmanager.yml", webhook)
    service = alertmanager_process(tmp_path, config).start()
    yield service
    service.stop()


@pytest.fixture
def metrics_server():
    """A Metrics instance served on a free loopback port: (metrics, port)."""
    metrics = Metrics()
    port = metrics.serve(0)
    yield metrics, port
    metrics.stop()


@pytest.fixture
def prometheus(tmp_path, metrics_server):
    _, port = metrics_server
    config = prometheus_config_for_test(tmp_path / "prometheus.yml", port)
    service = prometheus_process(tmp_path, config).start(timeout_s=60)
    yield service
    service.stop()
