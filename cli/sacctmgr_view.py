"""sacctmgr's words and tables: the spec parser, the rows of each entity from batchd's
account tree, and Slurm 22.05's print_fields layout (recorded: tests/cli/golden/sacctmgr).

Layout contract: a column is right-justified to its width and followed by one space, a
value longer than the width keeps width-1 characters and ends in `+`, a header is cut
without `+`; a separator line of dashes follows the header; `-p` joins with `|` and ends
each line with `|`, `-P` joins without it; parsable headers are never cut.
"""

from batchd.cli.fmt import fmt_mem, truncate_plus
from batchd.slurm.assocpolicy import effective
from batchd.slurm.slurmtime import format_duration

ENTITIES = {"account": "account", "accounts": "account", "user": "user", "users": "user",
            "assoc": "assoc", "association": "assoc", "associations": "assoc", "qos": "qos", "tres": "tres"}

KEYS = {"account": "account", "accounts": "account", "acct": "account", "user": "user", "users": "user",
        "name": "name", "names": "name", "cluster": "cluster", "clusters": "cluster", "parent": "parent",
        "parents": "parent", "format": "format", "fairshare": "fairshare", "share": "fairshare",
        "shares": "fairshare", "grptres": "grptres", "grptresmins": "grptresmins",
        "grptresrunmins": "grptresrunmins", "maxjobs": "maxjobs", "maxsubmitjobs": "maxsubmit",
        "maxsubmit": "maxsubmit", "maxtres": "maxtres", "maxtresperjob": "maxtres",
        "maxtresperuser": "maxtresperuser", "qos": "qos", "qoslevel": "qos", "defaultqos": "defaultqos",
        "defqos": "defaultqos", "defaultaccount": "defaultaccount", "description": "description",
        "descriptions": "description", "organization": "organization", "organizations": "organization",
        "partition": "partition", "partitions": "partition", "id": "id", "type": "type"}

# field key -> (header, width); widths as Slurm 22.05 prints them
_F = {
    "cluster": ("Cluster", 10), "account": ("Account", 10), "user": ("User", 10), "partition": ("Partition", 10),
    "share": ("Share", 9), "priority": ("Priority", 10), "grpjobs": ("GrpJobs", 7), "grptres": ("GrpTRES", 13),
    "grpsubmit": ("GrpSubmit", 9), "grpwall": ("GrpWall", 11), "grptresmins": ("GrpTRESMins", 13),
    "maxjobs": ("MaxJobs", 7), "maxtres": ("MaxTRES", 13), "maxtrespernode": ("MaxTRESPerNode", 14),
    "maxsubmit": ("MaxSubmit", 9), "maxwall": ("MaxWall", 11), "maxtresmins": ("MaxTRESMins", 13),
    "qos": ("QOS", 20), "defaultqos": ("Def QOS", 9), "grptresrunmins": ("GrpTRESRunMins", 13),
    "descr": ("Descr", 20), "org": ("Org", 20), "parentname": ("ParentName", 10),
    "defaultaccount": ("Def Acct", 10), "admin": ("Admin", 9), "grpnodes": ("GrpNodes", 8),
    "grpcpus": ("GrpCPUs", 8), "grpmem": ("GrpMem", 7), "grpcpumins": ("GrpCPUMins", 11),
    "maxnodes": ("MaxNodes", 8), "maxcpus": ("MaxCPUs", 8), "maxcpumins": ("MaxCPUMins", 11),
    "name": ("Name", 10), "gracetime": ("GraceTime", 10), "preempt": ("Preempt", 10),
    "preemptmode": ("PreemptMode", 11), "usagefactor": ("UsageFactor", 11),
    "preemptexempttime": ("PreemptExemptTime", 19),
    "type": ("Type", 8), "tresname": ("Name", 15), "id": ("ID", 6),
}
FORMAT_NAMES = {"fairshare": "share", "shares": "share", "grpsubmitjobs": "grpsubmit",
                "maxsubmitjobs": "maxsubmit", "defqos": "defaultqos", "description": "descr",
                "organization": "org", "defacct": "defaultaccount", "adminlevel": "admin",
                "maxtresperjob": "maxtres", "qoslevel": "qos", "parent": "parentname"}
