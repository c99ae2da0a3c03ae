"""sacctmgr add|modify|delete account|user: Slurm's words mapped onto `POST /v1/accounts/modify`.

Each change is first sent with `dry_run` (the daemon checks the caller is an administrator
and validates the whole tree), then Slurm's message is printed, the commit prompt asked
(unless `-i`), and the change sent for real. Messages as recorded from Slurm 22.05.
"""

from batchd.cli.sacctmgr_view import UsageError, assoc_rows, tres_text

_MEM = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}
# set key -> (line label in Slurm's add message, order)
_LABELS = [("fairshare", "Fairshare"), ("grptres", "GrpTRES"), ("grptresmins", "GrpTRESMins"),
           ("grptresrunmins", "GrpTRESRunMins"), ("maxjobs", "MaxJobs"), ("maxsubmit", "MaxSubmitJobs"),
           ("maxtres", "MaxTRES"), ("maxtresperuser", "MaxTRESPerUser"), ("parent", "Parent"), ("qos", "QOS"),
           ("defaultqos", "DefQOS")]
POLICY = {"grptresmins": "grp_tres_mins", "grptresrunmins": "grp_tres_run_mins", "maxjobs": "max_jobs",
          "maxsubmit": "max_submit_jobs", "maxtres": "max_tres_per_job", "maxtresperuser": "max_tres_per_user",
          "qos": "qos", "defaultqos": "default_qos"}


def parse_tres(text):
    """`gres/gpu=8,cpu=64,mem=10G` -> {"gres/gpu": 8, "cpu": 64, "mem": 10240}; -1 = none."""
    out = {}
    for item in text.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise UsageError(f" Bad TRES value: {item}\n")
        unit = 1
        if k == "mem" and v and v[-1].upper() in _MEM:
            unit, v = _MEM[v[-1].upper()], v[:-1]
        try:
            n = float(v)
        except ValueError:
            raise UsageError(f" Bad TRES value: {item}\n") from None
        n = n if n == -1 else n * unit
        out[k] = int(n) if n.is_integer() else n
    return out


def _int(key, v):
    try:
        return int(v)
    except ValueError:
        raise UsageError(f" Bad {key} value: {v}\n") from None


def _qos_list(v, state):
    names = [x for x in v.split(",") if x]
    valid = state.get("qos") or ["normal"]
    for n in names:
        if n not in valid:
            raise UsageError(f"sacctmgr: error: You gave a bad qos '{n}'. Valid QOS's are {','.join(valid)}\n"
                             f" Unknown option: QOS={v}\n Use keyword 'where' to modify condition\n")
    return names


def changes(values, state, current_qos, user):
    """(shares, resources, policy) of set-values {key: (op, value)}."""
    shares, resources, policy = None, {}, {}
    for key, (op, v) in values.items():
        if key == "fairshare":
            shares = "parent" if v.lower() == "parent" else _int("Fairshare", v)
        elif key == "grptres" and not user:
            for r, n in parse_tres(v).items():
                resources[r] = {"limit": n}
        elif key == "grptres":
            policy["max_tres_per_user"] = parse_tres(v)
        elif key in ("grptresmins", "grptresrunmins", "maxtres", "maxtresperuser"):
            if user and key in ("grptresmins", "grptresrunmins"):
                raise UsageError(f" {key} is set on accounts in batchd (a budget counts the account's subtree)\n")
            policy[POLICY[key]] = parse_tres(v)
        elif key in ("maxjobs", "maxsubmit"):
            policy[POLICY[key]] = _int(key, v)
        elif key == "qos":
            names = _qos_list(v, state)
            if op == "+=":
                names = sorted(set(current_qos) | set(names))
            elif op == "-=":
                names = sorted(set(current_qos) - set(names))
            policy["qos"] = sorted(set(names)) or None
        elif key == "defaultqos":
            if v:
                _qos_list(v, state)
            policy["default_qos"] = v or None
        elif key in ("parent", "defaultaccount", "description", "organization", "cluster", "account", "name"):
            continue
        else:
            raise UsageError(f" Unknown option: {key}={v}\n Use keyword 'where' to modify condition\n")
    return shares, resources, policy


def _settings(values):
    lines = []
    for key, label in _LABELS:
        if key in values:
            v = values[key][1]
            if key in ("grptres", "grptresmins", "grptresrunmins", "maxtres", "maxtresperuser"):
                v = tres_text(parse_tres(v))
            elif key == "qos":
                v = ",".join(sorted(x for x in v.split(",") if x))
            lines.append(f"  {label:<13} = {v}\n")
    return lines


def _post(call, body):
    call("POST", "/v1/accounts/modify", {**body, "dry_run": True})
    return body


