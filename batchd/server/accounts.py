"""Accounts (KAI queues) and user associations as a declarative file.

`batchd apply FILE.toml` makes the database match the file: it prints the diff first,
changes nothing with `--dry-run`, is idempotent, and every change is audited. The file:

    [[account]]
    name = "training"
    parent = "root"              # default "root"
    priority = 100               # KAI queue priority (higher gets idle capacity first)
    shares = 30                  # Slurm fair-share shares (default: its GPU quota, else 1)
    users = ["alice", "bob"]     # members (shares 1)
    default_for = ["alice"]      # members whose default account this is
    [account.resources."gres/gpu"]
    quota = 6                    # guaranteed; 0 none; -1 unlimited
    limit = -1                   # hard cap; -1 none; unset = quota (no borrowing)
    over_quota_weight = 2        # share of idle capacity (default 1)
    lending_limit = 2            # at most this much of its idle quota is lent (Kueue)

    [account.policy]             # optional: Slurm's association limits (batchd.slurm.assocpolicy)
    qos = ["normal", "high"]     # the QOS its jobs may use; default_qos = "normal"
    partitions = ["gpu"]         # the partitions they may use
    max_jobs = 8                 # running jobs per user (MaxJobs); max_submit_jobs likewise
    max_tres_per_job = { "gres/gpu" = 4 }      # MaxTRES
    max_tres_per_user = { "gres/gpu" = 4 }     # each user's GrpTRES
    grp_tres_mins = { "gres/gpu" = 120000 }    # a budget: 2,000 GPU-hours ...
    budget_period = "month"                    # ... a month (week, day, year, none)
    within_account = "lower_priority"          # preemption (docs/preemption.md): whom its jobs
    reclaim_within_cohort = "any"              # may preempt in the account, reclaim from others,
    borrow_within_cohort = { policy = "lower_priority", max_priority_threshold = 50 }
    min_runtime_reclaim_s = "30:00"            # and how long its own jobs are protected
    min_runtime_preempt_s = 600                # (seconds, or Slurm's M:S, H:M:S, D-H:M:S)

    [[user]]                     # optional, for per-user shares or FairShare=parent
    name = "carol"
    account = "training"
    shares = "parent"
    default = true
    policy = { max_jobs = 2 }    # optional: the user's own limits (qos, default_qos, max_*)

    [[price]] ...                # chargeback prices, see batchd.accounting

What cannot be right is refused with a message naming the account and the field: a
cycle in the tree, an unknown parent, a limit below a quota, children whose quotas add
up to more than their parent's, a resource that is not a TRES name or names an unknown
GPU type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchd.errors import InvalidRequest
from batchd.model import Account
from batchd.server import messages as m
from batchd.server.caller import Caller
from batchd.slurm.assocpolicy import check_policy
from batchd.slurm.gres import node_inventories

if TYPE_CHECKING:
    from batchd.server.service import Service

RESOURCE_FIELDS = ("quota", "limit", "over_quota_weight", "lending_limit")
ROOT = "root"


@dataclass
class AccountsDoc:
    accounts: list[Account]
    associations: list[dict[str, Any]] = field(default_factory=list)


def _err(where: str, msg: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {msg}")


def _num(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(where, f"must be a number, got {v!r}")
    return float(v) if isinstance(v, float) and not v.is_integer() else int(v)


def _policy(where: str, p: Any, names: dict[str, set[str]] | None, user: bool = False) -> dict[str, Any]:
    """A validated association policy (batchd.slurm.assocpolicy); QOS and partition names are
    checked against `names` ({"qos": ..., "partitions": ...}) when given."""
    try:
        pol = check_policy(where, _durations(where, p), user=user)
    except ValueError as e:
        raise InvalidRequest(str(e)) from None
    for key, kind in (("qos", "qos"), ("default_qos", "qos"), ("partitions", "partitions")):
        known = (names or {}).get(kind)
        given = pol.get(key)
        if known is None or given is None:
            continue
        for n in [given] if isinstance(given, str) else given:
            if n not in known:
                raise _err(f"{where}.{key}", f"unknown {'QOS' if kind == 'qos' else 'partition'} {n!r} "
                           f"(the cluster has: {', '.join(sorted(known))})")
    return pol


def _durations(where: str, p: Any) -> Any:
    """`p` with a Slurm duration text of a `min_runtime_*` key as seconds (sbatch's grammar,
    batchd.slurm.slurmtime, not rounded). A bare number in quotes is refused: in Slurm it
    means minutes, in a key ending in `_s` seconds."""
    from batchd.slurm.slurmtime import time_str2secs

    if not isinstance(p, dict):
        return p
    out = dict(p)
    for k in ("min_runtime_reclaim_s", "min_runtime_preempt_s"):
        v = out.get(k)
        if not isinstance(v, str):
            continue
        secs = None if v.strip().isdigit() else time_str2secs(v.strip())
        if secs is None or secs < 0:
            raise _err(f"{where}.{k}", f"not a duration, got {v!r} (seconds as a number, or "
                       "M:S, H:M:S, D-H, D-H:M, D-H:M:S)")
        out[k] = secs
    return out


def parse_accounts(doc: dict[str, Any], gpu_types: set[str] | None = None,
                   names: dict[str, set[str]] | None = None) -> AccountsDoc:
    """Validate a parsed accounts file; `gpu_types` are the GPU types (and MIG profiles)
    the cluster has, for checking `gres/gpu:TYPE` resources; `names` the QOS and partition
    names of the config (`{"qos": {...}, "partitions": {...}}`) for checking policies."""
    for k in doc:
        if k not in ("account", "user", "price"):
            raise _err(k, "unknown key (expected [[account]], [[user]] or [[price]])")
    accounts: dict[str, Account] = {ROOT: Account(name=ROOT, parent=None, priority=100, shares=1, resources={})}
    assoc: dict[tuple[str, str], dict[str, Any]] = {}
    for i, a in enumerate(doc.get("account", [])):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or not a["name"]:
            raise _err(f"account[{i}].name", "required")
        name = a["name"]
        where = f"account {name}"
        if name in accounts and name != ROOT:
            raise _err(where, "defined twice")
        for k in a:
            if k not in ("name", "parent", "priority", "shares", "resources", "users", "default_for", "policy"):
                raise _err(f"{where}.{k}", "unknown field")
        res: dict[str, dict[str, float]] = {}
        for rname, r in (a.get("resources") or {}).items():
            rw = f"{where}.resources.{rname}"
            if not (rname in ("cpu", "mem") or rname == "gres/gpu" or rname.startswith("gres/gpu:")
                    or rname == "gres/shard"):
                raise _err(rw, "not a TRES name (cpu, mem, gres/gpu, gres/gpu:TYPE, gres/shard)")
            if rname.startswith("gres/gpu:") and gpu_types is not None and rname[9:] not in gpu_types:
                raise _err(rw, f"unknown GPU type {rname[9:]!r} (the cluster has: {', '.join(sorted(gpu_types))})")
            if not isinstance(r, dict):
                raise _err(rw, "must be a table")
            vals = {}
            for f_, v in r.items():
                if f_ not in RESOURCE_FIELDS:
                    raise _err(f"{rw}.{f_}", "unknown field")
                vals[f_] = _num(f"{rw}.{f_}", v)
            q = vals.get("quota", 0)
            lim = vals.get("limit", q)
            if lim != -1 and q != -1 and lim < q:
                raise _err(f"{rw}.limit", f"limit {lim} is below the quota {q}")
            if q == -1 and lim not in (-1,) and "limit" in vals:
                raise _err(f"{rw}.limit", "an unlimited quota cannot have a limit")
            if vals.get("over_quota_weight", 1) < 0:
                raise _err(f"{rw}.over_quota_weight", "must be >= 0")
            res[rname] = vals
        shares = a.get("shares")
        if shares is None:
            gq = res.get("gres/gpu", {}).get("quota", 0)
            shares = int(gq) if gq and gq > 0 else 1
        accounts[name] = Account(name=name, parent=a.get("parent", ROOT), priority=int(a.get("priority", 100)),
                                 shares=int(shares), resources=res,
                                 policy=_policy(f"{where}.policy", a.get("policy"), names) or None)
        default_for = set(a.get("default_for") or [])
        for u in list(a.get("users") or []) + sorted(default_for - set(a.get("users") or [])):
            assoc[(u, name)] = {"user": u, "account": name, "shares": 1, "is_default": u in default_for}
    for i, u in enumerate(doc.get("user", [])):
        where = f"user[{i}]"
        if not isinstance(u.get("name"), str) or not isinstance(u.get("account"), str):
            raise _err(where, "needs name and account")
        if u["account"] not in accounts:
            raise _err(f"{where}.account", f"unknown account {u['account']!r}")
        sh = u.get("shares", 1)
        assoc[(u["name"], u["account"])] = {"user": u["name"], "account": u["account"],
                                            "shares": None if sh == "parent" else int(sh),
                                            "is_default": bool(u.get("default", False))}
        pol = _policy(f"{where}.policy", u.get("policy"), names, user=True)
        if pol:
            assoc[(u["name"], u["account"])]["policy"] = pol
    _check_tree(accounts)
    for (user, acct), _a in assoc.items():
        if acct not in accounts:
            raise _err(f"user {user}", f"unknown account {acct!r}")
    defaults: dict[str, str] = {}
    for (user, acct), a in assoc.items():
        if a["is_default"]:
            if user in defaults:
                raise _err(f"user {user}", f"two default accounts ({defaults[user]}, {acct})")
            defaults[user] = acct
    # every fresh install keeps `default` usable by everyone unless the file redefines it
    if "default" not in accounts:
        accounts["default"] = Account(name="default", parent=ROOT, priority=100, shares=1, resources={})
    return AccountsDoc(accounts=list(accounts.values()), associations=sorted(assoc.values(),
                                                                              key=lambda x: (x["account"],
                                                                                             x["user"])))


def _check_tree(accounts: dict[str, Account]) -> None:
    for a in accounts.values():
        if a.parent is not None and a.parent not in accounts:
            raise _err(f"account {a.name}.parent", f"unknown account {a.parent!r}")
        seen = {a.name}
        p = a.parent
        while p is not None:
            if p in seen:
                raise _err(f"account {a.name}.parent", "the account tree has a cycle")
            seen.add(p)
            p = accounts[p].parent
    children: dict[str, list[Account]] = {}
    for a in accounts.values():
        if a.parent is not None:
            children.setdefault(a.parent, []).append(a)
    for parent, kids in children.items():
        pres = accounts[parent].resources
        for rname in {r for k in kids for r in k.resources}:
            pq = pres.get(rname, {}).get("quota")
            if pq is None or pq == -1 or parent == ROOT:
                continue
            total = sum(k.resources.get(rname, {}).get("quota", 0) for k in kids
                        if k.resources.get(rname, {}).get("quota", 0) != -1)
            if total > pq:
                raise _err(f"account {parent}.resources.{rname}.quota",
                           f"children's quotas add up to {total}, more than the parent's {pq}")


def diff(current: list[Account], current_assoc: list[dict[str, Any]], new: AccountsDoc) -> list[str]:
    """Human-readable changes, one line each (`+ account x`, `~ account x: shares 1 -> 3`)."""
    out: list[str] = []
    cur = {a.name: a for a in current}
    nxt = {a.name: a for a in new.accounts}
    for name in sorted(nxt):
        a = nxt[name]
        if name not in cur:
            out.append(f"+ account {name} (parent {a.parent}, priority {a.priority}, shares {a.shares}, "
                       f"resources {a.resources})")
            continue
        c = cur[name]
        for f_ in ("parent", "priority", "shares", "resources", "policy"):
            if getattr(c, f_) != getattr(a, f_):
                out.append(f"~ account {name}: {f_} {getattr(c, f_)} -> {getattr(a, f_)}")
    for name in sorted(set(cur) - set(nxt)):
        out.append(f"- account {name}")
    ca = {(x["user"], x["account"]): x for x in current_assoc}
    na = {(x["user"], x["account"]): x for x in new.associations}
    for k in sorted(na):
        if k not in ca:
            out.append(f"+ user {k[0]} in {k[1]}" + (" (default)" if na[k]["is_default"] else ""))
        elif ca[k] != na[k]:
            out.append(f"~ user {k[0]} in {k[1]}: {ca[k]} -> {na[k]}")
    for k in sorted(set(ca) - set(na)):
        out.append(f"- user {k[0]} in {k[1]}")
    return out


def to_doc(accounts: list[Account], associations: list[dict[str, Any]]) -> dict[str, Any]:
    """The database's current tree as an accounts-file dict (what `batchd account show` prints)."""
    out: dict[str, Any] = {"account": [], "user": []}
    for a in accounts:
        if a.name == ROOT:
            continue
        out["account"].append({"name": a.name, "parent": a.parent, "priority": a.priority, "shares": a.shares,
                               "resources": a.resources, **({"policy": a.policy} if a.policy else {})})
    for x in associations:
        out["user"].append({"name": x["user"], "account": x["account"],
                            "shares": "parent" if x["shares"] is None else x["shares"], "default": x["is_default"],
                            **({"policy": x["policy"]} if x.get("policy") else {})})
    return out


