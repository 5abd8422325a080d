"""Grafana dashboards as code (grafana-foundation-sdk), one module per dashboard.

``build_all()`` returns every dashboard as plain JSON data keyed by uid; ``dashboards.render``
writes them to files, ``dashboards.push`` sends them to Grafana's HTTP API.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # The SDK warns at import that dashboard schema v2 exists; v1 is what Grafana's file
    # provisioning and /api/dashboards/db take today, so the v1 builders are used on purpose.
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import bargauge, dashboard, stat, statetimeline, table, timeseries  # noqa: F401

from dashboards import broker_states, clients, fleet, incarnations, metadata_epochs, monitor

MODULES = (fleet, broker_states, incarnations, metadata_epochs, clients, monitor)


def build_all() -> dict[str, dict]:
    """uid -> dashboard JSON, in navigation order (fleet overview first)."""
    from dashboards.common import to_json

    return {module.UID: to_json(module.build()) for module in MODULES}
