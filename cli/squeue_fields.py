"""squeue's columns: the `%` codes and `-O` long names with their headers, and the text
of one column for one JOB_VIEW row (`job_value`)."""

import time
from collections.abc import Iterable

from batchd.cli import fmt

# squeue %R prints "(reason)" instead of the node list for these states
REASON_STATES = ("PENDING", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "FAILED", "NODE_FAIL",
                 "BOOT_FAIL")

# %code -> (header, value key)
CODES = {
    "a": ("ACCOUNT", "account"), "A": ("JOBID", "job_id"), "b": ("TRES_PER_NODE", "tres_per_node"),
    "B": ("EXEC_HOST", "batch_host"), "c": ("MIN_CPUS", "min_cpus"), "C": ("CPUS", "cpus"),
    "d": ("MIN_TMP_DISK", "zero"), "D": ("NODES", "nodes"), "e": ("END_TIME", "end_time"),
    "E": ("DEPENDENCY", "dependency"), "f": ("FEATURES", "features"),
    "F": ("ARRAY_JOB_ID", "array_job_id"), "g": ("GROUP", "group"), "G": ("GROUP", "gid"),
    "h": ("OVER_SUBSCRIBE", "oversubscribe"), "H": ("SOCKETS_PER_NODE", "star"),
    "I": ("CORES_PER_SOCKET", "star"), "J": ("THREADS_PER_CORE", "star"), "X": ("CORE_SPEC", "star"),
    "i": ("JOBID", "display_id"),
    "j": ("NAME", "name"), "k": ("COMMENT", "comment"), "K": ("ARRAY_TASK_ID", "array_task_id"),
    "l": ("TIME_LIMIT", "time_limit"), "L": ("TIME_LEFT", "time_left"),
    "m": ("MIN_MEMORY", "min_memory"), "M": ("TIME", "time_used"), "n": ("REQ_NODES", "empty"),
    "N": ("NODELIST", "node_list"), "o": ("COMMAND", "command"), "O": ("CONTIGUOUS", "zero"),
    "p": ("PRIORITY", "priority_norm"), "P": ("PARTITION", "partition"), "q": ("QOS", "qos"),
    "Q": ("PRIORITY", "priority"), "r": ("REASON", "reason"), "R": ("NODELIST(REASON)", "reason_list"),
    "S": ("START_TIME", "start_time"), "t": ("ST", "state_compact"), "T": ("STATE", "state"),
    "u": ("USER", "user"), "U": ("UID", "uid"), "v": ("RESERVATION", "null"),
    "V": ("SUBMIT_TIME", "submit_time"), "w": ("WCKEY", "null"), "W": ("LICENSES", "null"),
    "x": ("EXC_NODES", "empty"), "y": ("NICE", "nice"), "Y": ("SCHEDNODES", "null"),
    "z": ("S:C:T", "sct"), "Z": ("WORK_DIR", "workdir"),
}