_ASSOC = ["cluster", "account", "user", "partition", "share", "priority", "grpjobs", "grptres", "grpsubmit",
          "grpwall", "grptresmins", "maxjobs", "maxtres", "maxtrespernode", "maxsubmit", "maxwall",
          "maxtresmins", "qos", "defaultqos", "grptresrunmins"]
_USER_ASSOC = ["cluster", "account", "partition", "share", "priority", "maxjobs", "maxnodes", "maxcpus",
               "maxsubmit", "maxwall", "maxcpumins", "qos", "defaultqos"]
FIELDS = {
    "assoc": {"default": _ASSOC},
    "account": {"default": ["account", "descr", "org"]},
    "account+assoc": {"default": ["account", "descr", "org", "cluster", "parentname", "user", "share", "priority",
                                  "grpjobs", "grpnodes", "grpcpus", "grpmem", "grpsubmit", "grpwall", "grpcpumins",
                                  "maxjobs", "maxnodes", "maxcpus", "maxsubmit", "maxwall", "maxcpumins", "qos",
                                  "defaultqos"]},
    "user": {"default": ["user", "defaultaccount", "admin"]},
    "user+assoc": {"default": ["user", "defaultaccount", "admin", *_USER_ASSOC]},
    "qos": {"default": ["name", "priority", "gracetime", "preempt", "preemptmode", "usagefactor"]},
    "tres": {"default": ["type", "tresname", "id"]},
}
TRES_ORDER = ["cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"]


class UsageError(Exception):
    """A command line sacctmgr refuses; `text` is the whole stderr text."""

    def __init__(self, text):
        super().__init__(text)
        self.text = text


class Specs:
    """A command's words: bare `names`, `pre` (KEY=VALUE before where/set), `where`, `set`
    (key -> (op, value), op one of `=`, `+=`, `-=`), `format` (field keys, widths) and
    `with_assoc`."""

    def __init__(self):
        self.names, self.pre, self.where, self.set = [], {}, {}, {}
        self.format, self.with_assoc = None, False


def _split(v):
    return [x for x in v.split(",")] if v != "" else [""]


def parse_specs(words):
    s = Specs()
    section = s.pre
    for w in words:
        low = w.lower()
        if low == "where":
            section = s.where
            continue
        if low == "set":
            section = s.set
            continue
        if low in ("withassoc", "withassociations"):
            s.with_assoc = True
            continue
        op = "+=" if "+=" in w else "-=" if "-=" in w else "=" if "=" in w else None
        if op is None:
            s.names.extend(x for x in w.split(",") if x)
            continue
        k, v = w.split(op, 1)
        key = KEYS.get(k.lower())
        if key is None:
            raise UsageError(f" Unknown option: {w}\n Use keyword 'where' to modify condition\n")
        if key == "format":
            s.format = []
            for item in v.split(","):
                name, _, width = item.partition("%")
                f = FORMAT_NAMES.get(name.lower(), name.lower())
                if f not in _F:
                    raise UsageError(f"Unknown field '{name}'\n")
                s.format.append((f, int(width)) if width.lstrip("-").isdigit() else f)
            continue
        if key == "name" and section is not s.set:
            s.names.extend(x for x in v.split(",") if x)
            continue
        section[key] = (op, v)
    return s


def tres_text(tres):
    """{"gres/gpu": 8, "cpu": 64} -> `cpu=64,gres/gpu=8` in Slurm's TRES id order (mem in MiB
    printed as `10G`)."""
    def order(k):
        return (TRES_ORDER.index(k), k) if k in TRES_ORDER else (len(TRES_ORDER), k)

    out = []
    for k in sorted(tres or {}, key=order):
        n = tres[k]
        n = int(n) if float(n).is_integer() else n
        out.append(f"{k}={fmt_mem(n) if k == 'mem' else n}")
    return ",".join(out)


def _grp_tres(resources):
    cap = {}
    for r, f in (resources or {}).items():
        q = f.get("quota", 0)
        lim = f.get("limit", q)
        if lim is not None and lim != -1 and not (q == -1 and "limit" not in f) and not (lim == 0 and "limit" not in f):
            cap[r] = lim
    return cap


