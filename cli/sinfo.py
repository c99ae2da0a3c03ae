"""`sinfo`: partitions and nodes as Slurm 22.05 prints them.

Data: `GET /v1/nodes` (NODE_VIEW and PARTITION_VIEW rows, see batchd/protocol.py).
One record per (partition, node); records whose printed fields are equal are merged
into one line (node count and host list aggregated), as sinfo does. `-N` prints one
line per node and partition. Default layout `%#P %.5a %.10l %.6D %.6t %N`, where `#`
is the width of the longest partition name (at least the header's).
"""

import json
import os
import sys

from batchd.cli import fmt
from batchd.cli.options import Opt, OptionError, parse

PROG = "sinfo"
DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE_FORMAT = "%#N %.6D %.#P %6t"
NODE_LONG_FORMAT = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
SUMMARY_FORMAT = "%#P %.5a %.10l %.16F %N"
REASON_FORMAT = "%20E %9U %19H %N"
REASON_LONG_FORMAT = "%20E %12U %19H %6t %N"

TABLE = [
    Opt("a", "all", "none", "all"),
    Opt("d", "dead", "none", "dead"),
    Opt("e", "exact", "none", "exact"),
    Opt("h", "noheader", "none", "noheader"),
    Opt(None, "help", "none", "help"),
    Opt("i", "iterate", "required", "iterate"),
    Opt(None, "json", "none", "json"),
    Opt("l", "long", "none", "long"),
    Opt("n", "nodes", "required", "nodes", multi=True),
    Opt("N", "Node", "none", "node"),
    Opt("o", "format", "required", "format"),
    Opt("O", "Format", "required", "Format"),
    Opt("p", "partition", "required", "partitions", multi=True),
    Opt("r", "responding", "none", "responding"),
    Opt("R", "list-reasons", "none", "reasons"),
    Opt("s", "summarize", "none", "summarize"),
    Opt("S", "sort", "required", "sort"),
    Opt("t", "states", "required", "states", multi=True),
    Opt(None, "usage", "none", "usage"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
]

USAGE = """Usage: sinfo [OPTIONS]
  -a, --all                  show all partitions (including hidden and those
                             not accessible)
  -d, --dead                 show only non-responding nodes
  -e, --exact                group nodes only on exact match of configuration
  -h, --noheader             no headers on output
  -i, --iterate=seconds      specify an iteration period
  -l, --long                 long output - displays more information
  -n, --nodes=NODES          report on specific node(s)
  -N, --Node                 Node-centric format
  -o, --format=format        format specification
  -O, --Format=format        long format specification
      --json                 produce JSON output
  -p, --partition=PARTITION  report on specific partition
  -r, --responding           report only responding nodes
  -R, --list-reasons         list reason nodes are down or drained
  -s, --summarize            report state summary only
  -S, --sort=fields          comma separated list of fields to sort on
  -t, --states=node_state    specify the what states of nodes to view
  -v, --verbose              verbosity level
  -V, --version              output version information and exit

Help options:
  --help                     show this help message
  --usage                    display brief usage message
"""

# %code -> header
HEADERS = {
    "a": "AVAIL", "b": "ACTIVE_FEATURES", "c": "CPUS", "C": "CPUS(A/I/O/T)", "d": "TMP_DISK",
    "D": "NODES", "e": "FREE_MEM", "E": "REASON", "f": "AVAIL_FEATURES", "F": "NODES(A/I/O/T)",
    "g": "GROUPS", "G": "GRES", "h": "OVERSUBSCRIBE", "H": "TIMESTAMP", "l": "TIMELIMIT",
    "L": "DEFAULTTIME", "m": "MEMORY", "n": "HOSTNAMES", "N": "NODELIST", "o": "NODE_ADDR",
    "O": "CPU_LOAD", "P": "PARTITION", "R": "PARTITION", "r": "ROOT", "s": "JOB_SIZE",
    "t": "STATE", "T": "STATE", "U": "USER", "w": "WEIGHT", "X": "SOCKETS", "Y": "CORES",
    "Z": "THREADS", "z": "S:C:T", "V": "CLUSTER", "k": "ALLOCMEM", "u": "GRES_USED",
}
LONG_HEADERS = {"h": "OVERSUBS"}
# -O names (lower case) -> (code, header)
FIELDS = {
    "nodelist": ("N", "NODELIST"), "gres": ("G", "GRES"), "gresused": ("u", "GRES_USED"),
    "cpusstate": ("C", "CPUS(A/I/O/T)"), "memory": ("m", "MEMORY"), "allocmem": ("k", "ALLOCMEM"),
    "statelong": ("T", "STATE"), "statecompact": ("t", "STATE"), "partition": ("P", "PARTITION"),
    "partitionname": ("R", "PARTITION"), "available": ("a", "AVAIL"), "timelimit": ("l", "TIMELIMIT"),
    "defaulttime": ("L", "DEFAULTTIME"), "nodes": ("D", "NODES"), "cpus": ("c", "CPUS"),
    "reason": ("E", "REASON"), "nodehost": ("n", "HOSTNAMES"), "nodeaddr": ("o", "NODE_ADDR"),
    "features": ("f", "AVAIL_FEATURES"), "featuresact": ("b", "ACTIVE_FEATURES"),
    "freemem": ("e", "FREE_MEM"), "cpusload": ("O", "CPU_LOAD"), "weight": ("w", "WEIGHT"),
    "socketcorethread": ("z", "S:C:T"), "disk": ("d", "TMP_DISK"), "tmpdisk": ("d", "TMP_DISK"),
    "user": ("U", "USER"), "timestamp": ("H", "TIMESTAMP"), "nodeaiot": ("F", "NODES(A/I/O/T)"),
    "sockets": ("X", "SOCKETS"), "cores": ("Y", "CORES"), "threads": ("Z", "THREADS"),
    "oversubscribe": ("h", "OVERSUBSCRIBE"), "root": ("r", "ROOT"), "size": ("s", "JOB_SIZE"),
    "groups": ("g", "GROUPS"), "cluster": ("V", "CLUSTER"),
}
AGGREGATE = ("N", "D", "C", "F", "n", "o")

COMPACT = {"IDLE": "idle", "MIXED": "mix", "ALLOCATED": "alloc", "DOWN": "down", "DRAINED": "drain",
           "DRAINING": "drng", "COMPLETING": "comp", "FUTURE": "futr", "RESERVED": "resv",
           "MAINT": "maint", "UNKNOWN": "unk", "PLANNED": "plnd", "BOOT": "boot", "FAIL": "fail",
           "FAILING": "failg", "INVAL": "inval", "POWERED_DOWN": "powered_down"}
LONG = {"IDLE": "idle", "MIXED": "mixed", "ALLOCATED": "allocated", "DOWN": "down",
        "DRAINED": "drained", "DRAINING": "draining", "COMPLETING": "completing", "FUTURE": "future",
        "RESERVED": "reserved", "MAINT": "maint", "UNKNOWN": "unknown", "PLANNED": "planned",
        "BOOT": "boot", "FAIL": "fail", "FAILING": "failing", "INVAL": "inval",
        "POWERED_DOWN": "powered_down"}


def node_state(node: dict) -> tuple[str, str]:
    """NODE_VIEW state (`MIXED`, `IDLE+DRAIN`, `DOWN*`) -> (base, suffix): DRAIN on an idle
    node is DRAINED, on a busy one DRAINING; NOT_RESPONDING gives the `*` suffix."""
    raw = (node.get("state") or "UNKNOWN").upper()
    suffix = ""
    if raw.endswith("*"):
        raw, suffix = raw[:-1], "*"
    parts = raw.split("+")
    base, flags = parts[0], set(parts[1:])
    if "NOT_RESPONDING" in flags:
        suffix = "*"
    if "DRAIN" in flags or base == "DRAIN":
        base = "DRAINED" if base in ("IDLE", "DRAIN", "DOWN") else "DRAINING"
    if "MAINT" in flags:
        suffix = suffix or "$"
    return base, suffix


def _counts(node: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    base, _ = node_state(node)
    cpus = node.get("cpus") or 0
    alloc = node.get("cpus_alloc") or 0
    other = base in ("DOWN", "DRAINED", "FAIL", "UNKNOWN", "FUTURE", "POWERED_DOWN")
    if other:
        return (0, 0, cpus, cpus), (0, 0, 1, 1)
    if base in ("ALLOCATED", "MIXED", "COMPLETING", "DRAINING"):
        return (alloc, cpus - alloc, 0, cpus), (1, 0, 0, 1)
    return (alloc, cpus - alloc, 0, cpus), (0, 1, 0, 1)


def record_value(code: str, part: dict, node: dict) -> str:
    """Text of one code for a (partition, node) record (aggregates handled by the caller)."""
    base, suffix = node_state(node)
    if code == "P":
        return part["name"] + ("*" if part.get("default") else "")
    if code == "R":
        return part["name"]
    if code == "a":
        return (part.get("state") or "UP").lower()
    if code == "l":
        t = part.get("max_time_s")
        return "infinite" if t in (None, -1) else fmt.fmt_elapsed(t)
    if code == "L":
        t = part.get("default_time_s")
        return "n/a" if t is None else ("infinite" if t == -1 else fmt.fmt_elapsed(t))
    if code == "t":
        return COMPACT.get(base, base.lower()) + suffix
    if code == "T":
        return LONG.get(base, base.lower()) + suffix
    if code == "G":
        return node.get("gres") or "(null)"
    if code == "u":
        return node.get("gres_used") or "(null)"
    if code == "c":
        return str(node.get("cpus") or 0)
    if code == "m":
        return str(node.get("memory_mb") or 0)
    if code == "k":
        return str(node.get("memory_alloc_mb") or 0)
    if code == "e":
        v = node.get("free_mem_mb")
        return "N/A" if v is None else str(v)
    if code == "O":
        v = node.get("cpu_load")
        return "N/A" if v is None else f"{v:.2f}"
    if code == "E":
        return node.get("reason") or "none"
    if code == "U":
        return node.get("reason_user") or "Unknown"
    if code == "H":
        return fmt.fmt_ts(node.get("reason_time"), "Unknown")
    if code in ("f", "b"):
        feats = node.get("features") or []
        return ",".join(feats) if feats else "(null)"
    if code == "z":
        return f"{node.get('sockets') or 1}:{node.get('cores_per_socket') or node.get('cpus') or 1}:" \
               f"{node.get('threads_per_core') or 1}"
    if code == "X":
        return str(node.get("sockets") or 1)
    if code == "Y":
        return str(node.get("cores_per_socket") or node.get("cpus") or 1)
    if code == "Z":
        return str(node.get("threads_per_core") or 1)
    if code == "d":
        return str(node.get("tmp_disk_mb") or 0)
    if code == "w":
        return str(node.get("weight") or 1)
    if code == "s":
        return "1-infinite"
    if code == "r":
        return "no"
    if code == "h":
        return "NO"
    if code == "g":
        return "all"
    if code == "V":
        return node.get("cluster") or "N/A"
    return ""


def build_records(nodes: list[dict], partitions: list[dict], opts: dict) -> list[tuple[dict, dict]]:
    """[(partition, node)] after -p, -n, -t, -d, -r filters, in partition then node order."""
    by_name = {n["name"]: n for n in nodes}
    want_parts = set(_split(opts.get("partitions")))
    want_nodes = set()
    for n in _split(opts.get("nodes")):
        want_nodes.update(fmt.expand_hostlist_arg(PROG, n))
    want_states = [s.lower() for s in _split(opts.get("states"))]
    out = []
    for p in partitions:
        if want_parts and p["name"] not in want_parts:
            continue
        for name in p.get("nodes") or []:
            node = by_name.get(name)
            if node is None or (want_nodes and name not in want_nodes):
                continue
            base, suffix = node_state(node)
            if want_states and not _state_matches(want_states, base):
                continue
            if opts.get("dead") and suffix != "*":
                continue
            if opts.get("responding") and suffix == "*":
                continue
            if opts.get("reasons") and base not in ("DOWN", "DRAINED", "DRAINING", "FAIL", "FAILING"):
                continue
            out.append((p, node))
    return out


def _state_matches(wanted: list[str], base: str) -> bool:
    names = {COMPACT.get(base, ""), LONG.get(base, ""), base.lower()}
    if base in ("DRAINED", "DRAINING"):
        names.add("drain")
    if base in ("ALLOCATED", "MIXED", "COMPLETING", "DRAINING"):
        names.add("alloc" if base == "ALLOCATED" else "")
    return "all" in wanted or bool(names & set(wanted))


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def group_records(records: list[tuple[dict, dict]], codes: list[str],
                  node_oriented: bool) -> list[tuple[dict, list[dict]]]:
    """Merge records whose non-aggregate values agree -> [(values_by_code, [nodes])]."""
    groups: list[tuple[dict, list[dict], list[dict]]] = []
    index: dict[tuple, int] = {}
    for p, n in records:
        vals = {c: record_value(c, p, n) for c in codes if c not in AGGREGATE}
        key = tuple(sorted(vals.items()))
        if node_oriented:
            key = (n["name"],) + key
        if key not in index:
            index[key] = len(groups)
            groups.append((vals, [], []))
        g = groups[index[key]]
        if n["name"] not in [x["name"] for x in g[1]]:
            g[1].append(n)
        g[2].append(p)
    return [(v, ns) for v, ns, _ in groups]


def aggregate_value(code: str, nodes: list[dict]) -> str:
    if code in ("N", "n", "o"):
        return fmt.compress_hostlist([n["name"] for n in nodes])
    if code == "D":
        return str(len(nodes))
    idx = 0 if code == "C" else 1
    tot = [0, 0, 0, 0]
    for n in nodes:
        c = _counts(n)[idx]
        tot = [a + b for a, b in zip(tot, c, strict=True)]
    return "/".join(str(x) for x in tot)


def _resolve_hash(fmtstr: str, records: list[tuple[dict, dict]]) -> str:
    """Replace Slurm's `#` width (`%#P`, `%.#P`, `%#N`) by the longest value's width."""
    pw = max([9] + [len(p["name"]) + (1 if p.get("default") else 0) for p, _ in records])
    nw = max([9] + [len(n["name"]) for _, n in records])
    return fmtstr.replace("#P", f"{pw}P").replace("#R", f"{pw}R").replace("#N", f"{nw}N")


def render(nodes: list[dict], partitions: list[dict], opts: dict, now: float | None = None) -> str:
    """The sinfo output text for fetched NODE_VIEW/PARTITION_VIEW rows."""
    records = build_records(nodes, partitions, opts)
    header = not opts.get("noheader")
    node_oriented = bool(opts.get("node"))
    if opts.get("Format"):
        fields = fmt.parse_field_list(opts["Format"])
        specs = []
        for name, w, r in fields:
            code, head = FIELDS[name.lower().replace("_", "").replace("-", "")]
            specs.append((code, head, w, r))
        groups = group_records(records, [s[0] for s in specs], node_oriented)
        lines = []
        if header:
            lines.append("".join(fmt.cell(h, w, r) for _, h, w, r in specs))
        for vals, ns in groups:
            lines.append("".join(fmt.cell(vals[c] if c in vals else aggregate_value(c, ns), w, r)
                                 for c, _, w, r in specs))
        return "".join(x + "\n" for x in lines)
    f = opts.get("format") or os.environ.get("SINFO_FORMAT")
    if not f:
        if opts.get("reasons"):
            f = REASON_LONG_FORMAT if opts.get("long") else REASON_FORMAT
        elif opts.get("summarize"):
            f = SUMMARY_FORMAT
        elif node_oriented:
            f = NODE_LONG_FORMAT if opts.get("long") else NODE_FORMAT
        else:
            f = LONG_FORMAT if opts.get("long") else DEFAULT_FORMAT
    items = fmt.parse_percent_format(_resolve_hash(f, records))
    codes = [it[0] for it in items if isinstance(it, tuple)]
    if opts.get("summarize"):
        node_oriented = False
        codes = [c for c in codes if c not in ("t", "T", "E", "U", "H")]
    groups = group_records(records, codes, node_oriented)
    heads = dict(HEADERS, **(LONG_HEADERS if opts.get("long") else {}))
    lines = []
    if header:
        lines.append(fmt.render_percent(items, lambda c: heads.get(c, "")))
    for vals, ns in groups:
        lines.append(fmt.render_percent(items, lambda c, vals=vals, ns=ns:
                                        vals[c] if c in vals else aggregate_value(c, ns)))
    text = "".join(x + "\n" for x in lines)
    if header and (opts.get("long") or opts.get("iterate")):
        text = fmt.banner_time(now) + "\n" + text
    return text


def to_json(nodes: list[dict], partitions: list[dict]) -> str:
    """`--json`: Slurm's v0.0.38-like document of nodes and partitions."""
    out_nodes = []
    for n in nodes:
        base, _ = node_state(n)
        out_nodes.append({
            "name": n["name"], "hostname": n["name"], "state": LONG.get(base, base.lower()),
            "reason": n.get("reason") or "", "cpus": n.get("cpus"), "alloc_cpus": n.get("cpus_alloc") or 0,
            "idle_cpus": (n.get("cpus") or 0) - (n.get("cpus_alloc") or 0), "real_memory": n.get("memory_mb"),
            "alloc_memory": n.get("memory_alloc_mb") or 0, "free_memory": n.get("free_mem_mb"),
            "gres": n.get("gres") or "", "gres_used": n.get("gres_used") or "",
            "partitions": n.get("partitions") or [], "features": ",".join(n.get("features") or []),
            "sockets": n.get("sockets") or 1, "cores": n.get("cores_per_socket") or n.get("cpus"),
            "threads": n.get("threads_per_core") or 1})
    out_parts = []
    for p in partitions:
        mt = p.get("max_time_s")
        out_parts.append({
            "name": p["name"], "nodes": fmt.compress_hostlist(p.get("nodes") or []),
            "node_count": len(p.get("nodes") or []), "flags": ["default"] if p.get("default") else [],
            "maximum_time": "UNLIMITED" if mt in (None, -1) else (mt + 59) // 60,
            "default_time": (p.get("default_time_s") or 0) // 60 if p.get("default_time_s") else None,
            "state": p.get("state") or "UP", "priority_job_factor": p.get("priority_job_factor") or 1})
    return json.dumps({"meta": fmt.json_meta(), "errors": [], "nodes": out_nodes, "partitions": out_parts},
                      indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, rest = parse(PROG, argv, TABLE)
        if fmt.answered_info(opts, USAGE):
            return 0
        if rest:
            raise OptionError(f"{PROG}: error: Unrecognized option: {rest[0]}", 1)
        for name, _w, _r in fmt.parse_field_list(opts.get("Format") or ""):
            if name.lower().replace("_", "").replace("-", "") not in FIELDS:
                raise OptionError(f"{PROG}: error: Invalid node format specification: {name}", 1)
    except OptionError as e:
        sys.stderr.write(e.message + "\n")
        return e.exit_code
    iterate = opts.get("iterate")
    if fmt.bad_iterate(iterate):
        sys.stderr.write(f"{PROG}: error: --iterate={iterate} must be a positive integer\n")
        return 1

    def show() -> int:
        reply = fmt.daemon_call(PROG, "GET", "/v1/nodes", error_prefix="slurm_load_partitions")
        if opts.get("json"):
            fmt.write(to_json(reply.get("nodes", []), reply.get("partitions", [])))
        else:
            fmt.write(render(reply.get("nodes", []), reply.get("partitions", []), opts))
        return 0

    return fmt.refresh(show, iterate)


if __name__ == "__main__":
    sys.exit(main())
