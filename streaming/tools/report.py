"""``epochwatch report``: a picture of a replay -- broker state lanes over time with the alerts below.

Inputs are JSON Lines: alert records (the ``alert`` event, times in UTC ms) and broker state
transitions (``{cluster_id, broker_id, from_state, to_state, at_ms, incarnation_id, reason}``,
docs/CONTRACTS.md). Reading and shaping the data is pure; only :func:`draw_png` touches
matplotlib (Agg backend, no display needed).
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Iterable

from streaming import events
from streaming.times import utc_text

STATE_COLORS = {"INITIAL": "#8ab8ff", "INACTIVE": "#e02f44", "ACTIVE": "#56a64b", "STOPPING": "#ff9830"}
SEVERITY_COLORS = {"info": "#3274d9", "warning": "#ff9830", "critical": "#c4162a"}
IDENTITY_LABELS = ("alertname", "cluster", "severity")
MAX_ALERT_ROWS = 40


class ReportInputError(ValueError):
    """A bad input line; the message names the file and the line."""


@dataclass(frozen=True)
class Segment:
    state: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Incident:
    fingerprint: str
    alertname: str
    severity: str
    cluster: str
    entity: str            # the rule's entity labels, e.g. "broker_id=3"
    start_ms: int
    end_ms: int | None     # None while still firing at the end of the replay
    summary: str
    labels: dict

    @property
    def row(self) -> tuple[str, str, str]:
        return self.alertname, self.cluster, self.entity


# --- reading --------------------------------------------------------------------------------

def _json_lines(stream: IO[str], name: str) -> Iterable[tuple[int, dict]]:
    for line_no, _, obj in events.json_lines(stream):
        if isinstance(obj, events.JsonLinesError):
            raise ReportInputError(f"{name}:{obj.line_no}: {obj.reason}")
        if not isinstance(obj, dict):
            raise ReportInputError(f"{name}:{line_no}: expected a JSON object")
        yield line_no, obj


def read_transitions(stream: IO[str], name: str = "transitions") -> list[dict]:
    out = []
    for line_no, obj in _json_lines(stream, name):
        where = f"{name}:{line_no}"
        for key in ("cluster_id", "broker_id", "from_state", "to_state", "at_ms"):
            if key not in obj:
                raise ReportInputError(f"{where}: missing '{key}' (a broker state transition needs "
                                       "cluster_id, broker_id, from_state, to_state, at_ms)")
        for key in ("from_state", "to_state"):
            if obj[key] not in events.BROKER_STATES:
                raise ReportInputError(f"{where}: {key} {obj[key]!r} is not one of {', '.join(events.BROKER_STATES)}")
        for key in ("broker_id", "at_ms"):
            if isinstance(obj[key], bool) or not isinstance(obj[key], int):
                raise ReportInputError(f"{where}: {key} must be an integer, got {obj[key]!r}")
        out.append(obj)
    return out


def read_alerts(stream: IO[str], name: str = "alerts") -> list[dict]:
    out = []
    for line_no, obj in _json_lines(stream, name):
        obj = {"event_type": "alert", **obj}
        if obj["event_type"] != "alert":
            raise ReportInputError(f"{name}:{line_no}: event_type {obj['event_type']!r} is not an alert record")
        try:
            out.append(events.normalize(obj))
        except events.EventError as exc:
            raise ReportInputError(f"{name}:{line_no}: {exc}") from None
    return out


# --- shaping (pure) -------------------------------------------------------------------------

def incidents_of(alerts: Iterable[dict]) -> list[Incident]:
    """One incident per fingerprint: started by its firing record, ended by its resolved one."""
    by_fingerprint: dict[str, list[dict]] = defaultdict(list)
    for alert in alerts:
        by_fingerprint[alert["fingerprint"]].append(alert)
    out = []
    for fingerprint, records in by_fingerprint.items():
        first = min(records, key=lambda r: (r["starts_at"], r["status"] != "firing"))
        ends = [r["ends_at"] for r in records if r["status"] == "resolved" and r["ends_at"] is not None]
        labels = dict(first["labels"])
        entity = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in IDENTITY_LABELS)
        out.append(Incident(
            fingerprint=fingerprint, alertname=first["alertname"], severity=first["severity"],
            cluster=labels.get("cluster", first["cluster_id"]), entity=entity,
            start_ms=min(r["starts_at"] for r in records), end_ms=max(ends) if ends else None,
            summary=first["annotations"].get("summary", ""), labels=labels,
        ))
    return sorted(out, key=lambda i: (i.start_ms, i.alertname, i.fingerprint))


def time_window(transitions: list[dict], incidents: list[Incident]) -> tuple[int, int]:
    times = [t["at_ms"] for t in transitions]
    times += [i.start_ms for i in incidents] + [i.end_ms for i in incidents if i.end_ms is not None]
    if not times:
        raise ReportInputError("both inputs are empty: there is nothing to draw")
    start, end = min(times), max(times)
    pad = max((end - start) // 20, 30_000)
    return start - pad, end + pad


def broker_lanes(transitions: list[dict], window: tuple[int, int]) -> dict[tuple[str, int], list[Segment]]:
    """Per (cluster, broker): the state segments covering the window, in time order.

    Transitions are drawn in time order, except one that reverses an earlier decision
    (``reverses_at_ms``: an event read late undid it, so its time is before the decision's): it
    comes right after the decision it reverses and rewrites the lane from its own time on, since
    what was drawn there is what the job believed before the event arrived, not what the broker
    did. Before a broker's first transition it was in that transition's ``from_state``; after
    the last one it stays in its ``to_state``.
    """
    per_broker: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for t in transitions:
        per_broker[(t["cluster_id"], t["broker_id"])].append(t)
    lanes = {}
    for key in sorted(per_broker):
        # stable: the order of the file breaks ties (a reversal follows what it reverses)
        ordered = sorted(per_broker[key], key=lambda t: t.get("reverses_at_ms", t["at_ms"]))
        starts: list[tuple[int, str]] = []   # (from when, state), in time order
        for t in ordered:
            while starts and starts[-1][0] > t["at_ms"]:
                starts.pop()
            starts.append((t["at_ms"], t["to_state"]))
        bounds = [(window[0], ordered[0]["from_state"]), *starts]
        segments: list[Segment] = []
        for (start, state), following in zip(bounds, bounds[1:] + [None]):
            end = following[0] if following else window[1]
            if segments and segments[-1].state == state:   # a reversal joins what it restored
                segments[-1] = Segment(state, segments[-1].start_ms, end)
            elif end > start:
                segments.append(Segment(state, start, end))
        lanes[key] = segments
    return lanes


def alert_rows(incidents: list[Incident]) -> tuple[list[tuple[str, str, str]], int]:
    """Rows of the alert panel (alertname, cluster, entity) in order of first firing; and rows left out.

    Incidents of the same alert on the same entity share a row, so a flapping alert reads as a
    series of spans instead of a wall of rows.
    """
    first: dict[tuple, int] = {}
    for i in incidents:  # incidents are sorted by start
        first.setdefault(i.row, i.start_ms)
    rows = sorted(first, key=lambda r: (first[r], r))
    return rows[:MAX_ALERT_ROWS], max(0, len(rows) - MAX_ALERT_ROWS)


def iso(ms: int | None) -> str:
    return "" if ms is None else utc_text(ms)


def duration_text(ms: int) -> str:
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def lane_label(key: tuple[str, int], clusters: set[str]) -> str:
    return f"broker {key[1]}" if len(clusters) == 1 else f"{key[0]} / broker {key[1]}"


# --- drawing --------------------------------------------------------------------------------

def draw_png(lanes: dict, incidents: list[Incident], window: tuple[int, int], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    def x(ms: int) -> float:
        return mdates.date2num(datetime.fromtimestamp(ms / 1000, tz=timezone.utc))

    rows, hidden = alert_rows(incidents)
    n_lanes, n_rows = max(len(lanes), 1), max(len(rows), 1)
    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, figsize=(14, 1.8 + 0.42 * n_lanes + 0.34 * n_rows),
        gridspec_kw={"height_ratios": [0.42 * n_lanes + 0.4, 0.34 * n_rows + 0.4]}, dpi=100)
    clusters = {key[0] for key in lanes}
    lane_index = {key: n for n, key in enumerate(lanes)}
    for key, segments in lanes.items():
        y = lane_index[key]
        top.broken_barh([(x(s.start_ms), x(s.end_ms) - x(s.start_ms)) for s in segments], (y - 0.4, 0.8),
                        facecolors=[STATE_COLORS[s.state] for s in segments], edgecolor="white", linewidth=0.5)
    for incident in incidents:  # alert starts marked on the top edge of their broker's lane
        key = (incident.cluster, _int_or_none(incident.labels.get("broker_id")))
        if key in lane_index:
            top.plot(x(incident.start_ms), lane_index[key] - 0.4, marker="v", markersize=7, linestyle="none",
                     color=SEVERITY_COLORS[incident.severity], markeredgecolor="black", markeredgewidth=0.5)
    top.set_yticks(range(len(lanes)), [lane_label(k, clusters) for k in lanes])
    top.set_ylim(len(lanes) - 0.5, -0.75)
    top.set_title(title, loc="left", fontsize=12, fontweight="bold")
    top.legend(handles=[Patch(color=c, label=s) for s, c in STATE_COLORS.items()], loc="upper left",
               bbox_to_anchor=(1.005, 1.0), title="broker state", fontsize=8, title_fontsize=8, frameon=False)
    if not lanes:
        top.text(0.5, 0.5, "no broker state transitions", transform=top.transAxes, ha="center", color="grey")

    row_index = {row: n for n, row in enumerate(rows)}
    for incident in incidents:
        if incident.row not in row_index:
            continue
        end = incident.end_ms if incident.end_ms is not None else window[1]
        top_y = row_index[incident.row] - 0.35
        bottom.broken_barh([(x(incident.start_ms), max(x(end) - x(incident.start_ms), 1e-6))], (top_y, 0.7),
                           facecolors=SEVERITY_COLORS[incident.severity], edgecolor="black", linewidth=0.4,
                           hatch="//" if incident.end_ms is None else None)
    labels = [f"{name} ({entity or cluster})" if len(clusters) <= 1 else f"{name} ({cluster} {entity})".strip()
              for name, cluster, entity in rows]
    bottom.set_yticks(range(len(rows)), labels, fontsize=8)
    bottom.set_ylim(len(rows) - 0.5, -0.6)
    bottom.set_title("alerts (firing → resolved; hatched: still firing at the end)"
                     + (f"; {hidden} more rows in the HTML table" if hidden else ""), loc="left", fontsize=9)
    bottom.legend(handles=[Patch(color=c, label=s) for s, c in SEVERITY_COLORS.items()], loc="upper left",
                  bbox_to_anchor=(1.005, 1.0), title="severity", fontsize=8, title_fontsize=8, frameon=False)
    if not rows:
        bottom.text(0.5, 0.5, "no alerts", transform=bottom.transAxes, ha="center", color="grey")
    for axis in (top, bottom):
        axis.grid(axis="x", color="#dddddd", linewidth=0.6)
        axis.set_axisbelow(True)
    bottom.set_xlim(x(window[0]), x(window[1]))
    bottom.xaxis.set_major_locator(mdates.AutoDateLocator(tz=timezone.utc, minticks=5, maxticks=12))
    bottom.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))
    bottom.set_xlabel(f"UTC, {iso(window[0])[:10]}")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# --- HTML -----------------------------------------------------------------------------------

def render_html(png: bytes, incidents: list[Incident], window: tuple[int, int], title: str) -> str:
    rows = []
    for i in incidents:
        end = i.end_ms if i.end_ms is not None else window[1]
        status = "resolved" if i.end_ms is not None else "firing"
        cells = [i.alertname, i.severity, i.cluster, i.entity, iso(i.start_ms), iso(i.end_ms),
                 duration_text(end - i.start_ms) + ("" if i.end_ms is not None else "+"), status, i.summary]
        rows.append(f'<tr class="{html.escape(i.severity)}">'
                    + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in
                     ("alert", "severity", "cluster", "entity", "started", "ended", "duration", "status", "summary"))
    image = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }} img {{ max-width: 100%; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; }}
tr.critical td:nth-child(2) {{ color: #c4162a; font-weight: bold; }} tr.warning td:nth-child(2) {{ color: #b35c00; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{iso(window[0])} to {iso(window[1])}: {len(incidents)} alert incident(s).</p>
<img alt="broker state timeline with alerts" src="data:image/png;base64,{image}">
<h2>Alerts</h2>
<table><thead><tr>{header}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""


@dataclass(frozen=True)
class ReportSummary:
    brokers: int
    transitions: int
    incidents: int
    window: tuple[int, int]


def build_report(alerts_path: Path, transitions_path: Path, out_png: Path, out_html: Path | None = None,
                 title: str | None = None) -> ReportSummary:
    with open(alerts_path, encoding="utf-8") as handle:
        alerts = read_alerts(handle, str(alerts_path))
    with open(transitions_path, encoding="utf-8") as handle:
        transitions = read_transitions(handle, str(transitions_path))
    incidents = incidents_of(alerts)
    window = time_window(transitions, incidents)
    lanes = broker_lanes(transitions, window)
    title = title or f"epochwatch: {len(lanes)} brokers, {len(incidents)} alert incidents"
    png = draw_png(lanes, incidents, window, title)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    out_png.write_bytes(png)
    if out_html is not None:
        out_html.parent.mkdir(parents=True, exist_ok=True)
        out_html.write_text(render_html(png, incidents, window, title), encoding="utf-8")
    return ReportSummary(brokers=len(lanes), transitions=len(transitions), incidents=len(incidents), window=window)
