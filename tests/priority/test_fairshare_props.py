"""Property tests of the fair-share factors over random trees (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from batchd.priority import fairshare_factors, share_rows


@st.composite
def trees(draw):
    n_acct = draw(st.integers(min_value=1, max_value=5))
    accounts = []
    for i in range(n_acct):
        parent = draw(st.sampled_from([None] + [a["name"] for a in accounts]))
        shares = draw(st.one_of(st.integers(min_value=0, max_value=50), st.just("parent")))
        accounts.append({"name": f"a{i}", "parent": parent, "shares": shares})
    users, usage = [], {}
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        acct = draw(st.sampled_from(["root"] + [a["name"] for a in accounts]))
        users.append({"name": f"u{i}", "account": acct, "shares": draw(st.integers(min_value=0, max_value=20))})
        usage[f"{acct}/u{i}"] = draw(st.one_of(st.just(0.0), st.floats(min_value=0, max_value=1e9)))
    return {"accounts": accounts, "users": users, "usage": {"users": usage}, "jobs": [], "nodes": []}


@settings(max_examples=150, deadline=None)
@given(tree=trees(), algo=st.sampled_from(["fair_tree", "classic"]), data=st.data())
def test_idle_sibling_never_ranks_below_busier_sibling_with_equal_shares(tree, algo, data):
    shares = data.draw(st.integers(min_value=1, max_value=20))
    acct = data.draw(st.sampled_from(["root"] + [a["name"] for a in tree["accounts"]]))
    busy = data.draw(st.floats(min_value=1e-3, max_value=1e9))
    tree["users"] += [{"name": "idle", "account": acct, "shares": shares},
                      {"name": "busy", "account": acct, "shares": shares}]
    tree["usage"]["users"][f"{acct}/idle"] = 0.0
    tree["usage"]["users"][f"{acct}/busy"] = busy
    tree["policy"] = {"fairshare_algorithm": algo}
    fs = fairshare_factors(tree)
    assert fs[f"{acct}/idle"] >= fs[f"{acct}/busy"]


@settings(max_examples=150, deadline=None)
@given(tree=trees(), algo=st.sampled_from(["fair_tree", "classic"]))
def test_factors_in_unit_interval_and_one_row_per_association(tree, algo):
    tree["policy"] = {"fairshare_algorithm": algo}
    fs = fairshare_factors(tree)
    assert all(0.0 <= v <= 1.0 for v in fs.values())
    assert len(fs) == len(tree["users"])
    rows = share_rows(tree)
    assert len(rows) == 1 + len(tree["accounts"]) + len(tree["users"])
    assert all(r.raw_usage >= 0 and r.effectv_usage >= 0 for r in rows)
    if algo == "fair_tree":  # ranks are k / n_users
        n = len(tree["users"])
        assert all(abs(v * n - round(v * n)) < 1e-9 for v in fs.values())
