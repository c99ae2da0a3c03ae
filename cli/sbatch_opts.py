"""sbatch's option table, its `SBATCH_*` input variables and the option values -> JOB_SPEC
conversion (the `JOB_SPEC` of `batchd/protocol.py`).

Shared by `sbatch` and the other batch front-ends; cheap to import (builtins, the
getopt parser and the time grammar only).

Errors are raised as `OptionError(message, exit_code)` carrying the complete stderr text:
value errors that Slurm detects while parsing options exit 255 (`sbatch: error: Invalid
--time specification`), `parse_int` failures and refused combinations exit 1, as Slurm.
"""

from batchd.cli.options import Opt, OptionError
from batchd.slurm import slurmtime
from batchd.slurm.digits import isdigits

PROG = "sbatch"

# Every long option of Slurm 22.05's sbatch, so that abbreviations are exactly as
# unique (or ambiguous) as with Slurm. Options batchd does not act on are accepted and
# ignored (key starting with "_").
TABLE = [
    Opt("A", "account", "required", "account"),
    Opt(None, "acctg-freq", "required", "_acctg_freq"),
    Opt("a", "array", "required", "array"),
    Opt(None, "batch", "required", "_batch"),
    Opt(None, "bb", "required", "_bb"),
    Opt(None, "bbf", "required", "_bbf"),
    Opt("b", "begin", "required", "begin"),
    Opt("D", "chdir", "required", "chdir"),
    Opt(None, "cluster-constraint", "required", "_cluster_constraint"),
    Opt("M", "clusters", "required", "clusters"),
    Opt(None, "comment", "required", "comment"),
    Opt("C", "constraint", "required", "constraint"),
    Opt(None, "container", "required", "_container"),
    Opt(None, "contiguous", "none", "_contiguous"),
    Opt("S", "core-spec", "required", "_core_spec"),
    Opt(None, "cores-per-socket", "required", "_cores_per_socket"),
    Opt(None, "cpu-freq", "required", "_cpu_freq"),
    Opt(None, "cpus-per-gpu", "required", "cpus_per_gpu"),
    Opt("c", "cpus-per-task", "required", "cpus_per_task"),
    Opt(None, "deadline", "required", "_deadline"),
    Opt(None, "delay-boot", "required", "_delay_boot"),
    Opt("d", "dependency", "required", "dependency"),
    Opt("m", "distribution", "required", "_distribution"),
    Opt("e", "error", "required", "error"),
    Opt("x", "exclude", "required", "exclude"),
    Opt(None, "exclusive", "optional", "exclusive"),
    Opt(None, "export", "required", "export"),
    Opt(None, "export-file", "required", "export_file"),
    Opt("B", "extra-node-info", "required", "_extra_node_info"),
    Opt(None, "get-user-env", "optional", "_get_user_env"),
    Opt(None, "gid", "required", "gid"),
    Opt(None, "gpu-bind", "required", "_gpu_bind"),
    Opt(None, "gpu-freq", "required", "_gpu_freq"),
    Opt("G", "gpus", "required", "gpus"),
    Opt(None, "gpus-per-node", "required", "gpus_per_node"),
    Opt(None, "gpus-per-socket", "required", "_gpus_per_socket"),
    Opt(None, "gpus-per-task", "required", "gpus_per_task"),
    Opt(None, "gres", "required", "gres"),
    Opt(None, "gres-flags", "required", "_gres_flags"),
    Opt("h", "help", "none", "help"),
    Opt(None, "hint", "required", "_hint"),
    Opt("H", "hold", "none", "hold"),
    Opt(None, "ignore-pbs", "none", "_ignore_pbs"),
    Opt("i", "input", "required", "input"),
    Opt("I", "immediate", "optional", "_immediate"),
    Opt("J", "job-name", "required", "name"),
    Opt(None, "kill-on-invalid-dep", "required", "_kill_on_invalid_dep"),
    Opt("L", "licenses", "required", "_licenses"),
    Opt(None, "mail-type", "required", "mail_type"),
    Opt(None, "mail-user", "required", "mail_user"),
    Opt(None, "mcs-label", "required", "_mcs_label"),
    Opt(None, "mem", "required", "mem"),
    Opt(None, "mem-bind", "required", "_mem_bind"),
    Opt(None, "mem-per-cpu", "required", "mem_per_cpu"),
    Opt(None, "mem-per-gpu", "required", "mem_per_gpu"),
    Opt(None, "mincpus", "required", "_mincpus"),
    Opt(None, "network", "required", "_network"),
    Opt(None, "nice", "optional", "nice"),
    Opt("k", "no-kill", "optional", "_no_kill"),
    Opt(None, "no-requeue", "none", "requeue", const=False),
    Opt("F", "nodefile", "required", "_nodefile"),
    Opt("w", "nodelist", "required", "nodelist"),
    Opt("N", "nodes", "required", "nodes"),
    Opt("n", "ntasks", "required", "ntasks"),
    Opt(None, "ntasks-per-core", "required", "_ntasks_per_core"),
    Opt(None, "ntasks-per-gpu", "required", "_ntasks_per_gpu"),
    Opt(None, "ntasks-per-node", "required", "ntasks_per_node"),
    Opt(None, "ntasks-per-socket", "required", "_ntasks_per_socket"),
    Opt(None, "open-mode", "required", "open_mode"),
    Opt("o", "output", "required", "output"),
    Opt("O", "overcommit", "none", "_overcommit"),
    Opt("s", "oversubscribe", "none", "_oversubscribe"),
    Opt(None, "parsable", "none", "parsable"),
    Opt("p", "partition", "required", "partition"),
    Opt(None, "power", "required", "_power"),
    Opt(None, "priority", "required", "_priority"),
    Opt(None, "profile", "required", "_profile"),
    Opt(None, "propagate", "optional", "_propagate"),
    Opt("q", "qos", "required", "qos"),
    Opt("Q", "quiet", "none", "quiet"),
    Opt(None, "reboot", "none", "_reboot"),
    Opt(None, "requeue", "none", "requeue"),
    Opt(None, "reservation", "required", "reservation"),
    Opt(None, "signal", "required", "signal"),
    Opt(None, "sockets-per-node", "required", "_sockets_per_node"),
    Opt(None, "spread-job", "none", "_spread_job"),
    Opt(None, "switches", "required", "_switches"),
    Opt("t", "time", "required", "time"),
    Opt(None, "test-only", "none", "test_only"),
    Opt(None, "thread-spec", "required", "_thread_spec"),
    Opt(None, "threads-per-core", "required", "_threads_per_core"),
    Opt(None, "time-min", "required", "time_min"),
    Opt(None, "tmp", "required", "_tmp"),
    Opt(None, "tres-per-task", "required", "_tres_per_task"),
    Opt(None, "uid", "required", "uid"),
    Opt(None, "usage", "none", "usage"),
    Opt(None, "use-min-nodes", "none", "_use_min_nodes"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt("W", "wait", "none", "wait"),
    Opt(None, "wait-all-nodes", "required", "_wait_all_nodes"),
    Opt(None, "wckey", "required", "_wckey"),
    Opt(None, "wrap", "required", "wrap"),
]

# SBATCH_* input variables -> the long option they stand for (flags take no value).
ENV_OPTIONS = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ARRAY_INX": "array", "SBATCH_CLUSTERS": "clusters",
    "SLURM_CLUSTERS": "clusters", "SBATCH_CONSTRAINT": "constraint", "SBATCH_CONTAINER": "container",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu", "SBATCH_ERROR": "error", "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export", "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task", "SBATCH_GRES": "gres", "SBATCH_INPUT": "input",
    "SBATCH_JOB_NAME": "job-name", "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu", "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no-requeue", "SBATCH_OPEN_MODE": "open-mode", "SBATCH_OUTPUT": "output",
    "SBATCH_PARTITION": "partition", "SBATCH_QOS": "qos", "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal", "SBATCH_TIMELIMIT": "time",
    "SBATCH_WAIT": "wait", "SBATCH_DEBUG": "verbose",
}

