"""`sreport`: Slurm's report command over batchd's hourly rollups, for scripts that parse it.

Reports: `cluster AccountUtilizationByUser`, `cluster UserUtilizationByAccount`,
`cluster Utilization`, `user TopUsage`, `job SizesByAccount`. Options: `-t` time unit
(Minutes default, Hours, Seconds, Percent, MinPer, HourPer, SecPer), `-T` TRES list
(default cpu; `billing`, `gres/gpu`, `ALL`...), `-P` / `-p` parsable, `-n` no header,
`start=` / `end=` (default: yesterday 00:00 to 23:59:59; rounded down to hours),
`Accounts=`, `Users=`, `TopCount=`, `Grouping=`. Layout as Slurm 22.05 prints it.

Fast start: standard library and the socket client only (no click, no SQLAlchemy).
"""

import os
import pwd
import sys
import time

from batchd.cli import client, fmt

UNITS = {"minutes": ("Minutes", 60, False), "hours": ("Hours", 3600, False), "seconds": ("Seconds", 1, False),
         "percent": ("Percentage of Total", 1, True), "minper": ("Minutes/Percentage of Total", 60, True),
         "hourper": ("Hours/Percentage of Total", 3600, True), "secper": ("Seconds/Percentage of Total", 1, True)}
WIDTHS = {"Cluster": 9, "Account": 15, "Login": 9, "Proper Name": 15, "Used": 9, "Energy": 9, "TRES Name": 14,
          "Allocated": 12, "Down": 10, "PLND Down": 10, "Idle": 12, "Planned": 10, "Reported": 12,
          "% of cluster": 12}
DASH = "-" * 80


HELP = """\
Usage: sreport [OPTIONS] <cluster|user|job> <report> [start=TIME] [end=TIME] [Accounts=...]
               [Users=...] [TopCount=N] [Grouping=a,b,...]

  -t, --time-format=unit  Minutes (default), Hours, Seconds, Percent, MinPer, HourPer, SecPer
  -T, --tres=list         TRES to report, e.g. cpu (default), gres/gpu, mem
  -p, --parsable          '|' delimited output with a trailing '|'
  -P, --parsable2         '|' delimited output without a trailing '|'
  -n, --noheader          no header lines
  -h, --help              this help

reports: cluster AccountUtilizationByUser | cluster UserUtilizationByAccount |
         cluster Utilization | user TopUsage | job SizesByAccount
"""


def usage(code=0):
    sys.stdout.write(HELP)
    sys.exit(code)


def die(msg):
    sys.stderr.write(f"sreport: error: {msg}\n")
    sys.exit(1)


def parse_args(argv):
    opts = {"unit": "minutes", "tres": ["cpu"], "parsable": None, "header": True, "words": [], "kv": {}}
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help", "help"):
            usage(0)
        elif a in ("-t",):
            opts["unit"] = next(it, "").lower()
        elif a.startswith("--time-format="):
            opts["unit"] = a.split("=", 1)[1].lower()
        elif a.startswith("-t") and len(a) > 2:
            opts["unit"] = a[2:].lower()
        elif a in ("-T", "--tres"):
            opts["tres"] = next(it, "").split(",")
        elif a.startswith("--tres="):
            opts["tres"] = a.split("=", 1)[1].split(",")
        elif a.startswith("-T") and len(a) > 2:
            opts["tres"] = a[2:].split(",")
        elif a in ("-P", "--parsable2"):
            opts["parsable"] = "2"
        elif a in ("-p", "--parsable"):
            opts["parsable"] = "1"
        elif a in ("-n", "--noheader"):
            opts["header"] = False
        elif a in ("-V", "--version"):
            sys.stdout.write("slurm 22.05.0 (batchd)\n")
            sys.exit(0)
        elif "=" in a:
            k, v = a.split("=", 1)
            opts["kv"][k.lower()] = v
        elif a.startswith("-"):
            die(f"unknown option {a}")
        else:
            opts["words"].append(a.lower())
    if opts["unit"] not in UNITS:
        die(f"unknown time format {opts['unit']}")
    opts["tres"] = [t.strip().lower() for t in opts["tres"] if t.strip()]
    return opts


def period(kv, now=None):
    """(start, end) unix seconds, rounded down to the hour; default yesterday."""
    now = time.time() if now is None else now
    lt = time.localtime(now)
    midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    try:
        start = fmt.parse_when(kv["start"], now) if "start" in kv else midnight - 86400
        end = fmt.parse_when(kv["end"], now) if "end" in kv else midnight
    except ValueError as e:
        die(f"invalid time {e}")
    start, end = int(start) - int(start) % 3600, int(end) - int(end) % 3600
    if end <= start:
        die("start time is not before end time")
    return start, end