def cluster_gpu_types(nodes: list[Any]) -> set[str]:
    """GPU types and MIG profiles that the nodes' inventories offer."""
    types: set[str] = set()
    for inv in node_inventories(nodes).values():
        for c in inv.cards:
            types.add(c.type)
            types.update(m.profile for m in c.mig)
    return types


def config_names(cfg: Any) -> dict[str, set[str]]:
    """The QOS and partition names an association policy may name."""
    return {"qos": {q.name for q in cfg.qos} | {"normal"}, "partitions": {p.name for p in cfg.partitions}}


def apply_doc(service: Service, caller: Caller, doc: dict[str, Any], dry_run: bool) -> m.ApplyReply:
    """`batchd apply`: validate, diff, and (unless dry_run) replace; admins only."""
    service.require_admin(caller, "change accounts")
    store = service.store
    parsed = parse_accounts(doc, cluster_gpu_types(store.list_nodes()), config_names(service.cfg))
    if doc.get("price") is not None:
        _parse_prices(doc)  # refuse a bad price before anything changes
    changes = diff(store.list_accounts(), store.list_associations(), parsed)
    prices = doc.get("price")
    if not dry_run:
        store.replace_accounts(parsed.accounts, parsed.associations, caller.uid, changes)
        if prices is not None:
            changes = changes + _apply_prices(store, doc, caller.uid)
        service.wake()
    return {"changes": changes, "applied": not dry_run}


