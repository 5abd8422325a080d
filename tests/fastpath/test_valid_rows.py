"""The fast paths read streaming.rules.validity's CHECKS over a pack's Arrow columns
(column_passes.valid_rows): row by row, the same verdict as invalid_reason on the row's dict, for
every kind of key and every check, so a pass never skips or applies an event the engine refuses."""

from __future__ import annotations

from streaming.fastpath.column_passes import valid_rows
from streaming.rules.validity import invalid_reason
from streaming.spark.packs import read_packs, to_dicts
from streaming.spark.routing import routes
from tests.support.invalid_events import BROKEN, VALID
from tests.support.key_feed import packed


def test_arrow_verdicts_equal_the_per_event_ones():
    events = VALID + [ev for _, ev, _ in BROKEN]
    keys = {(ev["cluster_id"], *route) for ev in events for route in routes(ev, 16)}
    verdicts, refused = 0, 0
    for key in sorted(keys):
        table = read_packs(*packed(events, key))
        dicts = to_dicts(table)
        assert valid_rows(table).tolist() == [invalid_reason(ev) is None for ev in dicts], key
        verdicts += len(dicts)
        refused += sum(invalid_reason(ev) is not None for ev in dicts)
    assert verdicts >= len(events) and refused >= len(BROKEN)  # every event judged by at least one key
