"""Fair Tree and classic fair-share against Slurm's own test trees, row by row."""

import copy
import math
from fractions import Fraction

import pytest
from priority_cases import SCENARIOS, load_case

from batchd.cli.sshare_table import default_fields, render, resolve_fields
from batchd.priority import fairshare_factors, share_rows
from batchd.priority.longdouble import ld, ld_div
from batchd.priority.tree import build_tree

FIELDS = ["raw_shares", "norm_shares", "raw_usage", "norm_usage", "effectv_usage", "fairshare", "level_fs"]
CASES = sorted(p.stem for p in SCENARIOS.glob("*.json"))


def test_cases_are_present():
    assert CASES == ["classic_fairshare_doc_and_test24_1", "fair_tree_slurm_test24_4"], SCENARIOS


def _same(want, got, tol):
    if want is None:
        return got is None
    if want == "inf":
        return got == math.inf
    if isinstance(want, str):
        return got == want
    return got is not None and abs(float(want) - float(got)) <= max(tol, 1e-6 * abs(float(want)))


@pytest.mark.parametrize("name", CASES)
def test_rows_agree(name):
    case = load_case(name)
    rows = {(r.account, r.user or ""): r for r in share_rows(case["snapshot"])}
    for want in case["expected"]:
        key = (want["account"], want["user"] or "")
        if key == ("root", ""):
            continue
        got = rows[key]
        for f in FIELDS:
            if f in want:
                assert _same(want[f], getattr(got, f), case["tolerance"]), (key, f, want[f], getattr(got, f))


@pytest.mark.parametrize("name", CASES)
def test_parsable_lines_agree(name):
    """Slurm's own `sshare -l -p` lines (indentation aside). Fair Tree: all but
    TRESRunMins, which lists the cluster's TRES; classic: the eight fields test24.1's
    Slurm printed before GrpTRESMins/TRESRunMins were added to -l."""
    case = load_case(name)
    algo = case["algorithm"]
    rows = share_rows(case["snapshot"])
    out = render(rows, resolve_fields(default_fields(algo, True)), parsable="p", header=False)
    got = {}
    for line in out.splitlines():
        cells = line.split("|")
        cells[0] = cells[0].strip()
        got[(cells[0], cells[1])] = cells
    checked = 0
    for want in case["expected"]:
        line = want.get("sshare_parsable")
        prefix = want.get("sshare_parsable_prefix")
        if prefix:
            mine = got[(want["account"], want["user"] or "")]
            assert "|".join(mine).startswith(prefix)
        if not line:
            continue
        cells = line.split("|")
        mine = got[(want["account"], want["user"] or "")]
        n = len(cells) - 2 if algo == "fair_tree" else 8
        assert mine[:n] == cells[:n]
        checked += 1
    assert checked >= 5


def test_root_row_fair_tree(fair_tree_case):
    root = share_rows(fair_tree_case["snapshot"])[0]
    assert (root.account, root.user, root.raw_shares, root.norm_shares, root.raw_usage, root.norm_usage,
            root.effectv_usage, root.fairshare, root.level_fs) == ("root", None, None, 0.0, 240, None, 1.0, None, None)


def test_row_order_users_before_subaccounts(fair_tree_case):
    order = [(r.account, r.user) for r in share_rows(fair_tree_case["snapshot"])]
    want = [(w["account"], w["user"] or None) for w in fair_tree_case["expected"]]
    assert order == want


def test_float_sensitive_tie_follows_slurm(fair_tree_case):
    """uD2 (40/170 / 20/110) and uD3 (50/170 / 25/110) are equal as rationals; Slurm
    (double S, long double U and LevelFS) ranks uD3 above uD2 and ties uD3 with uDA3."""
    fs = fairshare_factors(fair_tree_case["snapshot"])
    assert fs["aD/uD3"] > fs["aD/uD2"]
    assert fs["aD/uD3"] == fs["aDA/uDA3"]
    assert Fraction(40, 170) / Fraction(20, 110) == Fraction(50, 170) / Fraction(25, 110)
    s2, s3 = Fraction(40 / 170), Fraction(50 / 170)
    assert ld_div(s2, ld_div(20, 110)) < ld_div(s3, ld_div(25, 110))


def test_long_double_rounding():
    assert ld(Fraction(1, 3)) != Fraction(1, 3)
    assert abs(ld(Fraction(1, 3)) - Fraction(1, 3)) < Fraction(1, 2**65)
    assert ld(0.1) == Fraction(0.1)  # a double is exact in long double
    assert ld(2**64 + 1) == 2**64  # 65 significant bits round to even


