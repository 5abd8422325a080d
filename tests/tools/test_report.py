"""``epochwatch report``: small synthetic replay in, a readable PNG and an HTML alert table out."""

from __future__ import annotations

import base64
import json
import re

import pytest
from PIL import Image

from streaming.commands import main
from streaming.tools.report import (
    ReportInputError,
    Segment,
    broker_lanes,
    incidents_of,
    read_alerts,
    read_transitions,
    time_window,
)

T0 = 1_790_000_000_000  # ms, an arbitrary UTC instant
MIN = 60_000
CLUSTER = "kafka-prod"


def transition(broker, old, new, at, reason="heartbeat", incarnation=100):
    return {"cluster_id": CLUSTER, "broker_id": broker, "from_state": old, "to_state": new, "at_ms": at,
            "incarnation_id": incarnation + broker, "reason": reason}


def alert(name, severity, status, starts, ends=None, **entity):
    labels = {"alertname": name, "cluster": CLUSTER, "severity": severity, **{k: str(v) for k, v in entity.items()}}
    fingerprint = f"{name}-{'-'.join(map(str, entity.values()))}-{starts}"
    return {"event_type": "alert", "event_id": f"{fingerprint}:{status}", "cluster_id": CLUSTER,
            "event_time": ends if status == "resolved" else starts, "alertname": name, "severity": severity,
            "status": status, "labels": labels,
            "annotations": {"summary": f"{name} on {entity}", "description": "", "runbook_url": ""},
            "starts_at": starts, "ends_at": ends if status == "resolved" else None, "fingerprint": fingerprint}


TRANSITIONS = [
    transition(1, "INITIAL", "ACTIVE", T0 + 10_000),
    transition(2, "INITIAL", "ACTIVE", T0 + 12_000),
    transition(3, "INITIAL", "ACTIVE", T0 + 15_000),
    transition(2, "ACTIVE", "INACTIVE", T0 + 5 * MIN, reason="timeout"),
    transition(2, "INACTIVE", "ACTIVE", T0 + 9 * MIN, incarnation=200),
    transition(3, "ACTIVE", "STOPPING", T0 + 12 * MIN, reason="want_shutdown"),
    transition(3, "STOPPING", "INACTIVE", T0 + 13 * MIN, reason="shutdown"),
]
ALERTS = [
    alert("BrokerHeartbeatTimeout", "critical", "firing", T0 + 5 * MIN, broker_id=2),
    alert("BrokerMetadataLag", "warning", "firing", T0 + 6 * MIN, broker_id=1),
    alert("StaleMetadataResponse", "warning", "firing", T0 + 6 * MIN + 20_000, client_id="billing-consumer"),
    alert("BrokerMetadataLag", "warning", "resolved", T0 + 6 * MIN, T0 + 7 * MIN, broker_id=1),
    alert("StaleMetadataResponse", "warning", "resolved", T0 + 6 * MIN + 20_000, T0 + 8 * MIN, client_id="billing-consumer"),
    alert("BrokerHeartbeatTimeout", "critical", "resolved", T0 + 5 * MIN, T0 + 9 * MIN, broker_id=2),
    alert("BrokerRestarted", "info", "firing", T0 + 9 * MIN, broker_id=2),
    alert("BrokerRestarted", "info", "resolved", T0 + 9 * MIN, T0 + 10 * MIN, broker_id=2),
    alert("BrokerNotReturned", "warning", "firing", T0 + 18 * MIN, broker_id=3),
]


@pytest.fixture
def replay_files(tmp_path):
    alerts, transitions = tmp_path / "alerts.jsonl", tmp_path / "transitions.jsonl"
    alerts.write_text("".join(json.dumps(a) + "\n" for a in ALERTS))
    transitions.write_text("# broker state transitions\n" + "".join(json.dumps(t) + "\n" for t in TRANSITIONS))
    return alerts, transitions


def test_cli_writes_a_valid_png_and_html_with_every_alert(replay_files, tmp_path, capsys):
    alerts, transitions = replay_files
    png, page = tmp_path / "out" / "report.png", tmp_path / "out" / "report.html"
    code = main(["report", "--alerts", str(alerts), "--transitions", str(transitions), "--out", str(png),
                 "--html", str(page)])
    assert code == 0
    assert "3 brokers, 7 transitions, 5 alert incidents" in capsys.readouterr().out

    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        width, height = image.size
        assert 1000 <= width <= 2000 and 300 <= height <= 1500, image.size
        colors = {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 20)}
    for state_color in ((0x56, 0xA6, 0x4B), (0xE0, 0x2F, 0x44), (0xFF, 0x98, 0x30)):  # ACTIVE, INACTIVE, STOPPING
        assert state_color in colors, f"lane colour {state_color} missing from the picture"

    text = page.read_text()
    rows = re.findall(r"<tr class=\"(\w+)\">(.*?)</tr>", text)
    assert len(rows) == 5
    assert [re.findall(r"<td>(.*?)</td>", r)[0] for _, r in rows] == [
        "BrokerHeartbeatTimeout", "BrokerMetadataLag", "StaleMetadataResponse", "BrokerRestarted", "BrokerNotReturned"]
    heartbeat = re.findall(r"<td>(.*?)</td>", rows[0][1])
    assert heartbeat[1:4] == ["critical", CLUSTER, "broker_id=2"]
    assert heartbeat[6:8] == ["4m00s", "resolved"]
    assert re.findall(r"<td>(.*?)</td>", rows[4][1])[7] == "firing"
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text).group(1)
    assert base64.b64decode(embedded) == data