# -O long names (lower case, without '-' and '_') -> (header, value key)
FIELDS = {
    "account": ("ACCOUNT", "account"), "accruetime": ("ACCRUE_TIME", "accrue_time"),
    "arrayjobid": ("ARRAY_JOB_ID", "array_job_id"), "arraytaskid": ("ARRAY_TASK_ID", "array_task_id"),
    "batchhost": ("EXEC_HOST", "batch_host"), "command": ("COMMAND", "command"),
    "comment": ("COMMENT", "comment"), "dependency": ("DEPENDENCY", "dependency"),
    "derivedec": ("DERIVED_EC", "derived_exit_code"), "eligibletime": ("ELIGIBLE_TIME", "eligible_time"),
    "endtime": ("END_TIME", "end_time"), "exitcode": ("EXIT_CODE", "exit_code"),
    "feature": ("FEATURES", "features"), "groupid": ("GROUP", "gid"), "groupname": ("GROUP", "group"),
    "jobarrayid": ("JOBID", "display_id"), "jobid": ("JOBID", "job_id"),
    "minmemory": ("MIN_MEMORY", "min_memory"), "mincpus": ("MIN_CPUS", "min_cpus"),
    "name": ("NAME", "name"), "nice": ("NICE", "nice"), "nodelist": ("NODELIST", "node_list"),
    "numcpus": ("CPUS", "cpus"), "numnodes": ("NODES", "nodes"), "numtasks": ("TASKS", "ntasks"),
    "partition": ("PARTITION", "partition"), "priority": ("PRIORITY", "priority_norm"),
    "prioritylong": ("PRIORITY", "priority"), "qos": ("QOS", "qos"), "reason": ("REASON", "reason"),
    "reasonlist": ("NODELIST(REASON)", "reason_list"), "requeue": ("REQUEUE", "requeue"),
    "restartcnt": ("RESTARTCNT", "restarts"), "schednodes": ("SCHEDNODES", "null"),
    "starttime": ("START_TIME", "start_time"), "state": ("STATE", "state"),
    "statecompact": ("ST", "state_compact"), "stderr": ("STDERR", "stderr"), "stdin": ("STDIN", "stdin"),
    "stdout": ("STDOUT", "stdout"), "submittime": ("SUBMIT_TIME", "submit_time"),
    "timeleft": ("TIME_LEFT", "time_left"), "timelimit": ("TIME_LIMIT", "time_limit"),
    "timeused": ("TIME", "time_used"), "tresalloc": ("TRES_ALLOC", "tres_alloc"),
    "tresperjob": ("TRES_PER_JOB", "tres_per_job"), "trespernode": ("TRES_PER_NODE", "tres_per_node"),
    "userid": ("UID", "uid"), "username": ("USER", "user"), "workdir": ("WORK_DIR", "workdir"),
    "nodes": ("NODES", "nodes"), "reservation": ("RESERVATION", "null"), "qosraw": ("QOS", "qos"),
    "cluster": ("CLUSTER", "cluster"), "licenses": ("LICENSES", "null"), "reboot": ("REBOOT", "zero"),
    "mintime": ("MIN_TIME", "zero"), "pendingtime": ("PENDING_TIME", "pending_time"),
    "preempttime": ("PREEMPT_TIME", "preempt_time"), "lastschedeval": ("LAST_SCHED_EVAL", "last_sched_eval"),
    "cpuspertask": ("CPUS_PER_TASK", "cpus_per_task"), "sockets": ("SOCKETS_PER_NODE", "star"),
    "cores": ("CORES_PER_SOCKET", "star"), "threads": ("THREADS_PER_CORE", "star"),
    "contiguous": ("CONTIGUOUS", "zero"), "corespec": ("CORE_SPEC", "star"),
    "admincomment": ("ADMIN_COMMENT", "null"), "network": ("NETWORK", "null"),
    "batchflag": ("BATCHFLAG", "one"), "wckey": ("WCKEY", "null"), "exechost": ("EXEC_HOST", "batch_host"),
}


#: the JOB_VIEW keys `job_value` reads for a value key, where they are not the value key
#: itself (a plain value) or nothing (a constant); `state` is read for every key.
#: tests/cli/test_squeue.py records what job_value and the sort read and checks it here.
VIEW_KEYS: dict[str, tuple[str, ...]] = {
    "display_id": ("display_id", "id"), "job_id": ("id",), "array_job_id": ("array_job_id", "id"),
    "array_task_id": ("array_task_id", "array_task_str"), "state_compact": (),
    "reason": ("reason", "exit_code"), "reason_list": ("reason", "exit_code", "node_list"),
    "time_used": ("run_time_s",), "time_limit": ("time_limit_s",), "time_left": ("time_limit_s", "run_time_s"),
    "min_memory": ("mem_per_cpu_mb", "mem_per_node_mb", "mem_mb"), "priority_norm": ("priority",),
    "start_time": ("start_estimate", "start_time", "begin_time"),
    "end_time": ("start_time", "begin_time", "end_time", "time_limit_s"), "tres_alloc": ("tres_alloc", "tres_req"),
    "cpus_per_task": ("cpus_per_task", "cpus", "ntasks"), "pending_time": ("eligible_time", "start_time"),
    "min_cpus": ("min_cpus", "nodes", "cpus"), "null": (), "empty": (), "zero": (), "one": (), "star": (),
    "oversubscribe": (), "sct": (),
}


def view_keys(value_keys: Iterable[str]) -> set[str]:
    """The JOB_VIEW keys `job_value` reads for these value keys."""
    out = {"state"}
    for k in value_keys:
        out.update(VIEW_KEYS.get(k, (k,)))
    return out


def _ts(v: float | None) -> str:
    return fmt.fmt_ts(v, "N/A")


#: the value keys `job_value` computes; every other key is the view's value as text
#: (tests/cli/test_squeue.py checks this names every key job_value compares)
COMPUTED = frozenset({
    "accrue_time", "array_job_id", "array_task_id", "batch_host", "comment", "cpus_per_task", "dependency",
    "display_id", "eligible_time", "empty", "end_time", "features", "job_id", "last_sched_eval", "min_cpus",
    "min_memory", "null", "one", "oversubscribe", "pending_time", "preempt_time", "priority_norm", "reason",
    "reason_list", "requeue", "sct", "star", "start_time", "state", "state_compact", "stdin", "submit_time",
    "time_left", "time_limit", "time_used", "tres_alloc", "tres_per_job", "tres_per_node", "zero"})