# Linux signal numbers (no `signal` import: it pulls in enum, too slow for sbatch).
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
           "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
           "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
           "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
           "PWR": 30, "SYS": 31}

GRES_ERROR = "Invalid generic resource (gres) specification"
NICE_MAX = 2147483645  # Slurm's NICE_OFFSET - 3


def env_argv(environ):
    """The `SBATCH_*` variables of `environ` as command-line arguments (in a fixed order)."""
    flags = {o.long: o.arg for o in TABLE if o.long}
    out = []
    for var, opt in ENV_OPTIONS.items():
        val = environ.get(var)
        if val is None:
            continue
        if flags.get(opt) == "none":
            out.append(f"--{opt}")
        else:
            out.append(f"--{opt}={val}")
    return out


#: --mail-type names Slurm 22.05 knows (case-insensitive); batchd accepts them and sends no mail
MAIL_TYPES = frozenset({"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
                        "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"})


def fail(text, exit_code=255):
    """An `sbatch: error: ...` refusal (exit 255 as Slurm's option-value errors)."""
    raise OptionError(f"{PROG}: error: {text}", exit_code)


def parse_int(name, val, positive=True):
    """Slurm's parse_int: the whole text a base-10 integer, > 0 (or >= 0); exit 1."""
    try:
        v = int(val, 10)
    except (TypeError, ValueError):
        v = None
    if v is None or v < 0 or (positive and v <= 0):
        fail(f'Invalid numeric value "{val}" for {name}.', 1)
    return v