def _parse_prices(doc: dict[str, Any]) -> list[Any]:
    from batchd.accounting.prices import PriceError, parse_prices

    try:
        return parse_prices(doc)
    except PriceError as e:
        raise InvalidRequest(f"price: {e}") from None


def _apply_prices(store: Any, doc: dict[str, Any], uid: int) -> list[str]:
    """Make the price list match the file's [[price]] tables; the changes as lines."""
    from batchd.store.accounting import replace_prices

    res = replace_prices(store, _parse_prices(doc), uid)
    def line(sign: str, p: dict[str, Any]) -> str:
        return f"{sign} price " + " ".join(f"{k}={v}" for k, v in p.items() if v is not None)

    return [line("+", p) for p in res.get("added", [])] + [line("-", p) for p in res.get("removed", [])]


def _merge_policy(item: dict[str, Any], changes: dict[str, Any] | None) -> None:
    """Set the policy keys of `changes` on an account or association of the doc; a key
    whose value is None (or -1 for a number) is removed (sacctmgr's `MaxJobs=-1`)."""
    if not changes:
        return
    pol = dict(item.get("policy") or {})
    for k, v in changes.items():
        if v is None or v == -1:
            pol.pop(k, None)
        elif isinstance(v, dict):
            merged = {**(pol.get(k) or {}), **v}
            merged = {r: n for r, n in merged.items() if n is not None and n != -1}
            if merged:
                pol[k] = merged
            else:
                pol.pop(k, None)
        else:
            pol[k] = v
    if pol:
        item["policy"] = pol
    else:
        item.pop("policy", None)


