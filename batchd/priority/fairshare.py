"""Fair-share factors over the association tree: Fair Tree (default) and classic.

Pure: no I/O, no clock, no logging. Input is a ``Tree`` (``batchd.priority.tree``);
output one ``ShareRow`` per association in sshare's row order.

Fair Tree (Slurm's default since 19.05), as Slurm's code computes it:

* ``NormShares`` S = raw shares / sum of the raw shares of the fair-share siblings
  (a C double; 0 when that sum is 0). A ``FairShare=parent`` entry shows the
  NormShares of its fair-share parent.
* ``EffectvUsage`` U = raw usage / raw usage of the fair-share parent (long double;
  0 when the parent has none). ``NormUsage`` = raw usage / root's raw usage.
* ``LevelFS`` = S / U in long double: S == 0 gives 0, U == 0 gives +inf, a "parent"
  user ranks with +inf, a "parent" account not at all; sshare shows "parent" entries'
  LevelFS blank.
* Ranking: ``rank = rnt = number of user associations``; depth first from root, the
  fair-share children of each account sorted by LevelFS descending, users before
  accounts when equal; a user takes ``rank = rnt`` unless tied with the previous
  sibling, gets ``FairShare = rank / user_count``, and ``rnt`` drops by one; an
  account is descended in place, its first child inheriting a tie with the
  account's previous sibling. Tied sibling accounts are descended one after the
  other, never merged (Slurm's code, not its documentation). Equal LevelFS keep
  sshare's order (users by name, then accounts by name), the rule batchd picks for
  what Slurm leaves to qsort.

Classic (``fairshare_algorithm = "classic"``, Slurm's ``NO_FAIR_TREE``):

* NormShares = product of ``raw / level shares`` along the fair-share path.
* NormUsage = raw usage / root's raw usage, capped at 1.
* EffectvUsage: directly under root = NormUsage; "parent" entries take their
  fair-share parent's; otherwise ``UA + (UE_parent - UA) * raw / level shares``
  (``UE_parent`` when the level shares are 0).
* FairShare (users) = ``2 ** (-(EffectvUsage / NormShares) / dampening)``, 0 when
  NormShares is 0.

Accounts have no FairShare (None); root has no RawShares, NormUsage, FairShare or
LevelFS (None), NormShares 0 and EffectvUsage 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from batchd.priority.longdouble import dbl, ld, ld_div
from batchd.priority.tree import Assoc, Tree

__all__ = ["ShareRow", "compute_shares", "fair_tree", "classic"]

INF = math.inf


@dataclass
class ShareRow:
    """One sshare row. ``user`` None for an account row; ``parent`` is the account
    the row hangs under (None for root); ``depth`` its depth (root 0). Numbers as
    sshare prints them before formatting; None means blank."""

    account: str
    user: str | None
    parent: str | None
    depth: int
    raw_shares: int | str | None
    norm_shares: float
    raw_usage: float
    norm_usage: float | None
    effectv_usage: float
    fairshare: float | None
    level_fs: float | None


def _root_row(tree: Tree) -> ShareRow:
    return ShareRow("root", None, None, 0, None, 0.0, float(tree.root.usage), None, 1.0, None, None)


def _row(a: Assoc, norm_shares: float, norm_usage: float, eff: float, fs: float | None,
         lfs: float | None) -> ShareRow:
    parent = a.account if a.user is not None else (a.parent.account if a.parent else None)
    return ShareRow(a.account, a.user, parent, a.depth, a.shares, norm_shares, float(a.usage), norm_usage,
                    eff, fs, lfs)


def _sibling_norm(a: Assoc) -> float:
    """Sibling-relative NormShares (double); a "parent" entry takes its fs parent's."""
    src = a.fs_parent if a.is_parent else a
    if src is None or src.fs_parent is None or src.level_shares == 0:
        return 0.0
    return src.raw_shares / src.level_shares


def _norm_usage(a: Assoc, root_usage: Fraction) -> float:
    return dbl(ld_div(a.usage, root_usage)) if root_usage else 0.0