def _tree(state):
    accts = {a["name"]: a for a in state.get("account") or []}
    accts.setdefault("root", {"name": "root", "parent": None, "shares": 1, "resources": {}})
    parents = {n: a.get("parent") or (None if n == "root" else "root") for n, a in accts.items()}
    policies = {n: a.get("policy") or {} for n, a in accts.items()}
    users = state.get("user") or []
    upol = {(u["name"], u["account"]): u.get("policy") or {} for u in users}
    return accts, parents, policies, users, upol


def _qos_text(eff, state):
    names = eff.qos if eff.qos is not None else state.get("qos") or ["normal"]
    return ",".join(sorted(names))


def assoc_rows(state):
    """Every association in Slurm's order: root first, an account's row, its users' rows
    (by name), then its child accounts (by name), depth first."""
    accts, parents, policies, users, upol = _tree(state)
    cluster = state.get("cluster") or ""
    kids = {}
    for n, p in parents.items():
        if p is not None:
            kids.setdefault(p, []).append(n)
    members = {}
    for u in users:
        members.setdefault(u["account"], []).append(u)
    out = []

    def visit(name):
        a = accts[name]
        pol = policies[name]
        eff = effective(name, "", parents, policies, {})
        out.append(_row(cluster, name, "", a.get("shares", 1), eff, state, _grp_tres(a.get("resources")),
                        pol.get("grp_tres_mins"), pol.get("grp_tres_run_mins"), parents[name]))
        for u in sorted(members.get(name, []), key=lambda x: x["name"]):
            ueff = effective(name, u["name"], parents, policies, upol)
            out.append(_row(cluster, name, u["name"], u.get("shares"), ueff, state, ueff.max_tres_per_user,
                            None, None, None))
        for k in sorted(kids.get(name, [])):
            visit(k)

    visit("root")
    return out


def _row(cluster, account, user, shares, eff, state, grp, mins, run_mins, parent):
    pj = eff.max_tres_per_job or {}
    return {"cluster": cluster, "account": account, "user": user, "partition": "",
            "share": "parent" if shares is None else shares, "priority": "", "grpjobs": "",
            "grptres": tres_text(grp), "grpsubmit": "", "grpwall": "", "grptresmins": tres_text(mins),
            "maxjobs": "" if eff.max_jobs is None else eff.max_jobs, "maxtres": tres_text(pj),
            "maxtrespernode": "", "maxsubmit": "" if eff.max_submit_jobs is None else eff.max_submit_jobs,
            "maxwall": "", "maxtresmins": "", "qos": _qos_text(eff, state), "defaultqos": eff.default_qos or "",
            "grptresrunmins": tres_text(run_mins), "parentname": "" if user else (parent or ""),
            "grpnodes": "", "grpcpus": (grp or {}).get("cpu", ""), "grpmem": "", "grpcpumins": (mins or {}).get("cpu", ""),
            "maxnodes": "", "maxcpus": pj.get("cpu", ""), "maxcpumins": ""}


def _descr(name, parent):
    if name == "root":
        return "default root account", "root"
    return name, (parent if parent and parent != "root" else name)


def _default_account(name, users):
    mine = [u for u in users if u["name"] == name]
    for u in mine:
        if u.get("default"):
            return u["account"]
    return min((u["account"] for u in mine), default="")


def _match(values, v):
    return values is None or str(v) in values