def fmt_used(value_s, total_s, unit):
    _, div, per = UNITS[unit]
    pct = 100.0 * value_s / total_s if total_s else 0.0
    if unit == "percent":
        return f"{pct:.2f}%"
    base = f"{value_s / div:.0f}" if div > 1 else f"{value_s:.0f}"
    return f"{base}({pct:.2f}%)" if per else base


def emit(cols, rows, opts):
    out = []
    if opts["parsable"]:
        end = "|" if opts["parsable"] == "1" else ""
        if opts["header"]:
            out.append("|".join(cols) + end)
        out += ["|".join(str(c) for c in r) + end for r in rows]
    else:
        ws = [WIDTHS.get(c, 12) for c in cols]
        if opts["header"]:
            out.append(" ".join(c[:w].rjust(w) for c, w in zip(cols, ws, strict=False)) + " ")
            out.append(" ".join("-" * w for w in ws) + " ")
        out += [" ".join(str(c)[:w].rjust(w) for c, w in zip(r, ws, strict=False)) + " " for r in rows]
    return out


def banner(title, start, end, unit_line, opts):
    if not opts["header"]:
        return []
    return [DASH, f"{title} {fmt.fmt_ts(start)} - {fmt.fmt_ts(end - 1)} ({end - start} secs)", unit_line, DASH]


def unit_line(opts, kind="Usage"):
    name = UNITS[opts["unit"]][0]
    what = "CPU" if opts["tres"] == ["cpu"] else "TRES"
    return f"{kind} reported in {name}" if name.startswith("Percentage") else f"{kind} reported in {what} {name}"


def proper_name(login):
    try:
        return pwd.getpwnam(login).pw_gecos.split(",")[0]
    except (KeyError, TypeError):
        return ""


def fetch(start, end, by, kv):
    q = {"start": str(start), "end": str(end), "by": by, "raw": "1",
         "accounts": kv.get("accounts", ""), "users": kv.get("users", "")}
    return client.call("sreport", "GET", "/v1/report", query=q)


def tres_names(opts, rep):
    if opts["tres"] == ["all"]:
        seen = {t for r in rep["rows"] for t in r.get("tres_s", {})} | {"cpu", "mem", "node", "billing"}
        return sorted(t for t in seen if t not in ("gpu_busy", "gpu_measured"))
    return opts["tres"]


def account_utilization(opts, start, end, by_user_first=False):
    rep = fetch(start, end, "account,user", opts["kv"])
    cluster = rep.get("cluster", "")
    names = tres_names(opts, rep)
    multi = len(names) > 1
    total_s = {t: float(rep["capacity"].get(t, 0.0)) * (end - start) for t in names}
    acct, users = {}, []
    for r in rep["rows"]:
        ts = r.get("tres_s", {})
        a = acct.setdefault(r["account"], dict.fromkeys(names, 0.0))
        for t in names:
            a[t] += ts.get(t, 0.0)
        users.append((r["account"], r["user"], {t: ts.get(t, 0.0) for t in names}))
    lines = []
    if by_user_first:
        title, cols = "Cluster/User/Account Utilization", ["Cluster", "Login", "Proper Name", "Account"]
        entries = [(u, proper_name(u), a, v) for a, u, v in
                   sorted(users, key=lambda x: (-sum(x[2].values()), x[1], x[0]))]
    else:
        title, cols = "Cluster/Account/User Utilization", ["Cluster", "Account", "Login", "Proper Name"]
        root = {t: sum(v[t] for v in acct.values()) for t in names}
        entries = [("root", "", "", root)] if acct else []
        for a in sorted(acct):
            entries.append((a, "", "", acct[a]))
            entries += [(a, u, proper_name(u), v) for aa, u, v in sorted(users) if aa == a]
    cols = cols + (["TRES Name", "Used"] if multi else ["Used", "Energy"])
    rows = []
    for e in entries:
        vals = e[3]
        for t in names:
            used = fmt_used(vals[t], total_s[t], opts["unit"])
            rows.append([cluster, *e[:3], t, used] if multi else [cluster, *e[:3], used, "0"])
    lines += banner(title, start, end, unit_line(opts), opts)
    lines += emit(cols, rows, opts)
    return lines


def cluster_utilization(opts, start, end):
    rep = fetch(start, end, "account", opts["kv"])
    cluster = rep.get("cluster", "")
    names = tres_names(opts, rep)
    multi = len(names) > 1
    rows = []
    for t in names:
        reported = float(rep["capacity"].get(t, 0.0)) * (end - start)
        alloc = sum(r.get("tres_s", {}).get(t, 0.0) for r in rep["rows"])
        idle = max(0.0, reported - alloc)
        vals = [fmt_used(x, reported, opts["unit"]) for x in (alloc, 0.0, 0.0, idle, 0.0)]
        vals.append(fmt_used(reported, reported, opts["unit"]))
        rows.append([cluster, t, *vals] if multi else [cluster, *vals])
    cols = ["Cluster"] + (["TRES Name"] if multi else []) + ["Allocated", "Down", "PLND Down", "Idle", "Planned",
                                                             "Reported"]
    return banner("Cluster Utilization", start, end, unit_line(opts), opts) + emit(cols, rows, opts)