def slurm_view(service: Service) -> dict[str, Any]:
    """`GET /v1/accounts?slurm=1` (sacctmgr): the doc plus what sacctmgr prints beside it,
    the cluster's name, its QOS names in config order and the administrators' names."""
    import grp

    doc = to_doc(service.store.list_accounts(), service.store.list_associations())
    qos = [q.name for q in service.cfg.qos]
    if "normal" not in qos:
        qos.insert(0, "normal")
    try:
        admins = sorted(set(grp.getgrnam(service.cfg.admin_group).gr_mem) | {"root"})
    except KeyError:
        admins = ["root"]
    info = [{"name": q.name, "priority": q.priority, "preemptible": q.preemptible, "usage_factor": q.usage_factor,
             "grace_time_s": q.grace_time_s, "min_runtime_preempt_s": q.min_runtime_preempt_s}
            for q in service.cfg.qos]
    return {**doc, "cluster": service.cfg.cluster_name, "qos": qos, "qos_info": info, "admins": admins,
            "gpu_types": sorted(cluster_gpu_types(service.store.list_nodes()))}


def modify(service: Service, caller: Caller, body: dict[str, Any]) -> m.ApplyReply:
    """One change at a time (`batchd account add/modify/remove`, `batchd user add/remove`,
    `sacctmgr`): the change is made on the current tree and the whole tree validated again.
    `policy` (account.add/modify, user.add/modify) sets association policy keys, None or -1
    removes one; `user.modify` changes every association of the user, or the one of
    `account`. Admins only (before anything of the tree is read)."""
    service.require_admin(caller, "change accounts")
    store = service.store
    doc = to_doc(store.list_accounts(), store.list_associations())
    op, name = body.get("op"), body.get("name")
    accts = {a["name"]: a for a in doc["account"]}
    if op == "account.add":
        if name in accts:
            raise InvalidRequest(f"account {name}: already exists")
        doc["account"].append({"name": name, "parent": body.get("parent") or ROOT})
        accts[name] = doc["account"][-1]
    if op in ("account.add", "account.modify"):
        if name not in accts:
            raise InvalidRequest(f"account {name}: no such account")
        a = accts[name]
        for k in ("parent", "priority", "shares"):
            if body.get(k) is not None:
                a[k] = body[k]
        for rname, fields_ in (body.get("resources") or {}).items():
            a.setdefault("resources", {}).setdefault(rname, {}).update(fields_)
        _merge_policy(a, body.get("policy"))
    elif op == "account.remove":
        if name not in accts:
            raise InvalidRequest(f"account {name}: no such account")
        if any(a.get("parent") == name for a in doc["account"]):
            raise InvalidRequest(f"account {name}: has child accounts; remove them first")
        doc["account"] = [a for a in doc["account"] if a["name"] != name]
        doc["user"] = [u for u in doc["user"] if u["account"] != name]
    elif op == "user.add":
        doc["user"] = [u for u in doc["user"] if not (u["name"] == name and u["account"] == body.get("account"))]
        if body.get("default"):
            for u in doc["user"]:
                if u["name"] == name:
                    u["default"] = False
        doc["user"].append({"name": name, "account": body.get("account"),
                            "shares": 1 if body.get("shares") is None else body["shares"],
                            "default": bool(body.get("default"))})
        _merge_policy(doc["user"][-1], body.get("policy"))
    elif op == "user.modify":
        mine = [u for u in doc["user"] if u["name"] == name
                and (body.get("account") is None or u["account"] == body["account"])]
        if not mine:
            raise InvalidRequest(f"user {name}: not a member of {body.get('account') or 'any account'}")
        if body.get("default"):
            if body.get("account") is None:
                raise InvalidRequest(f"user {name}: a default account needs the account")
            for u in doc["user"]:
                if u["name"] == name:
                    u["default"] = u["account"] == body["account"]
        for u in mine:
            if body.get("shares") is not None:
                u["shares"] = body["shares"]
            _merge_policy(u, body.get("policy"))
    elif op == "user.remove":
        before = len(doc["user"])
        doc["user"] = [u for u in doc["user"] if not (u["name"] == name and u["account"] == body.get("account"))]
        if len(doc["user"]) == before:
            raise InvalidRequest(f"user {name}: not a member of {body.get('account')}")
    elif op not in ("account.add", "account.modify", "user.modify"):
        raise InvalidRequest(f"unknown operation {op!r}")
    for a in doc["account"]:
        if a.get("parent") is None:
            a.pop("parent", None)
    return apply_doc(service, caller, doc, bool(body.get("dry_run")))
