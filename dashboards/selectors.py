"""PromQL building blocks. Every query of every dashboard gets its series through :func:`selector`.

``selector`` adds the ``kafka_cluster`` template-variable matcher to every metric that carries a
``kafka_cluster`` label (and only to those: the monitor's own metrics have none, and a matcher on a
missing label would hide them as soon as one cluster is picked). Label matchers are checked
against the metric's labels in :mod:`dashboards.metrics`. ``scrape_target=True`` also adds the
``job`` / ``instance`` variable matchers (labels Prometheus gives every scraped series), for the
monitor's own dashboard, where one Prometheus may scrape several epochwatch jobs.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from dashboards.metrics import BROKER_STATE_CODES, CLUSTER_LABEL, metric

CLUSTER_VARIABLE = CLUSTER_LABEL
JOB_VARIABLE, INSTANCE_VARIABLE = "job", "instance"
RATE_WINDOW = "$__rate_interval"
RANGE_WINDOW = "$__range"

_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count")}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def selector(name: str, suffix: str = "", *, scrape_target: bool = False, **matchers: str | Sequence[str]) -> str:
    """``name{kafka_cluster=~"$kafka_cluster",label="value",other=~"a|b"}``.

    A string value is an equality matcher, a list or tuple of strings an alternation
    (``=~"a|b"``). ``suffix`` picks a histogram series (``_bucket``, ``_sum``, ``_count``).
    ``scrape_target`` appends ``job=~"$job",instance=~"$instance"``.
    """
    m = metric(name)
    if suffix and suffix not in _SUFFIXES.get(m.kind, ()):
        raise ValueError(f"{name} is a {m.kind}; suffix {suffix!r} does not exist for it")
    parts = [f'{CLUSTER_LABEL}=~"${CLUSTER_VARIABLE}"'] if m.has_cluster else []
    for label, value in matchers.items():
        if label not in m.labels:
            raise ValueError(f"{name} has no label {label!r} (labels: {', '.join(m.labels) or 'none'})")
        if isinstance(value, str):
            parts.append(f'{label}="{_escape(value)}"')
        else:
            parts.append(f'{label}=~"{"|".join(_escape(v) for v in value)}"')
    if scrape_target:
        parts += [f'{v}=~"${v}"' for v in (JOB_VARIABLE, INSTANCE_VARIABLE)]
    return f"{name}{suffix}{{{','.join(parts)}}}"


def by(labels: Iterable[str]) -> str:
    labels = tuple(labels)
    return f" by ({', '.join(labels)})" if labels else ""


def sum_by(labels: Iterable[str], expr: str) -> str:
    return f"sum{by(labels)} ({expr})"


def max_by(labels: Iterable[str], expr: str) -> str:
    return f"max{by(labels)} ({expr})"


def rate(name: str, window: str = RATE_WINDOW, **matchers) -> str:
    _require_kind(name, "counter")
    return f"rate({selector(name, **matchers)}[{window}])"


def increase(name: str, window: str = RATE_WINDOW, **matchers) -> str:
    _require_kind(name, "counter")
    return f"increase({selector(name, **matchers)}[{window}])"


def histogram_quantile(quantile: float, name: str, window: str = RATE_WINDOW, **matchers) -> str:
    _require_kind(name, "histogram")
    buckets = sum_by(("le",), f"rate({selector(name, '_bucket', **matchers)}[{window}])")
    return f"histogram_quantile({quantile}, {buckets})"


def broker_state_code() -> str:
    """One series per broker whose value is Kafka's state code (INITIAL 0 ... STOPPING 3).

    ``epochwatch_broker_state`` is 1 for the current state and 0 for the others, so the
    weighted sum over the states is the code of the current one.
    """
    terms = [
        f"{code} * {sum_by((CLUSTER_LABEL, 'broker_id'), selector('epochwatch_broker_state', state=state))}"
        for state, code in BROKER_STATE_CODES.items() if code
    ]
    return " + ".join(terms)


def _require_kind(name: str, kind: str) -> None:
    m = metric(name)
    if m.kind != kind:
        raise ValueError(f"{name} is a {m.kind}, not a {kind}")
