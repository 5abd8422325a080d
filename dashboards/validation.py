"""Check dashboards against Grafana's dashboard JSON schema (vendored in dashboards/schemas/)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Mapping

SCHEMA_FILE = "dashboard.jsonschema.json"


@cache
def dashboard_schema() -> dict:
    return json.loads(resources.files("dashboards.schemas").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def schema_errors(dashboard: Mapping) -> list[str]:
    """Every place where ``dashboard`` breaks the schema, as ``path: message`` (empty when valid)."""
    try:
        import jsonschema
    except ImportError as exc:  # a dev dependency: the job itself never validates
        raise RuntimeError("validating dashboards needs jsonschema: pip install 'epochwatch[dev]'") from exc
    validator = jsonschema.Draft7Validator(dashboard_schema())
    found = []
    for error in sorted(validator.iter_errors(dashboard), key=lambda e: list(e.absolute_path)):
        leaves = _leaf_errors(error)
        for leaf in leaves:
            path = "/".join(str(p) for p in leaf.absolute_path) or "(root)"
            found.append(f"{path}: {leaf.message}")
    return found


def _leaf_errors(error):
    """For oneOf/anyOf failures the useful messages are in the sub-errors of the closest branch."""
    if not error.context:
        return [error]
    deepest = max(len(e.absolute_path) for e in error.context)
    return [e for e in error.context if len(e.absolute_path) == deepest]
