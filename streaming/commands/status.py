"""epochwatch status [--url URL] [--cluster ID] [--json]: what is wrong now, asked of the running job.

It reads the job's status view (``/status`` on sinks.metrics.port: streaming.sinks.endpoint) and prints
the incidents firing first, then the brokers and clients that are not well, then every cluster in a
line and the job's own progress. Exit codes: 0 all OK, 1 something is wrong (a cluster or the job
is WARN or ERR), 2 no status (the job is unreachable, did not answer as epochwatch does, or knows no
such cluster).
"""

from __future__ import annotations

import json
import sys
from urllib.parse import quote

DEFAULT_URL = "http://127.0.0.1:9464"
EXIT_OK, EXIT_WRONG, EXIT_NO_STATUS = 0, 1, 2
HIDDEN_LABELS = ("alertname", "severity", "cluster")   # shown in their own columns


def register(sub) -> None:
    p = sub.add_parser("status", help="what is wrong now: incidents firing, brokers and clients, the job's lag",
                       description="Ask the running job (epochwatch run) what is wrong now, per cluster: incidents "
                                   "firing with their age, fenced, stopping and lagging brokers, stale and "
                                   "rebootstrap-overdue clients, and the job's own progress. Exit code 0: all OK; "
                                   "1: something is wrong; 2: no status (job unreachable, unknown cluster).")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help=f"the job's metrics endpoint, http://sinks.metrics.address:sinks.metrics.port "
                                     f"(default {DEFAULT_URL})")
    where.add_argument("--config", metavar="PATH",
                       help="the job's config file: ask the endpoint its sinks.metrics.address and port say")
    p.add_argument("--cluster", metavar="ID", help="one cluster in full (default: every cluster)")
    p.add_argument("--json", action="store_true", help="print the endpoint's JSON instead of the table")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the job's answer (default 5)")
    p.set_defaults(func=run)


class NoStatus(Exception):
    """The job gave no status: the message says why, in one line."""


def run(args) -> int:
    try:
        base = (endpoint_of(args.config) if args.config else args.url or DEFAULT_URL).rstrip("/")
        if args.cluster:
            answer = fetch(f"{base}/status/{quote(args.cluster, safe='')}", args.timeout)
            details = {args.cluster: answer["status"]}
            overview = None
        else:
            answer = fetch(f"{base}/status", args.timeout)
            overview = answer["status"]
            details = {c["cluster"]: fetch(f"{base}/status/{quote(c['cluster'], safe='')}", args.timeout)["status"]
                       for c in overview["clusters"] if needs_detail(c)}
    except NoStatus as exc:
        print(f"epochwatch status: {exc}", file=sys.stderr)
        return EXIT_NO_STATUS
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        lines = render_overview(overview, details) if overview is not None else render_cluster(details[args.cluster])
        print("\n".join(lines))
    level = overview["status"] if overview is not None else details[args.cluster]["status"]
    return EXIT_OK if level == "OK" else EXIT_WRONG


def endpoint_of(config_path: str) -> str:
    """The metrics endpoint a config serves, as a client on this host reaches it (a wildcard
    address is asked on loopback)."""
    from streaming import config

    try:
        sinks = config.load(config_path).sinks
    except config.ConfigError as exc:
        raise NoStatus(str(exc)) from None
    if not sinks.metrics_port:
        raise NoStatus(f"{config_path} turns the metrics port off (sinks.metrics.port: 0): there is no status view")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(sinks.metrics_address, sinks.metrics_address)
    return f"http://{f'[{host}]' if ':' in host else host}:{sinks.metrics_port}"


def fetch(url: str, timeout_s: float) -> dict:
    import requests

    try:
        response = requests.get(url, timeout=timeout_s)
    except requests.ConnectionError:
        raise NoStatus(f"the job is not reachable at {url} (is epochwatch run up, and --url its "
                       f"sinks.metrics.address and sinks.metrics.port?)") from None
    except requests.Timeout:
        raise NoStatus(f"the job did not answer {url} within {timeout_s:g} s") from None
    except requests.RequestException as exc:
        raise NoStatus(f"{url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise NoStatus(f"{url} answered HTTP {response.status_code} without the status view's JSON "
                       f"(not epochwatch run's metrics port?)") from None
    if not isinstance(body, dict) or body.get("error") is not False or "status" not in body:
        message = body.get("message") if isinstance(body, dict) else None
        raise NoStatus(message or f"{url} answered HTTP {response.status_code} without a status")
    return body


def needs_detail(line: dict) -> bool:
    """A cluster of the overview whose lists are worth a second request."""
    b, c = line["brokers"], line["clients"]
    return bool(line["incidents_firing"]["total"] or b["fenced"] or b["stopping"] or b["lagging"]
                or c["stale"] or c["rebootstrap_overdue"])


# --- the readable form (pure: the endpoint's JSON in, lines out) --------------------------------