def job_value(job: dict, key: str, now: float | None = None) -> str:
    """The text of one column for a JOB_VIEW `job`; `key` is a value key of CODES/FIELDS."""
    g = job.get
    if key not in COMPUTED:  # straight to the end: squeue's plain columns skip the tests below
        return _plain(g(key))
    state = g("state") or ""
    if key == "display_id":
        return g("display_id") or str(g("id"))
    if key == "job_id":
        return str(g("id"))
    if key == "array_job_id":
        return str(g("array_job_id") or g("id"))
    if key == "array_task_id":
        if g("array_task_id") is not None:
            return str(g("array_task_id"))
        return str(g("array_task_str") or "[N/A]").strip("[]")
    if key == "state_compact":
        return fmt.STATE_COMPACT.get(state, state[:2])
    if key == "state":
        return state
    if key == "reason":
        return fmt.job_reason(job)
    if key == "reason_list":
        reason = fmt.job_reason(job)
        if state in REASON_STATES and (state == "PENDING" or reason != "None"):
            return f"({reason})"
        return g("node_list") or ""
    if key == "time_used":
        return fmt.fmt_elapsed(g("run_time_s") or 0)
    if key == "time_limit":
        tl = g("time_limit_s")
        return "NOT_SET" if tl is None else fmt.fmt_elapsed(tl)
    if key == "time_left":
        tl = g("time_limit_s")
        if tl is None or tl == fmt.UNLIMITED:
            return "UNLIMITED"
        return fmt.fmt_elapsed(max(0, tl - (g("run_time_s") or 0)))
    if key == "min_memory":
        for k in ("mem_per_cpu_mb", "mem_per_node_mb"):
            if g(k) is not None:
                return _mem(g(k))
        return _mem(g("mem_mb") or 0)
    if key == "priority_norm":
        return f"{(g('priority') or 0) / 4294967295:.14f}"
    if key == "start_time":
        if state == "PENDING":
            return _ts(g("start_estimate") or g("start_time") or g("begin_time"))
        return _ts(g("start_time"))
    if key == "end_time":
        if not (g("start_time") or (state == "PENDING" and g("begin_time"))):
            return "N/A"
        if state not in ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING") and g("end_time"):
            return _ts(g("end_time"))
        tl = g("time_limit_s")
        if state != "PENDING" and tl not in (None, fmt.UNLIMITED):
            return _ts(g("start_time") + tl)
        return "NONE"
    if key in ("submit_time", "eligible_time", "accrue_time"):
        return _ts(g(key))
    if key in ("tres_per_node", "tres_per_job"):
        return g(key) or "N/A"
    if key == "tres_alloc":
        return g("tres_alloc") or g("tres_req") or ""
    if key in ("dependency", "comment", "features"):
        v = g(key)
        return "(null)" if v in (None, "") else str(v)
    if key == "null":
        return "(null)"
    if key == "empty":
        return ""
    if key == "zero":
        return "0"
    if key == "one":
        return "1"
    if key == "star":
        return "*"
    if key == "batch_host":
        return g("batch_host") or "n/a"
    if key == "cpus_per_task":
        return str(g("cpus_per_task") or max(1, (g("cpus") or 1) // max(1, g("ntasks") or 1)))
    if key == "pending_time":
        eligible = g("eligible_time")
        if not eligible:
            return "0"
        until = (now or time.time()) if state == "PENDING" else (g("start_time") or eligible)
        return str(max(0, int(until - eligible)))
    if key in ("preempt_time", "last_sched_eval"):
        return _ts(g(key))
    if key == "oversubscribe":
        return "OK"
    if key == "sct":
        return "*:*:*"
    if key == "min_cpus":
        v = g("min_cpus")
        if v is None:
            nodes = g("nodes") or 1
            v = max(1, (g("cpus") or 1) // nodes)
        return str(v)
    if key == "requeue":
        return "1" if g("requeue") else "0"
    if key == "stdin":
        return g("stdin") or "/dev/null"
    return _plain(g(key))


def _plain(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


# ----------------------------------------------------------------------------- arrays, sort


#: squeue --noconvert: sizes in MiB as stored ("2048M"), not converted ("2G")
NOCONVERT = False


def _mem(mb: float) -> str:
    return f"{int(mb)}M" if NOCONVERT else fmt.fmt_mem(mb)