def run(verb, entity, specs, flags, state_fn, call, confirm, out):
    """One sacctmgr change; the exit code."""
    import sys

    state = state_fn()
    cluster = state.get("cluster") or ""
    accounts = {a["name"] for a in state.get("account") or []} | {"root"}
    users = state.get("user") or []
    rows = assoc_rows(state)
    qos_of = {(r["account"], r["user"]): r["qos"].split(",") for r in rows}
    values = {**specs.pre, **specs.set} if verb == "add" else dict(specs.set)
    where = {**specs.pre, **specs.where} if verb != "add" else {}
    if entity == "assoc":
        sys.stderr.write(" Use 'account' or 'user' to change associations\n")
        return 1
    names = list(specs.names)
    if not names:
        sys.stderr.write(f" Need name of {entity} to {verb}.\n")
        return 1
    bodies, text = [], []
    if verb == "add" and entity == "account":
        parent = values.get("parent", ("=", "root"))[1]
        if parent not in accounts:
            sys.stderr.write(f" Parent account '{parent}' doesn't exist on cluster {cluster}\n"
                             "        Contact your admin to add this account.\n No associations created.\n")
            return 1
        new = [n for n in names if n not in accounts]
        if not new:
            out(" Nothing new added.\n")
            return 1
        shares, resources, policy = changes(values, state, qos_of.get((parent, ""), []), False)
        for n in new:
            bodies.append(_post(call, {"op": "account.add", "name": n, "parent": parent, "shares": shares,
                                       "resources": resources, "policy": policy}))
        text = [" Adding Account(s)\n", *(f"  {n}\n" for n in new), " Settings\n",
                "  Description     = Account Name\n", "  Organization    = Parent/Account Name\n",
                " Associations\n", *(f"  A = {n:<10.10} C = {cluster:<10.10}\n" for n in new)]
        settings = _settings(values)
        if settings:
            text += [" Settings\n", *settings]
    elif verb == "add":
        acct = values.get("account", ("=", ""))[1]
        for a in acct.split(","):
            if a not in accounts:
                sys.stderr.write(f" This account '{a}' doesn't exist.\n"
                                 "        Contact your admin to add this account.\n"
                                 " No associations or wckeys created.\n")
                return 1
        if not acct:
            sys.stderr.write(" Need name of account to add user to.\n")
            return 1
        dflt = values.get("defaultaccount", ("=", None))[1]
        shares, _res, policy = changes(values, state, [], True)
        known = {u["name"] for u in users}
        have = {(u["name"], u["account"]) for u in users}
        adds = [(n, a) for n in names for a in acct.split(",") if (n, a) not in have]
        if not adds:
            out(" Nothing new added.\n")
            return 1
        fresh = sorted({n for n, _ in adds if n not in known})
        for n, a in adds:
            is_default = (a == dflt) if dflt else (n not in known and a == acct.split(",")[0])
            bodies.append(_post(call, {"op": "user.add", "name": n, "account": a, "shares": shares,
                                       "default": is_default, "policy": policy}))
        if fresh:
            text += [" Adding User(s)\n", *(f"  {n}\n" for n in fresh)]
        if dflt:
            text += [" Settings =\n", f"  Default Account = {dflt}\n"]
        text += [" Associations =\n", *(f"  U = {n:<9.9} A = {a:<10.10} C = {cluster:<10.10}\n" for n, a in adds),
                 " Non Default Settings\n", *_settings({k: v for k, v in values.items() if k != "parent"})]
    elif verb == "modify" and entity == "account":
        hit = [n for n in names if n in accounts and n != "root"]
        if not hit or not values:
            out(" Nothing modified\n")
            return 1
        text = [" Modified account associations...\n"]
        for n in hit:
            shares, resources, policy = changes(values, state, qos_of.get((n, ""), []), False)
            parent = next(r["parentname"] for r in rows if r["account"] == n and not r["user"])
            bodies.append(_post(call, {"op": "account.modify", "name": n, "shares": shares,
                                       "resources": resources, "policy": policy,
                                       "parent": values["parent"][1] if "parent" in values else None}))
            text.append(f"  C = {cluster:<10.10} A = {n} of {parent}\n")
            text += [f"  C = {cluster:<10.10} A = {n:<20.20} U = {r['user']:<9.9}\n"
                     for r in rows if r["account"] == n and r["user"]]
    elif verb == "modify":
        acct = where.get("account", ("=", None))[1]
        hit = [r for r in rows if r["user"] in names and (acct is None or r["account"] in acct.split(","))]
        if not hit or not values:
            out(" Nothing modified\n")
            return 1
        text = [" Modified user associations...\n"]
        for r in hit:
            shares, _res, policy = changes(values, state, qos_of.get((r["account"], r["user"]), []), True)
            dflt = values.get("defaultaccount", ("=", None))[1]
            bodies.append(_post(call, {"op": "user.modify", "name": r["user"], "account": r["account"],
                                       "shares": shares, "policy": policy, "default": dflt == r["account"]}))
            text.append(f"  C = {cluster:<10.10} A = {r['account']:<20.20} U = {r['user']:<9.9}\n")
    elif entity == "account":
        hit = [n for n in names if n in accounts and n != "root"]
        if not hit:
            out(" Nothing deleted\n")
            return 1
        for n in hit:
            bodies.append(_post(call, {"op": "account.remove", "name": n}))
        text = [" Deleting accounts...\n", *(f"  {n}\n" for n in hit)]
    else:
        acct = where.get("account", ("=", None))[1]
        hit = [u for u in users if u["name"] in names and (acct is None or u["account"] in acct.split(","))]
        if not hit:
            out(" Nothing deleted\n")
            return 1
        for u in hit:
            bodies.append(_post(call, {"op": "user.remove", "name": u["name"], "account": u["account"]}))
        text = [" Deleting users...\n", *(f"  {n}\n" for n in sorted({u['name'] for u in hit}))]
    if not flags.get("Q"):
        out("".join(text))
    if not confirm(flags.get("i")):
        return 0
    for b in bodies:
        call("POST", "/v1/accounts/modify", b)
    return 0