def str_to_mbytes(text):
    """Slurm's str_to_mbytes: an integer with an optional K|M|G|T|P suffix (default M)
    -> MiB (K rounds up), or None when invalid."""
    if text is None:
        return None
    t = text.strip()
    mult = 1.0
    if t and t[-1].upper() in "KMGTP":
        mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}[t[-1].upper()]
        t = t[:-1]
    if not isdigits(t):
        return None
    v = int(t) * mult
    return int(v) if v == int(v) else int(v) + 1


def _count(text):
    mult = 1
    if text and text[-1].upper() in "KMGTP":
        mult = 1024 ** ("KMGTP".index(text[-1].upper()) + 1)
        text = text[:-1]
    if not isdigits(text):
        return None
    return int(text) * mult


def parse_gres(text):
    """`--gres` list -> [{"name", "type", "count"}]; `none` -> []; OptionError (exit 1,
    Slurm's client-side message) on bad syntax. Counts are per node."""
    out = []
    if text is None or text.lower() == "none":
        return out
    for item in text.split(","):
        if item.startswith("gres:") or item.startswith("gres/"):
            item = item[5:]
        parts = item.split(":")
        name = parts[0]
        if not name or len(parts) > 3:
            fail(GRES_ERROR, 1)
        gtype, count = None, 1
        if len(parts) == 2:
            c = _count(parts[1])
            if c is None:
                gtype = parts[1]
            else:
                count = c
        elif len(parts) == 3:
            gtype = parts[1]
            c = _count(parts[2])
            if c is None or not gtype:
                fail(GRES_ERROR, 1)
            count = c
        if gtype == "":
            fail(GRES_ERROR, 1)
        out.append({"name": name, "type": gtype, "count": count})
    return out