def top_usage(opts, start, end):
    rep = fetch(start, end, "user,account", opts["kv"])
    cluster = rep.get("cluster", "")
    names = tres_names(opts, rep)
    multi = len(names) > 1
    top = int(opts["kv"].get("topcount", 10))
    per_user = {}
    for r in rep["rows"]:
        u = per_user.setdefault(r["user"], {"accounts": set(), **dict.fromkeys(names, 0.0)})
        u["accounts"].add(r["account"])
        for t in names:
            u[t] += r.get("tres_s", {}).get(t, 0.0)
    total_s = {t: float(rep["capacity"].get(t, 0.0)) * (end - start) for t in names}
    order = sorted(per_user, key=lambda u: (-sum(per_user[u][t] for t in names), u))[:top]
    rows = []
    for u in order:
        for t in names:
            base = [cluster, u, proper_name(u), ",".join(sorted(per_user[u]["accounts"]))]
            used = fmt_used(per_user[u][t], total_s[t], opts["unit"])
            rows.append(base + ([t, used] if multi else [used, "0"]))
    cols = ["Cluster", "Login", "Proper Name", "Account"] + (["TRES Name", "Used"] if multi else ["Used", "Energy"])
    return banner(f"Top {top} Users", start, end, unit_line(opts), opts) + emit(cols, rows, opts)


def sizes_by_account(opts, start, end):
    kv = opts["kv"]
    tres = opts["tres"][0] if opts["tres"] and opts["tres"] != ["all"] else "cpu"
    grouping = [int(x) for x in kv.get("grouping", "50,250,500,1000").split(",") if x.strip()]
    edges = [0] + grouping
    label = "CPUs" if tres == "cpu" else ("GPUs" if tres.startswith("gres/gpu") else tres)
    bins = [f"{a}-{b - 1} {label}" for a, b in zip(edges, edges[1:], strict=False)] + [f">= {edges[-1]} {label}"]
    q = {"start": str(start), "end": str(end), "all_users": "1", "accounts": kv.get("accounts", ""),
         "users": kv.get("users", "")}
    recs = client.call("sreport", "GET", "/v1/accounting", query=q).get("records", [])
    rep = fetch(start, end, "account", {})
    cluster = rep.get("cluster", "")
    per = {}
    for r in recs:
        if "." in str(r.get("job_id", "")):
            continue  # steps
        counts = dict(x.split("=", 1) for x in (r.get("alloc_tres") or "").split(",") if "=" in x)
        n = float(counts.get(tres, 0) or 0) if tres != "cpu" else float(r.get("ncpus") or counts.get("cpu", 0) or 0)
        s = max(float(r.get("start") or 0), start)
        e = min(float(r.get("end") or time.time()), end)
        if e <= s:
            continue
        i = sum(1 for g in grouping if n >= g)
        per.setdefault(r["account"], [0.0] * len(bins))[i] += n * (e - s)
    total = float(rep["capacity"].get(tres, 0.0)) * (end - start)
    rows = []
    for a in sorted(per):
        used = per[a]
        pct = f"{100.0 * sum(used) / total:.2f}%" if total else "0.00%"
        rows.append([cluster, a] + [fmt_used(v, total, opts["unit"]) for v in used] + [pct])
    title = f"Job Sizes {fmt.fmt_ts(start)} - {fmt.fmt_ts(end - 1)} ({end - start} secs)"
    lines = [DASH, title, f"Time reported in {UNITS[opts['unit']][0]}", DASH] if opts["header"] else []
    return lines + emit(["Cluster", "Account", *bins, "% of cluster"], rows, opts)


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    words = opts["words"]
    if len(words) < 2:
        usage(1)
    start, end = period(opts["kv"])
    kind, rep = words[0], words[1]
    if kind == "cluster" and rep == "accountutilizationbyuser":
        lines = account_utilization(opts, start, end)
    elif kind == "cluster" and rep == "userutilizationbyaccount":
        lines = account_utilization(opts, start, end, by_user_first=True)
    elif kind == "cluster" and rep == "utilization":
        lines = cluster_utilization(opts, start, end)
    elif kind == "user" and rep == "topusage":
        lines = top_usage(opts, start, end)
    elif kind == "job" and rep == "sizesbyaccount":
        lines = sizes_by_account(opts, start, end)
    else:
        die(f"Not valid report {' '.join(words[:2])}")
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SLURM_TIME_FORMAT", "standard")
    sys.exit(main())