def rows_for(kind, state, specs):
    """The rows of `kind` (assoc, account, account+assoc, user, user+assoc, qos, tres)
    that the specs' names and where-conditions select."""
    cond = {**specs.pre, **specs.where}

    def want(key):
        return _split(cond[key][1]) if key in cond else None

    names = specs.names or None
    accounts, users_w, parent_w = want("account"), want("user"), want("parent")
    clusters = want("cluster")
    if clusters is not None and state.get("cluster") not in clusters:
        return []
    if kind == "tres":
        return _tres_rows(state, names, want("type"))
    if kind == "qos":
        return [q for q in _qos_rows(state) if _match(names, q["name"])]
    assoc = assoc_rows(state)
    users = state.get("user") or []
    admins = set(state.get("admins") or ["root"])
    if kind == "assoc":
        return [r for r in assoc if _match(accounts, r["account"]) and _match(users_w, r["user"])
                and (parent_w is None or (not r["user"] and r["parentname"] in parent_w))]
    if kind.startswith("account"):
        out = []
        for r in assoc:
            if not _match(names or accounts, r["account"]):
                continue
            parent = next((x["parentname"] for x in assoc if x["account"] == r["account"] and not x["user"]), "")
            if parent_w is not None and parent not in parent_w:
                continue
            if r["user"] and kind == "account":
                continue
            descr, org = _descr(r["account"], parent)
            out.append({**r, "descr": descr, "org": org})
        if kind == "account":
            out.sort(key=lambda r: r["account"])
        return out
    rows = []
    for name in sorted({u["name"] for u in users}):
        if not _match(names or users_w, name):
            continue
        base = {"user": name, "defaultaccount": _default_account(name, users),
                "admin": "Administrator" if name in admins else "None"}
        if want("defaultaccount") is not None and base["defaultaccount"] not in want("defaultaccount"):
            continue
        if kind == "user":
            rows.append(base)
            continue
        for r in assoc:
            if r["user"] == name and _match(accounts, r["account"]):
                rows.append({**r, **base})
    return rows


def _qos_rows(state):
    info = state.get("qos_info") or [{"name": n} for n in state.get("qos") or ["normal"]]
    out = []
    for q in info:
        pre = [p["name"] for p in info if p.get("preemptible") and p.get("priority", 0) < q.get("priority", 0)]
        g = int(q.get("grace_time_s") or 0)
        # Slurm prints an unset PreemptExemptTime empty; batchd's 0 is "none"
        exempt = int(q.get("min_runtime_preempt_s") or 0)
        out.append({"name": q["name"], "priority": q.get("priority", 0),
                    "preemptexempttime": format_duration(exempt) if exempt > 0 else "",
                    "gracetime": f"{g // 3600:02d}:{g // 60 % 60:02d}:{g % 60:02d}", "preempt": ",".join(pre),
                    "preemptmode": "requeue" if q.get("preemptible") or pre else "cluster",
                    "usagefactor": f"{float(q.get('usage_factor', 1.0)):.6f}"})
    return out


def _tres_rows(state, names, types):
    rows = [("cpu", "", 1), ("mem", "", 2), ("energy", "", 3), ("node", "", 4), ("billing", "", 5),
            ("fs", "disk", 6), ("vmem", "", 7), ("pages", "", 8), ("gres", "gpu", 1001)]
    rows += [("gres", f"gpu:{t}", 1002 + i) for i, t in enumerate(sorted(state.get("gpu_types") or []))]
    return [{"type": t, "tresname": n, "id": i} for t, n, i in rows
            if (types is None or t in types) and (names is None or n in names or t in names)]


def render(kind, fields, rows, parsable, header):
    """The table (or `-p`/`-P` lines) of `rows` with `fields` (keys, or (key, width))."""
    cols = []
    for f in fields:
        key, width = f if isinstance(f, tuple) else (f, None)
        head, w = _F[key]
        if key == "tresname":
            head = "Name"
        cols.append((key, head, w if width is None else width))
    lines = []
    if parsable:
        end = "|" if parsable == "p" else ""
        if header:
            lines.append("|".join(h for _, h, _ in cols) + end)
        for r in rows:
            lines.append("|".join(str(r.get(k, "")) for k, _, _ in cols) + end)
    else:
        def cell(text, w, cut):
            s = str(text)
            s = truncate_plus(s, abs(w)) if cut else s[:abs(w)]
            return (s.ljust(-w) if w < 0 else s.rjust(w)) + " "

        if header:
            lines.append("".join(cell(h, w, False) for _, h, w in cols))
            lines.append("".join("-" * abs(w) + " " for _, _, w in cols))
        for r in rows:
            lines.append("".join(cell(r.get(k, ""), w, True) for k, _, w in cols))
    return "".join(line + "\n" for line in lines)