def parse_gpu_spec(text):
    """`[type:]N` (`--gpus`, `--gpus-per-node`, `--gpus-per-task`) -> {"type", "count"};
    a list of several types is refused as an invalid gres specification."""
    if text is None or "," in text:
        fail(GRES_ERROR, 1)
    if text.startswith("gpu:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 1:
        c = _count(parts[0])
        if c is None:
            return {"type": parts[0], "count": 1} if parts[0] else fail(GRES_ERROR, 1)
        return {"type": None, "count": c}
    if len(parts) == 2 and parts[0]:
        c = _count(parts[1])
        if c is not None:
            return {"type": parts[0], "count": c}
    fail(GRES_ERROR, 1)
    return None


def parse_signal(text):
    """`[{R|B}:]SIG[@SECS]` -> {"signal", "time_s", "batch_only"}; exit 255 if invalid."""
    t = text
    batch_only = False
    if ":" in t:
        flags, _, t = t.partition(":")
        if not flags or any(c not in "RB" for c in flags.upper()):
            fail("Invalid --signal specification")
        batch_only = "B" in flags.upper()
    secs = 60
    if "@" in t:
        t, _, s = t.partition("@")
        if not isdigits(s) or int(s) > 65535:
            fail("Invalid --signal specification")
        secs = int(s)
    if isdigits(t):
        num = int(t)
    else:
        name = t.upper()
        if name.startswith("SIG"):
            name = name[3:]
        num = SIGNALS.get(name, 0)
    if not 1 <= num <= 64:
        fail("Invalid --signal specification")
    return {"signal": num, "time_s": secs, "batch_only": batch_only}


def parse_nodes(text):
    """`N` or `MIN-MAX` -> (min, max|None); exit 255 with Slurm's message if invalid."""
    lo, sep, hi = text.partition("-")
    if not isdigits(lo) or (sep and not isdigits(hi)) or int(lo) <= 0:
        fail(f"invalid node count `{text}'")
    mx = int(hi) if sep else None
    if mx is not None and mx < int(lo):
        fail(f"invalid node count `{text}'")
    return int(lo), mx


def parse_nice(val):
    """`--nice[=N]`: default 100; text read like strtol (garbage -> 0), range checked."""
    if val is None:
        return 100
    t = val.strip()
    j = 1 if t[:1] in "+-" else 0
    while j < len(t) and isdigits(t[j]):
        j += 1
    digits = t[:j]
    n = int(digits) if digits not in ("", "+", "-") else 0
    if abs(n) > NICE_MAX:
        fail(f"Invalid nice value, must be between -{NICE_MAX} and {NICE_MAX}")
    return n


def mem_options(cli, merged):
    """Keep one of --mem/--mem-per-cpu/--mem-per-gpu: more than one on the command line
    is refused as by Slurm; otherwise the one of highest precedence wins."""
    keys = ("mem", "mem_per_cpu", "mem_per_gpu")
    if sum(1 for k in keys if k in cli) > 1:
        raise OptionError(f"{PROG}: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.", 1)
    chosen = next((k for k in keys if k in cli), None)
    if chosen:
        for k in keys:
            if k != chosen:
                merged.pop(k, None)
    return merged


def build_spec(v):
    """The resource/time/policy part of a JOB_SPEC from merged option values `v` (keys of
    TABLE). Script, environment, directories and name are filled in by the caller."""
    spec = {}
    for k in ("account", "partition", "qos", "comment", "reservation", "constraint", "mail_type",
              "mail_user", "output", "error", "input", "array", "dependency", "nodelist", "exclude"):
        spec[k] = v.get(k)
    if v.get("_licenses"):
        spec["licenses"] = v["_licenses"]  # batchd has none: the daemon refuses as Slurm does
    if "time" in v:
        t = slurmtime.time_limit_s(v["time"])
        if t is None:
            fail("Invalid --time specification")
        spec["time_limit_s"] = t
    else:
        spec["time_limit_s"] = None
    spec["time_min_s"] = None
    if "time_min" in v:
        t = slurmtime.time_limit_s(v["time_min"])
        if t is None:
            fail("Invalid --time-min specification")
        spec["time_min_s"] = t
    spec["nodes_min"], spec["nodes_max"] = parse_nodes(v["nodes"]) if "nodes" in v else (None, None)
    spec["ntasks"] = parse_int("--ntasks", v["ntasks"]) if "ntasks" in v else None
    spec["ntasks_per_node"] = (parse_int("--ntasks-per-node", v["ntasks_per_node"])
                               if "ntasks_per_node" in v else None)
    spec["cpus_per_task"] = parse_int("--cpus-per-task", v["cpus_per_task"]) if "cpus_per_task" in v else None
    spec["cpus_per_gpu"] = parse_int("--cpus-per-gpu", v["cpus_per_gpu"]) if "cpus_per_gpu" in v else None
    if spec["cpus_per_gpu"] is not None and spec["cpus_per_task"] is not None:
        raise OptionError(f"{PROG}: fatal: --cpus-per-task and --cpus-per-gpu are mutually exclusive.", 1)
    for key, name in (("mem", "--mem"), ("mem_per_cpu", "--mem-per-cpu"), ("mem_per_gpu", "--mem-per-gpu")):
        out = "mem_mb" if key == "mem" else key + "_mb"
        if key in v:
            m = str_to_mbytes(v[key])
            if m is None:
                fail(f"Invalid {name} specification")
            spec[out] = m
        else:
            spec[out] = None
    spec["gres"] = parse_gres(v["gres"]) if "gres" in v else []
    spec["gpus"] = parse_gpu_spec(v["gpus"]) if "gpus" in v else None
    spec["gpus_per_node"] = parse_gpu_spec(v["gpus_per_node"]) if "gpus_per_node" in v else None
    spec["gpus_per_task"] = parse_gpu_spec(v["gpus_per_task"]) if "gpus_per_task" in v else None
    om = v.get("open_mode")
    if om is not None:
        if om.lower() in ("a", "append"):
            om = "append"
        elif om.lower() in ("t", "truncate"):
            om = "truncate"
        else:
            fail("Invalid --open-mode specification")
    spec["open_mode"] = om
    mt = v.get("mail_type")
    if mt is not None and not any(t.strip().upper() in MAIL_TYPES for t in mt.split(",")):
        fail("Invalid --mail-type specification")  # Slurm 22.05: one known type suffices
    spec["begin_time"] = None
    if "begin" in v:
        try:
            spec["begin_time"] = float(slurmtime.parse_begin(v["begin"]))
        except ValueError as e:
            raise OptionError(f"Invalid time specification (pos={e.args[0]}): {v['begin']}\n"
                              f"{PROG}: error: Invalid --begin specification", 255) from None
    spec["hold"] = bool(v.get("hold", False))
    spec["nice"] = parse_nice(v["nice"]) if "nice" in v else 0
    spec["requeue"] = v.get("requeue")
    spec["exclusive"] = "exclusive" in v
    spec["signal"] = parse_signal(v["signal"]) if "signal" in v else None
    spec["test_only"] = bool(v.get("test_only", False))
    spec["wait"] = bool(v.get("wait", False))
    spec["lsf"] = False
    spec["uid"], spec["gid"] = parse_identity(v)
    return spec


def parse_identity(v, caller_uid=None):
    """`--uid`/`--gid` (a name or a number that the user/group database knows) -> the
    (uid, gid) pair of JOB_SPEC, None for each one not given. As Slurm 22.05's sbatch:
    only root may give them (`--uid only permitted by root user`, exit 255, whatever the
    value), and a name or number the system does not know is `Invalid --uid
    specification` (255). The daemon checks both again: it trusts no client."""
    uid_arg, gid_arg = v.get("uid"), v.get("gid")
    if uid_arg is None and gid_arg is None:
        return None, None
    import grp
    import os
    import pwd

    me = os.getuid() if caller_uid is None else caller_uid
    for name, arg in (("--uid", uid_arg), ("--gid", gid_arg)):
        if arg is not None and me != 0:
            fail(f"{name} only permitted by root user")
    uid = gid = None
    if uid_arg is not None:
        uid = _lookup_id(uid_arg, lambda a: pwd.getpwnam(a).pw_uid, lambda n: pwd.getpwuid(n).pw_uid)
        if uid is None:
            fail("Invalid --uid specification")
    if gid_arg is not None:
        gid = _lookup_id(gid_arg, lambda a: grp.getgrnam(a).gr_gid, lambda n: grp.getgrgid(n).gr_gid)
        if gid is None:
            fail("Invalid --gid specification")
    return uid, gid


def _lookup_id(arg, by_name, by_number):
    """A name first, then an ASCII decimal number; None when the database has neither."""
    try:
        return by_name(arg)
    except (KeyError, ValueError):
        pass
    if arg and arg.isascii() and arg.isdigit():
        try:
            return by_number(int(arg))
        except (KeyError, OverflowError, ValueError):
            return None
    return None