def render_overview(overview: dict, details: dict[str, dict]) -> list[str]:
    clusters = overview["clusters"]
    wrong = [c for c in clusters if c["status"] != "OK"]
    firing = sum(c["incidents_firing"]["total"] for c in clusters)
    critical = sum(c["incidents_firing"]["critical"] for c in clusters)
    if firing:
        headline = (f"{firing} incident(s) firing ({critical} critical) in {len(wrong)} of {len(clusters)} "
                    f"cluster(s)")
    else:
        headline = f"nothing firing in {len(clusters)} cluster(s)"
    lines = [f"{overview['status']:<5}{headline}; job {job_text(overview['job'])}"]
    incidents = [(cluster, i) for cluster, d in details.items() for i in d["incidents"]]
    incidents.sort(key=lambda ci: (ci[1]["severity"] != "critical", -ci[1]["age_s"]))
    if incidents:
        lines += ["", *table(["FIRING", "CLUSTER", "ALERT", "FOR", "LABELS"],
                             [[i["severity"], c, i["alertname"], age_text(i["age_s"]), labels_text(i["labels"])]
                              for c, i in incidents])]
        hidden = sum(d["incidents_firing"]["total"] - len(d["incidents"]) for d in details.values())
        if hidden:
            lines.append(f"(and {hidden} more: epochwatch status --cluster ID --json lists each cluster's first ones)")
    unwell = [line for cluster, d in details.items() for line in entity_lines(cluster, d)]
    if unwell:
        lines += ["", *unwell]
    if clusters:
        lines += ["", *table(["CLUSTER", "STATUS", "BROKERS", "FENCED", "STOPPING", "LAGGING", "STALE", "OVERDUE",
                              "FIRING"],
                             [[c["cluster"], c["status"], states_text(c["brokers"]), c["brokers"]["fenced"],
                               c["brokers"]["stopping"], c["brokers"]["lagging"], c["clients"]["stale"],
                               c["clients"]["rebootstrap_overdue"], c["incidents_firing"]["total"]]
                              for c in clusters])]
    return lines


def render_cluster(view: dict) -> list[str]:
    firing = view["incidents_firing"]
    lines = [f"{view['status']:<5}cluster {view['cluster']}: {firing['total']} incident(s) firing "
             f"({firing['critical']} critical); brokers {states_text(view['brokers'])}; metadata epoch "
             f"{view['metadata_epoch'] if view['metadata_epoch'] is not None else '?'}; last heard "
             f"{view['updated_at'] or 'never'}"]
    if view["incidents"]:
        lines += ["", *table(["FIRING", "ALERT", "FOR", "SINCE", "LABELS"],
                             [[i["severity"], i["alertname"], age_text(i["age_s"]), i["starts_at"],
                               labels_text(i["labels"])] for i in view["incidents"]])]
        if firing["total"] > len(view["incidents"]):
            lines.append(f"(and {firing['total'] - len(view['incidents'])} more)")
    unwell = entity_lines(view["cluster"], view)
    return lines + (["", *unwell] if unwell else [])


def entity_lines(cluster: str, view: dict) -> list[str]:
    b, c = view["brokers"], view["clients"]
    lines = []
    for f in b["fenced"]:
        lines.append(f"{cluster}: broker {f['broker_id']} fenced" + (f" ({f['reason']})" if f["reason"] else "")
                     + (f" for {age_text(f['for_s'])}" if f["for_s"] is not None else "")
                     + (f", metadata epoch {f['metadata_epoch']} ({f['lag']} behind)" if f["lag"] else ""))
    for s in b["stopping"]:
        lines.append(f"{cluster}: broker {s['broker_id']} stopping"
                     + (f" for {age_text(s['for_s'])}" if s["for_s"] is not None else ""))
    for g in b["lagging"]:
        lines.append(f"{cluster}: broker {g['broker_id']} lagging: metadata epoch {g['metadata_epoch']}, "
                     f"{g['lag']} behind for {age_text(g['for_s'])}")
    for key, what, examples in (("stale", "with stale metadata", "stale_examples"),
                                ("rebootstrap_overdue", "overdue to rebootstrap", "overdue_examples")):
        if c[key]:
            lines.append(f"{cluster}: {c[key]} client(s) {what}: {', '.join(c[examples])}"
                         + (", ..." if c[key] > len(c[examples]) else ""))
    return lines


def job_text(job: dict) -> str:
    parts = [job["status"]]
    if job.get("batch_id") is not None:
        parts.append(f"batch {job['batch_id']}")
    if job.get("last_progress_age_s") is not None:
        parts.append(f"last progress {age_text(job['last_progress_age_s'])} ago")
    else:
        parts.append("no micro-batch finished yet")
    if job.get("input_records_per_second") is not None:
        parts.append(f"{job['input_records_per_second']:,.0f} records/s in")
    if job.get("source_lag_records") is not None:
        parts.append(f"{job['source_lag_records']:,.0f} records behind")
    if job.get("error"):
        parts.append(f"failed: {job['error'].splitlines()[0]}")
    return ", ".join(parts)


def states_text(brokers: dict) -> str:
    states = ", ".join(f"{n} {s}" for s, n in sorted(brokers["by_state"].items()))
    return f"{brokers['total']}" + (f" ({states})" if states else "")


def labels_text(labels: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in HIDDEN_LABELS)


def age_text(seconds: float) -> str:
    """``45s``, ``2m05s``, ``3h07m``, ``2d04h``: an age at a glance."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(header: list[str], rows: list[list]) -> list[str]:
    cells = [header, *[[str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
