"""sbatch's option table, its `SBATCH_*` input variables and the option values -> JOB_SPEC
conversion (the `JOB_SPEC` of `batchd/protocol.py`).

Shared by `sbatch` and the other batch front-ends; cheap to import (builtins, the
getopt parser and the time grammar only).

Errors are raised as `OptionError(message, exit_code)` carrying the complete stderr text:
value errors that Slurm detects while parsing options exit 255 (`sbatch: error: Invalid
--time specification`), `parse_int` failures and refused combinations exit 1, as Slurm.
"""

from batchd.cli.options import Opt
from batchd.slurm.jobopts import (  # noqa: F401 - re-exported: the commands' names for them
    GRES_ERROR,
    MAIL_TYPES,
    NICE_MAX,
    PROG,
    SIGNALS,
    OptionError,
    fail,
    mem_options,
    parse_gpu_spec,
    parse_gres,
    parse_int,
    parse_nice,
    parse_nodes,
    parse_signal,
    str_to_mbytes,
)
from batchd.slurm.jobopts import build_spec as _build_spec

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


def build_spec(v):
    """`batchd.slurm.jobopts.build_spec` with the identity (`--uid`/`--gid`) the caller may give."""
    spec = _build_spec(v)
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
