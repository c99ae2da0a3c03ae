"""The association tree of a snapshot: accounts, user associations, shares, usage.

Pure: no I/O, no clock. Built from a raw snapshot dict (docs/snapshot.md).

Snapshot keys read here
-----------------------
* ``accounts``: ``[{"name", "parent", "shares"}]``. ``parent`` None (or "root") hangs
  the account under the implicit ``root`` account; an account named ``root`` is that
  root itself and is skipped. ``shares`` is an integer >= 0 or ``"parent"`` (Slurm's
  ``FairShare=parent``); when absent it defaults to the account's ``gres/gpu`` quota
  (``resources["gres/gpu"]["quota"]`` when > 0), else 1.
* ``users``: ``[{"name", "account", "shares"}]`` user associations; ``shares`` as for
  accounts, default 1; ``account`` ``"root"`` makes a user association of the root
  account. A (account, user) pair that has jobs in ``jobs`` but no entry here gets an
  implicit association with 1 share (Slurm would have refused the job; batchd keeps
  going rather than hide the job). An association naming an unknown account raises
  ``ValueError``.
* ``usage``: ``{"users": {"account/user": billing-seconds}, "accounts": {"name": x}}``.
  An account's raw usage is the sum of its subtree's user usage; an account figure,
  when given, must agree with that sum (relative 1e-6, absolute 1e-3) or
  ``ValueError`` is raised. Negative usage raises ``ValueError``. Usage of an account
  that no longer exists is ignored (Slurm drops it with the association); usage of
  an unknown user of a known account creates that association (1 share).

Row order (``Tree.order``) is Slurm's sshare order: root first, then depth first, each
account's user associations (by user name) before its sub-accounts (by account name),
names compared as byte strings (strcmp).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

__all__ = ["PARENT", "Assoc", "Tree", "build_tree"]

PARENT = "parent"
ROOT = "root"


@dataclass
class Assoc:
    """One association. ``user`` is None for an account.

    ``shares`` is an int or ``PARENT``. ``usage`` is the exact raw usage
    (billing-seconds) as a Fraction, summed over the subtree for accounts.
    ``parent`` is the real parent account (None for root); ``fs_parent`` the nearest
    ancestor account whose shares are not ``PARENT`` (the fair-share parent).
    """

    account: str
    user: str | None
    shares: int | str
    parent: Assoc | None = None
    fs_parent: Assoc | None = None
    children: list[Assoc] = field(default_factory=list)
    fs_children: list[Assoc] = field(default_factory=list)
    usage: Fraction = Fraction(0)
    level_shares: int = 0  # sum of the raw shares of this association's fair-share siblings
    depth: int = 0

    @property
    def key(self) -> str:
        """``"account/user"`` for a user association, the account name otherwise."""
        return f"{self.account}/{self.user}" if self.user is not None else self.account

    @property
    def is_parent(self) -> bool:
        return self.shares == PARENT

    @property
    def raw_shares(self) -> int:
        """Shares counted in level sums (a ``parent`` entry counts 0)."""
        return 0 if self.shares == PARENT else int(self.shares)


@dataclass
class Tree:
    """All associations of a snapshot. ``order`` is sshare's row order."""

    root: Assoc
    accounts: dict[str, Assoc]
    users: dict[str, Assoc]  # keyed by "account/user"
    order: list[Assoc]

    @property
    def user_count(self) -> int:
        return len(self.users)


def _shares(value: Any, default: int, what: str) -> int | str:
    if value is None:
        return default
    if isinstance(value, str):
        if value.strip().lower() == PARENT:
            return PARENT
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{what}: shares must be an integer or \"parent\", not {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise ValueError(f"{what}: shares must be a non-negative integer or \"parent\", not {value!r}")
    return int(value)


def _default_account_shares(acct: dict) -> int:
    res = acct.get("resources") or {}
    gpu = res.get("gres/gpu") if isinstance(res, dict) else None
    if isinstance(gpu, dict):
        q = gpu.get("quota")
        if isinstance(q, int | float) and q > 0:
            return int(q)
    return 1


def _usage(value: Any, what: str) -> Fraction:
    try:
        f = Fraction(value)
    except (TypeError, ValueError):
        raise ValueError(f"usage of {what} is not a number: {value!r}") from None
    if f < 0:
        raise ValueError(f"usage of {what} is negative: {value!r}")
    return f