def fair_tree(tree: Tree, rows_too: bool = True) -> tuple[list[ShareRow], dict[str, float]]:
    """Fair Tree rows (sshare order) and ``{"account/user": fs_factor}`` (no rows, ``[]``,
    without ``rows_too``: the factors do not need them)."""
    root_usage = ld(tree.root.usage)
    s: dict[int, float] = {}
    u: dict[int, Fraction] = {}
    lf: dict[int, Fraction | float | None] = {}
    for a in tree.order:
        if a is tree.root:
            continue
        s[id(a)] = _sibling_norm(a)
        p = a.fs_parent
        u[id(a)] = ld_div(a.usage, p.usage) if p is not None and p.usage else Fraction(0)
        if a.is_parent:
            lf[id(a)] = INF if a.user is not None else None
        elif s[id(a)] == 0:
            lf[id(a)] = Fraction(0)
        elif u[id(a)] == 0:
            lf[id(a)] = INF
        else:
            lf[id(a)] = ld_div(Fraction(s[id(a)]), u[id(a)])

    n_users = tree.user_count
    fs: dict[str, float] = {}
    state = {"rank": n_users, "rnt": n_users}

    def rank(siblings: list[Assoc], account_tied: bool) -> None:
        items = [a for a in siblings if lf[id(a)] is not None]
        items.sort(key=lambda a: a.user is None)  # users first among equals (stable)
        items.sort(key=lambda a: lf[id(a)], reverse=True)  # type: ignore[arg-type, return-value]
        prev: Fraction | float | None = None
        for i, a in enumerate(items):
            tied = account_tied if i == 0 else (prev is not None and lf[id(a)] == prev)
            if a.user is not None:
                if not tied:
                    state["rank"] = state["rnt"]
                fs[a.key] = state["rank"] / n_users if n_users else 0.0
                state["rnt"] -= 1
            else:
                rank(a.fs_children, tied)
            prev = lf[id(a)]

    rank(tree.root.fs_children, False)
    if not rows_too:
        return [], fs
    rows = [_root_row(tree)]
    for a in tree.order:
        if a is tree.root:
            continue
        v = lf[id(a)]
        rows.append(_row(a, s[id(a)], _norm_usage(a, root_usage), dbl(u[id(a)]),
                         fs.get(a.key) if a.user is not None else None,
                         None if v is None or a.is_parent else (INF if v == INF else dbl(v))))
    return rows, fs


def classic(tree: Tree, dampening: float = 1.0) -> tuple[list[ShareRow], dict[str, float]]:
    """Classic rows (sshare order) and ``{"account/user": fs_factor}``."""
    if dampening <= 0:
        raise ValueError("fairshare_dampening_factor must be > 0")
    root_usage = ld(tree.root.usage)
    ns: dict[int, float] = {id(tree.root): 1.0}
    ue: dict[int, float] = {id(tree.root): 1.0}
    ua: dict[int, float] = {}
    fs: dict[str, float] = {}
    rows = [_root_row(tree)]
    for a in tree.order:  # parents come before children in this order
        if a is tree.root:
            continue
        p = a.fs_parent or tree.root
        ua[id(a)] = min(_norm_usage(a, root_usage), 1.0)
        if a.is_parent:
            # Slurm: the fs parent's NormShares (root's classic NormShares is 1); the
            # EffectvUsage of an entry whose fs parent is root is its own NormUsage
            ns[id(a)] = ns[id(p)]
            ue[id(a)] = ue[id(p)] if p is not tree.root else ua[id(a)]
        else:
            ratio = a.raw_shares / a.level_shares if a.level_shares else 0.0
            ns[id(a)] = ratio if p is tree.root else ns[id(p)] * ratio
            if p is tree.root:
                ue[id(a)] = ua[id(a)]
            elif a.level_shares == 0:
                ue[id(a)] = ue[id(p)]
            else:
                ue[id(a)] = ua[id(a)] + (ue[id(p)] - ua[id(a)]) * a.raw_shares / a.level_shares
        f: float | None = None
        if a.user is not None:
            f = 2.0 ** (-(ue[id(a)] / ns[id(a)]) / dampening) if ns[id(a)] > 0 else 0.0
            fs[a.key] = f
        rows.append(_row(a, ns[id(a)], ua[id(a)], ue[id(a)], f, None))
    return rows, fs


def compute_shares(tree: Tree, algorithm: str = "fair_tree",
                   dampening: float = 1.0, rows_too: bool = True) -> tuple[list[ShareRow], dict[str, float]]:
    """Rows and per-user fair-share factors with ``algorithm`` ("fair_tree"|"classic");
    ``rows_too=False``: Fair Tree may leave the rows out (``[]``) where only the factors
    are wanted."""
    if algorithm == "fair_tree":
        return fair_tree(tree, rows_too)
    if algorithm == "classic":
        return classic(tree, dampening)
    raise ValueError(f"unknown fairshare_algorithm {algorithm!r} (fair_tree or classic)")