def test_lanes_cover_the_window_with_the_state_before_and_after_each_transition():
    incidents = incidents_of(read_alerts(iter(json.dumps(a) for a in ALERTS)))
    window = time_window(TRANSITIONS, incidents)
    lanes = broker_lanes(TRANSITIONS, window)
    assert list(lanes) == [(CLUSTER, 1), (CLUSTER, 2), (CLUSTER, 3)]
    assert lanes[(CLUSTER, 2)] == [
        Segment("INITIAL", window[0], T0 + 12_000),
        Segment("ACTIVE", T0 + 12_000, T0 + 5 * MIN),
        Segment("INACTIVE", T0 + 5 * MIN, T0 + 9 * MIN),
        Segment("ACTIVE", T0 + 9 * MIN, window[1]),
    ]
    assert [s.state for s in lanes[(CLUSTER, 3)]] == ["INITIAL", "ACTIVE", "STOPPING", "INACTIVE"]
    assert window[0] < T0 + 10_000 and window[1] > T0 + 18 * MIN


def test_incidents_pair_firing_and_resolved_records_by_fingerprint():
    incidents = incidents_of(read_alerts(iter(json.dumps(a) for a in ALERTS)))
    by_name = {i.alertname: i for i in incidents}
    assert (by_name["BrokerHeartbeatTimeout"].start_ms, by_name["BrokerHeartbeatTimeout"].end_ms) == (T0 + 5 * MIN, T0 + 9 * MIN)
    assert by_name["BrokerNotReturned"].end_ms is None, "no resolved record: still firing"
    assert by_name["StaleMetadataResponse"].entity == "client_id=billing-consumer"


def test_transitions_given_out_of_order_are_sorted_per_broker():
    shuffled = list(reversed(TRANSITIONS))
    assert broker_lanes(shuffled, (T0, T0 + 20 * MIN)) == broker_lanes(TRANSITIONS, (T0, T0 + 20 * MIN))


@pytest.mark.parametrize("line, message", [
    ('{"cluster_id": "c", "broker_id": 1, "from_state": "ACTIVE", "to_state": "GONE", "at_ms": 5}', "to_state 'GONE'"),
    ('{"cluster_id": "c", "broker_id": 1, "from_state": "ACTIVE", "to_state": "INACTIVE"}', "missing 'at_ms'"),
    ('{"cluster_id": "c", "broker_id": "1", "from_state": "ACTIVE", "to_state": "INACTIVE", "at_ms": 5}',
     "broker_id must be an integer"),
    ("{not json", "not JSON"),
])
def test_bad_transition_lines_name_file_and_line(line, message):
    with pytest.raises(ReportInputError, match=rf"t.jsonl:2: .*{re.escape(message)}"):
        read_transitions(iter(["", line]), "t.jsonl")


def test_bad_alert_line_names_file_and_line():
    broken = dict(ALERTS[0], severity="page-me")
    with pytest.raises(ReportInputError, match=r"a.jsonl:2: alert: .*severity"):
        read_alerts(iter([json.dumps(ALERTS[0]), json.dumps(broken)]), "a.jsonl")


def test_cli_errors(tmp_path, replay_files, capsys):
    alerts, transitions = replay_files
    assert main(["report", "--alerts", str(tmp_path / "nope.jsonl"), "--transitions", str(transitions),
                 "--out", str(tmp_path / "r.png")]) == 2
    assert "'--alerts'" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["report", "--alerts", str(empty), "--transitions", str(empty), "--out", str(tmp_path / "r.png")]) == 2
    assert "nothing to draw" in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def test_only_alerts_or_only_transitions_still_draw(tmp_path, replay_files):
    alerts, transitions = replay_files
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for a, t in ((alerts, empty), (empty, transitions)):
        out = tmp_path / f"{a.stem}-{t.stem}.png"
        assert main(["report", "--alerts", str(a), "--transitions", str(t), "--out", str(out)]) == 0
        with Image.open(out) as image:
            image.verify()


def test_lane_labels_name_the_cluster_only_when_there_are_several():
    from streaming.tools.report import lane_label

    assert lane_label(("kafka-prod", 3), {"kafka-prod"}) == "broker 3"
    assert lane_label(("kafka-prod", 3), {"kafka-prod", "kafka-dr"}) == "kafka-prod / broker 3"


def test_a_timeout_reversed_by_a_late_heartbeat_is_not_drawn_red_to_the_end():
    """Why (issue 27): the demo drew broker 6 INACTIVE for its last 40 s with no alert: the job
    decided a timeout at +65.5 s, then read a heartbeat of +58.5 s that undid it. The reversal
    comes after the timeout in the file and names it; the lane shows what the broker did."""
    timeout = transition(6, "ACTIVE", "INACTIVE", T0 + 65_500, reason="timeout")
    back = dict(transition(6, "INACTIVE", "ACTIVE", T0 + 58_500), reverses_at_ms=T0 + 65_500)
    lanes = broker_lanes([transition(6, "INITIAL", "ACTIVE", T0), timeout, back], (T0, T0 + 2 * MIN))
    assert lanes[(CLUSTER, 6)] == [Segment("ACTIVE", T0, T0 + 2 * MIN)]
    # without the mark, the same transitions are drawn by time: the timeout last, red to the end
    plain = dict(back)
    del plain["reverses_at_ms"]
    drawn = broker_lanes([transition(6, "INITIAL", "ACTIVE", T0), timeout, plain], (T0, T0 + 2 * MIN))
    assert drawn[(CLUSTER, 6)][-1] == Segment("INACTIVE", T0 + 65_500, T0 + 2 * MIN)