def _tree(accounts, users, usage):
    return {"accounts": [{"name": n, "parent": p, "shares": s} for n, p, s in accounts],
            "users": [{"name": u, "account": a, "shares": s} for a, u, s in users],
            "usage": {"users": usage}, "jobs": [], "nodes": []}


def test_tied_sibling_accounts_descend_in_turn_not_merged():
    # A and B tie (same shares, same usage); Slurm's code descends A then B, the first
    # user of B inheriting the rank of A's last ranked user.
    snap = _tree([("A", None, 10), ("B", None, 10)],
                 [("A", "a1", 1), ("A", "a2", 1), ("B", "b1", 1), ("B", "b2", 1)],
                 {"A/a1": 10, "A/a2": 30, "B/b1": 5, "B/b2": 35})
    fs = fairshare_factors(snap)
    assert fs["A/a1"] == 1.0 and fs["A/a2"] == 0.75
    assert fs["B/b1"] == 0.75  # inherits the current rank (tie), not 0.5
    assert fs["B/b2"] == 0.25
    # merged children (the documented behaviour) would have ranked b1 first


def test_zero_usage_users_all_get_one():
    snap = _tree([("A", None, 1), ("B", None, 3)], [("A", "x", 1), ("B", "y", 2), ("B", "z", 1)], {})
    assert set(fairshare_factors(snap).values()) == {1.0}


def test_classic_dampening_and_zero_shares(classic_case):
    snap = copy.deepcopy(classic_case["snapshot"])
    snap["policy"]["fairshare_dampening_factor"] = 2
    fs = fairshare_factors(snap)
    assert fs["AccountB/User1"] == pytest.approx(2 ** (-(0.3875 / 0.3) / 2), abs=1e-9)
    assert fs["AccountG/User6"] == 0.0


def test_tree_errors():
    with pytest.raises(ValueError, match="unknown parent"):
        build_tree(_tree([("A", "nope", 1)], [], {}))
    with pytest.raises(ValueError, match="negative"):
        build_tree(_tree([("A", None, 1)], [("A", "u", 1)], {"A/u": -1}))
    with pytest.raises(ValueError, match="shares"):
        build_tree(_tree([("A", None, "lots")], [], {}))
    bad = _tree([("A", None, 1)], [("A", "u", 1)], {"A/u": 10})
    bad["usage"]["accounts"] = {"A": 11}
    with pytest.raises(ValueError, match="does not match"):
        build_tree(bad)
    bad["usage"]["accounts"] = {"A": 10}
    build_tree(bad)


def test_default_shares_from_gpu_quota_and_implicit_users():
    snap = {"accounts": [{"name": "t", "parent": None, "resources": {"gres/gpu": {"quota": 6}}},
                         {"name": "s", "parent": None}],
            "jobs": [{"id": 1, "account": "t", "user": "ann", "state": "PENDING"}], "nodes": []}
    tree = build_tree(snap)
    assert tree.accounts["t"].shares == 6 and tree.accounts["s"].shares == 1
    assert "t/ann" in tree.users


def test_classic_fairshare_parent_user():
    """root -> A 40 {User1 parent, User2 10}, B 60 {User3 1}; usage 10/20/30.
    A: NormShares .4, EffectvUsage = NormUsage .5 (under root); User1 takes A's
    NormShares and EffectvUsage; User2's level shares are 10 (the parent entry adds 0)."""
    snap = _tree([("A", None, 40), ("B", None, 60)], [("A", "User1", "parent"), ("A", "User2", 10), ("B", "User3", 1)],
                 {"A/User1": 10, "A/User2": 20, "B/User3": 30})
    snap["policy"] = {"fairshare_algorithm": "classic"}
    rows = {(r.account, r.user): r for r in share_rows(snap)}
    u1, u2 = rows[("A", "User1")], rows[("A", "User2")]
    assert (u1.raw_shares, u1.norm_shares, u1.effectv_usage) == ("parent", pytest.approx(0.4), pytest.approx(0.5))
    assert (u2.norm_shares, u2.effectv_usage) == (pytest.approx(0.4), pytest.approx(0.5))
    assert u1.fairshare == pytest.approx(2 ** -1.25) and u2.fairshare == pytest.approx(2 ** -1.25)
    assert rows[("B", "User3")].fairshare == pytest.approx(2 ** (-0.5 / 0.6))


def test_usage_of_deleted_account_is_dropped():
    snap = _tree([("A", None, 1)], [("A", "u", 1)], {"A/u": 5, "gone/x": 100})
    snap["usage"]["accounts"] = {"gone": 100}
    rows = share_rows(snap)
    assert rows[0].raw_usage == 5
    with pytest.raises(ValueError, match="account/user"):
        build_tree(_tree([("A", None, 1)], [], {"A": 5}))