def build_tree(snapshot: dict) -> Tree:
    """Build the association tree of ``snapshot`` (see the module docstring)."""
    root = Assoc(ROOT, None, 1)
    accounts: dict[str, Assoc] = {ROOT: root}
    raw_parent: dict[str, str] = {}
    for spec in snapshot.get("accounts") or []:
        name = str(spec["name"])
        if name == ROOT:
            continue
        if name in accounts:
            raise ValueError(f"account {name!r} is defined twice")
        accounts[name] = Assoc(name, None, _shares(spec.get("shares"), _default_account_shares(spec),
                                                   f"account {name}"))
        raw_parent[name] = str(spec.get("parent") or ROOT)
    for name, pname in raw_parent.items():
        if pname not in accounts:
            raise ValueError(f"account {name!r} has an unknown parent {pname!r}")
        accounts[name].parent = accounts[pname]
        accounts[pname].children.append(accounts[name])
    # cycles would make the depth walk below loop forever
    for name in raw_parent:
        seen = set()
        a: Assoc | None = accounts[name]
        while a is not None:
            if a.account in seen:
                raise ValueError(f"account {name!r} is its own ancestor")
            seen.add(a.account)
            a = a.parent

    users: dict[str, Assoc] = {}
    for u in snapshot.get("users") or []:
        acct = str(u.get("account") or ROOT)
        if acct not in accounts:
            raise ValueError(f"user {u.get('name')!r}: unknown account {acct!r}")
        ua = Assoc(acct, str(u["name"]), _shares(u.get("shares"), 1, f"user {u.get('name')} in {acct}"))
        if ua.key in users:
            raise ValueError(f"user association {ua.key!r} is defined twice")
        users[ua.key] = ua
    # each (account, user) of the jobs once, in order of first appearance (a snapshot holds
    # many jobs of few users)
    pairs: Any = [(j.get("account"), j.get("user")) for j in snapshot.get("jobs") or []]
    try:
        pairs = dict.fromkeys(pairs)
    except TypeError:  # an unhashable name: taken one by one (str() below)
        pass
    for acct, user in pairs:
        if acct is None or user is None:
            continue
        acct, user = str(acct), str(user)
        if f"{acct}/{user}" not in users and acct in accounts:
            users[f"{acct}/{user}"] = Assoc(acct, user, 1)
    for ua in users.values():
        ua.parent = accounts[ua.account]
        ua.parent.children.append(ua)

    usage = snapshot.get("usage") or {}
    for k, v in (usage.get("users") or {}).items():
        if k not in users:
            acct, _, user = str(k).partition("/")
            if not user:
                raise ValueError(f"usage key {k!r} is not \"account/user\"")
            if acct not in accounts:
                continue  # usage of a deleted account: dropped, as Slurm drops it with the association
            users[k] = Assoc(acct, user, 1, parent=accounts[acct])
            accounts[acct].children.append(users[k])
        users[k].usage = _usage(v, k)

    order: list[Assoc] = []

    def walk(a: Assoc, depth: int) -> Fraction:
        a.depth = depth
        order.append(a)
        kids_u = sorted((c for c in a.children if c.user is not None), key=lambda c: (c.user or "").encode())
        kids_a = sorted((c for c in a.children if c.user is None), key=lambda c: c.account.encode())
        a.children = kids_u + kids_a
        total = Fraction(0)
        for c in a.children:
            if c.user is not None:
                c.depth = depth + 1
                order.append(c)
                total += c.usage
            else:
                total += walk(c, depth + 1)
        a.usage = total
        return total

    walk(root, 0)
    for name, v in (usage.get("accounts") or {}).items():
        if name not in accounts:
            continue
        given = _usage(v, name)
        have = accounts[name].usage
        if abs(given - have) > max(Fraction(1, 1000), abs(have) * Fraction(1, 10**6)):
            raise ValueError(f"usage of account {name!r} ({float(given)}) does not match the sum of its "
                             f"subtree ({float(have)})")

    # fair-share parents, children and level shares
    for a in order:
        if a is root:
            continue
        p = a.parent
        while p is not None and p is not root and p.is_parent:
            p = p.parent
        a.fs_parent = p if p is not None else root
        a.fs_parent.fs_children.append(a)
    for a in order:
        lvl = sum(c.raw_shares for c in a.fs_children)
        for c in a.fs_children:
            c.level_shares = lvl
    return Tree(root, accounts, users, order)
