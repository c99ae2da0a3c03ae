"""sshare's table: fields, widths, number formats, account indentation, filters.

Pure formatting over ``ShareRow`` lists (``batchd.priority.share_rows``); the command
``batchd.cli.sshare`` adds option parsing and I/O.

Behaviour follows Slurm's sshare: fields ``Account`` (-20, left), ``Cluster`` 10,
``EffectvUsage`` 13, ``FairShare`` 10, ``GrpTRESMins`` 30, ``GrpTRESRaw`` 30, ``ID`` 6,
``LevelFS`` 10, ``NormShares`` 11, ``NormUsage`` 11, ``Partition`` 12, ``RawShares`` 10,
``RawUsage`` 11, ``TRESRunMins`` 30, ``User`` 10; ``-o`` names match any
case-insensitive prefix (first field in that list wins) and take ``%WIDTH``
(negative = left). Doubles print ``%f`` (``inf`` for infinity), RawUsage an integer
(truncated), unset values blank; text longer than its column is cut with a final
``+``. Parsable output puts ``|`` after every field (``-P``: not after the last).
The Account column indents one space per printed ancestor; a user row shows its
account, one level deeper. ``GrpTRESMins`` is an account's GPU-hour (TRES-minute)
budget (its policy's ``grp_tres_mins``, batchd.slurm.assocpolicy); ``GrpTRESRaw`` shows the decayed per-TRES usage in minutes from the
snapshot's optional ``usage["tres"]`` (``{"account/user": {tres: seconds}}``, summed up
the tree), else only ``billing`` = RawUsage / 60; ``TRESRunMins`` the TRES x
remaining minutes of the running jobs below the row.
"""

from __future__ import annotations

import math

from batchd.cli.cfmt import c_double_field, c_f, cut_field
from batchd.priority.fairshare import ShareRow
from batchd.priority.tree import Assoc

__all__ = ["FIELDS", "default_fields", "resolve_fields", "filter_rows", "render"]

# (name, default width, kind)
FIELDS: list[tuple[str, int, str]] = [
    ("Account", -20, "str"), ("Cluster", 10, "str"), ("EffectvUsage", 13, "double"),
    ("FairShare", 10, "double"), ("GrpTRESMins", 30, "tres"), ("GrpTRESRaw", 30, "tres"),
    ("ID", 6, "uint"), ("LevelFS", 10, "double"), ("NormShares", 11, "double"),
    ("NormUsage", 11, "double"), ("Partition", 12, "str"), ("RawShares", 10, "uint"),
    ("RawUsage", 11, "uint"), ("TRESRunMins", 30, "tres"), ("User", 10, "str"),
]


def default_fields(algorithm: str, long: bool, partitions: bool = False) -> str:
    """sshare's default field list for the algorithm and ``-l``/``-m``."""
    part = "P," if partitions else ""
    if not long:
        return f"A,User,{part}RawShares,NormShares,RawUsage,Eff,Fairshare"
    lfs = "LevelFS," if algorithm == "fair_tree" else ""
    return f"A,User,{part}RawShares,NormShares,RawUsage,NormUsage,Eff,Fairshare,{lfs}GrpTRESMins,TRESRunMins"


