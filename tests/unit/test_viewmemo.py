"""batchd.server.viewmemo: views kept by row never go stale, stay bounded, and a reply holding
them encodes byte for byte as json.dumps would."""

import json

from hypothesis import given
from hypothesis import strategies as st

from batchd.server.viewmemo import ViewList, ViewMemo, dumps

STATE = 1  # the state's column in the rows below: (id, state, reason)


def _build(calls):
    def build(row):
        calls.append(row)
        return {"id": row[0], "state": row[1], "reason": row[2]}
    return build


def test_a_row_seen_again_gives_the_same_view_and_a_changed_row_a_new_one():
    calls: list = []
    memo = ViewMemo()
    first = memo.views([(1, "PENDING", "Priority"), (2, "PENDING", "None")], STATE, _build(calls))
    again = memo.views([(1, "PENDING", "Priority"), (2, "PENDING", "JobHeldUser")], STATE, _build(calls))
    assert again[0] is first[0] and again[1]["reason"] == "JobHeldUser"
    assert calls == [(1, "PENDING", "Priority"), (2, "PENDING", "None"), (2, "PENDING", "JobHeldUser")]
    assert again.texts == [json.dumps(v) for v in again]


def test_running_rows_and_unhashable_rows_are_built_every_time():
    calls: list = []
    memo = ViewMemo()
    rows = [(1, "RUNNING", "None"), (2, "SUSPENDED", "None"), (3, "PENDING", ["a list"])]
    memo.views(rows, STATE, _build(calls))
    memo.views(rows, STATE, _build(calls))
    assert len(calls) == 6 and len(memo) == 0


def test_the_memo_keeps_at_most_cap_rows_the_least_recently_used_dropped_first():
    calls: list = []
    memo = ViewMemo(cap=3)
    memo.views([(i, "PENDING", "None") for i in range(3)], STATE, _build(calls))
    memo.views([(0, "PENDING", "None")], STATE, _build(calls))  # 0 used again: 1 is now the oldest
    assert len(calls) == 3
    memo.views([(3, "PENDING", "None")], STATE, _build(calls))  # 1 goes
    assert len(memo) == 3
    memo.views([(2, "PENDING", "None"), (0, "PENDING", "None"), (3, "PENDING", "None")], STATE, _build(calls))
    assert len(calls) == 4
    memo.views([(1, "PENDING", "None")], STATE, _build(calls))
    assert calls[4:] == [(1, "PENDING", "None")]


def test_a_listing_longer_than_the_cap_keeps_its_first_rows_instead_of_thrashing():
    calls: list = []
    memo = ViewMemo(cap=3)
    rows = [(i, "PENDING", "None") for i in range(5)]
    memo.views(rows, STATE, _build(calls))
    assert len(memo) == 3 and len(calls) == 5
    again = memo.views(rows, STATE, _build(calls))
    assert calls[5:] == rows[3:]  # the first three were kept; only the other two built again
    assert [v for v in again] == [v for v in memo.views(rows, STATE, _build([]))]


VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                      max_leaves=10)


@given(st.lists(st.dictionaries(st.text(), VALUES, max_size=4), max_size=4),
       st.dictionaries(st.text(), VALUES, max_size=3))
def test_a_reply_with_view_lists_encodes_as_json_dumps(views, rest):
    payload = {**rest, "jobs": ViewList(views, [json.dumps(v) for v in views])}
    assert dumps(payload) == json.dumps(payload)
    assert dumps(rest) == json.dumps(rest) and dumps([1, views]) == json.dumps([1, views])


def test_a_kept_views_trimming_is_cut_once_per_set_of_keys_and_follows_the_view():
    memo = ViewMemo(cap=2)
    rows = [(1, "PENDING", "Priority"), (2, "RUNNING", "None")]
    views = memo.views(rows, STATE, _build([]))
    first = memo.trimmed(views, ["id", "reason"])
    again = memo.trimmed(memo.views(rows, STATE, _build([])), ["id", "reason"])
    assert first == again == [{"id": 1, "reason": "Priority"}, {"id": 2, "reason": "None"}]
    assert again.texts == [json.dumps(v) for v in again]
    assert again[0] is first[0]            # kept: the same cut
    assert again[1] is not first[1]        # a running job's view is not kept, nor its cut
    assert memo.trimmed(views, ["state"]) == [{"state": "PENDING"}, {"state": "RUNNING"}]
    # a changed row is a new view: its cut is new too
    changed = memo.trimmed(memo.views([(1, "PENDING", "JobHeldUser")], STATE, _build([])), ["id", "reason"])
    assert changed == [{"id": 1, "reason": "JobHeldUser"}]
    # views dropped from the memo take their cuts along; a view never kept is cut anew
    memo.views([(i, "PENDING", "None") for i in range(10, 14)], STATE, _build([]))
    assert len(memo._by_view) == len(memo) == 2
    assert memo.trimmed([{"id": 9, "x": 1}], ["x"]) == [{"x": 1}]