def resolve_fields(spec: str) -> list[tuple[str, int, str]]:
    """Parse a comma list of field names (prefixes, ``%WIDTH``); ValueError on unknown."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, w = item.partition("%")
        width = None
        if w:
            try:
                width = int(w)
            except ValueError:
                width = 0
        for fname, fwidth, kind in FIELDS:
            if fname.lower().startswith(name.lower()):
                out.append((fname, width if width else fwidth, kind))
                break
        else:
            raise ValueError(f'Invalid field requested: "{name}"')
    return out


def filter_rows(rows: list[ShareRow], users: list[str] | None, accounts: list[str] | None,
                users_only: bool) -> list[ShareRow]:
    """What the controller returns and sshare keeps: user rows only for ``users``
    (None = all), rows only of ``accounts`` (None = all, case-insensitive), no
    account rows with ``users_only``."""
    accts = {a.lower() for a in accounts} if accounts else None
    out = []
    for r in rows:
        if r.user is not None and users is not None and r.user not in users:
            continue
        if accts is not None and r.account.lower() not in accts:
            continue
        if users_only and r.user is None:
            continue
        out.append(r)
    return out


def _tres_string(d: dict[str, float] | None, order: list[str]) -> str:
    if not d:
        return ""
    keys = [k for k in order if k in d] + sorted(k for k in d if k not in order)
    return ",".join(f"{k}={int(math.trunc(d[k]))}" for k in keys)


def _cell(kind: str, value: object, width: int, parsable: bool) -> str:
    right = width > 0
    w = abs(width)
    if value is None:
        return "" if parsable else " " * w
    if kind == "double":
        v = float(value)  # type: ignore[arg-type]
        return c_f(v) if parsable else c_double_field(v, w, right)
    if kind == "uint":
        s = str(value) if isinstance(value, str) else str(int(math.trunc(float(value))))  # type: ignore[arg-type]
    else:
        s = str(value)
    if parsable:
        return s
    return cut_field(s, w, right)


#: sshare's columns that are a row's attribute as it is
ROW_ATTRS = {"User": "user", "RawShares": "raw_shares", "NormShares": "norm_shares", "RawUsage": "raw_usage",
             "NormUsage": "norm_usage", "EffectvUsage": "effectv_usage", "FairShare": "fairshare",
             "LevelFS": "level_fs"}


def render(rows: list[ShareRow], fields: list[tuple[str, int, str]], *, parsable: str = "",
           header: bool = True, cluster: str = "cluster", run_mins: dict[str, dict[str, float]] | None = None,
           tres_order: list[str] | None = None, tres_raw: dict[str, dict[str, float]] | None = None,
           grp_mins: dict[str, dict[str, float]] | None = None) -> str:
    """The table as text (lines end with newline). ``parsable``: "" (aligned),
    "p" (``|`` after each field) or "P" (not after the last). ``run_mins`` maps a row
    key ("account" or "account/user") to its TRESRunMins, ``tres_raw`` to its
    GrpTRESRaw (minutes); ``grp_mins`` maps an account to its GrpTRESMins budget (an
    account row's policy ``grp_tres_mins``; user rows show none, as Slurm's)."""
    order = tres_order or []
    lines = []

    def join(cells: list[str]) -> str:
        if parsable == "p":
            return "".join(c + "|" for c in cells)
        if parsable == "P":
            return "|".join(cells)
        return "".join(c + " " for c in cells)

    if header:
        if parsable:
            lines.append(join([f[0] for f in fields]))
        else:
            lines.append(join([n[:abs(w)].rjust(w) if w > 0 else n[:abs(w)].ljust(-w) for n, w, _ in fields]))
            lines.append(join(["-" * abs(f[1]) for f in fields]))
    spaces: dict[str, str] = {}
    for r in rows:
        cells = []
        for name, width, kind in fields:
            if name == "Account":
                if r.parent is not None and r.parent in spaces:
                    sp = spaces[r.parent] + " "
                else:
                    sp = ""
                if r.user is None:
                    spaces[r.account] = sp
                val: object = sp + r.account
            elif name in ROW_ATTRS:
                val = getattr(r, ROW_ATTRS[name])
            elif name == "Cluster":
                val = cluster
            elif name == "GrpTRESMins":
                budget = (grp_mins or {}).get(r.account) if r.user is None else None
                val = _tres_string(budget, order) if budget else None
            elif name in ("Partition", "ID"):
                val = None
            elif name == "GrpTRESRaw":
                key = r.account if r.user is None else f"{r.account}/{r.user}"
                raw = (tres_raw or {}).get(key)
                val = _tres_string(raw if raw is not None else {"billing": r.raw_usage / 60.0}, order)
            elif name == "TRESRunMins":
                key = r.account if r.user is None else f"{r.account}/{r.user}"
                val = _tres_string((run_mins or {}).get(key) or {k: 0.0 for k in (order or ["cpu"])}, order)
            else:
                val = None
            if kind == "tres" and val == "":
                val = None
            cells.append(_cell(kind, val, width, bool(parsable)))
        lines.append(join(cells))
    return "".join(line + "\n" for line in lines)


INFINITE_MIN = 4294967295  # Slurm's INFINITE time limit, in minutes
BASE_TRES = ["cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"]


def tres_run_mins(snapshot: dict, policy: dict) -> tuple[dict[str, dict[str, float]], list[str]]:
    """TRESRunMins per row key and the cluster's TRES order.

    For each running job: TRES count (and billing) x remaining minutes of its time
    limit (``time_limit_s`` None or < 0 = UNLIMITED, counted as 4294967295 minutes as
    Slurm does), added to its user association and every ancestor account. As in
    Slurm, the run time is taken off at each priority calculation (every
    ``calc_period_s``, here on multiples of it), not continuously."""
    from batchd.priority.accrual import job_billing
    from batchd.priority.multifactor import cluster_tres, job_tres
    from batchd.priority.tree import build_tree
    from batchd.slurm.tres import tres_sort_key

    totals, _, _ = cluster_tres(snapshot)
    order = BASE_TRES + sorted((k for k in totals if k.startswith("gres/")), key=tres_sort_key)
    tree = build_tree(snapshot)
    now = float(snapshot.get("now") or 0.0)
    period = float(policy.get("calc_period_s") or 0)
    tick = math.floor(now / period) * period if period > 0 else now
    by_name = {str(n.get("name")): n for n in snapshot.get("nodes") or []}
    out: dict[str, dict[str, float]] = {a.key: {k: 0.0 for k in order} for a in tree.order}
    out["root"] = {k: 0.0 for k in order}
    for j in snapshot.get("jobs") or []:
        if str(j.get("state", "")).upper() != "RUNNING" or j.get("start_time") is None:
            continue
        key = f"{j.get('account')}/{j.get('user')}"
        assoc = tree.users.get(key)
        if assoc is None:
            continue
        limit = j.get("time_limit_s")
        limit_s = INFINITE_MIN * 60.0 if limit is None or limit < 0 else float(limit)
        left_s = max(limit_s - max(tick - float(j["start_time"]), 0.0), 0.0)
        tres = job_tres(j, by_name)
        tres["billing"] = float(math.trunc(job_billing(j, snapshot, policy)))  # an integer TRES count, as in AllocTRES
        a: Assoc | None = assoc
        while a is not None:
            row = out.setdefault(a.key, {k: 0.0 for k in order})
            for k, v in tres.items():
                row[k] = row.get(k, 0.0) + v * left_s / 60.0
            a = a.parent
    return out, order


def tres_raw_mins(snapshot: dict, order: list[str]) -> dict[str, dict[str, float]] | None:
    """GrpTRESRaw per row key from ``usage["tres"]`` (seconds -> minutes, summed up the
    tree, every TRES of ``order`` present), or None when the snapshot has none."""
    per_user = (snapshot.get("usage") or {}).get("tres")
    if not per_user:
        return None
    from batchd.priority.tree import build_tree
    from batchd.slurm.tres import normalize_tres_name

    tree = build_tree(snapshot)
    out: dict[str, dict[str, float]] = {a.key: {k: 0.0 for k in order} for a in tree.order}
    for key, tres in per_user.items():
        a: Assoc | None = tree.users.get(key)
        while a is not None:
            row = out.setdefault(a.key, {k: 0.0 for k in order})
            for k, v in (tres or {}).items():
                k = normalize_tres_name(k)
                row[k] = row.get(k, 0.0) + float(v) / 60.0
            a = a.parent
    return out
