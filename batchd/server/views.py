"""Turn jobs and nodes into the wire views of `batchd/protocol.py` (JOB_VIEW,
NODE_VIEW, PARTITION_VIEW), and parse the job ids queries name. Pure functions of
their inputs. sacct's ACCT_ROW is built by `batchd.server.acctrows`, which shares this
module's fallbacks for a malformed job record (`sanitized`, `log_bad`)."""

from __future__ import annotations

import dataclasses
import grp
import json
import logging
import time
from typing import Any

from batchd.config import Config
from batchd.model import Job, Node
from batchd.server.viewmemo import ViewList
from batchd.slurm.digits import isdigits
from batchd.slurm.hostlist import compress
from batchd.slurm.hostlist import ranges as _ranges
from batchd.slurm.tres import parse_tres

log = logging.getLogger(__name__)


def parse_job_id(raw: str) -> tuple[int, set[int] | None]:
    """`123` -> (123, None); `123_4` -> (123, {4}); `123_[1-3,7]` -> (123, {1,2,3,7}).
    Raises ValueError on anything else: ASCII digits only, and a task range no wider
    than MAX_TASK_RANGE (a query never expands an unbounded range)."""
    raw = raw.strip()
    if "_" not in raw:
        return _job_number(raw), None
    head, _, tail = raw.partition("_")
    jid = _job_number(head)
    if tail.startswith("[") and tail.endswith("]"):
        tail = tail[1:-1]
    tasks: set[int] = set()
    for part in tail.split(","):
        if "-" in part:
            a, _, b = part.partition("-")
            lo, hi = _job_number(a, 0), _job_number(b, 0)
            if hi - lo >= MAX_TASK_RANGE:
                raise ValueError(f"task range too wide: {part}")
            tasks.update(range(lo, hi + 1))
        else:
            tasks.add(_job_number(part, 0))
    return jid, tasks


#: The widest array task range a job id may name (Slurm's largest MaxArraySize).
MAX_TASK_RANGE = 4_000_001


def _job_number(text: str, least: int = 1) -> int:
    """An id or task index: ASCII digits, at least `least`, within 32 bits; else ValueError."""
    text = text.strip()
    if not isdigits(text) or not least <= int(text) < 2**32:
        raise ValueError(f"invalid job id {text!r}")
    return int(text)


def group_name(gid: int) -> str:
    """The group's name, else the number. Remembered for GROUP_TTL_S: a listing of
    10,000 jobs asks the system once per group, not once per job."""
    now = time.monotonic()
    hit = _groups.get(gid)
    if hit is not None and hit[1] > now:
        return hit[0]
    try:
        name = grp.getgrgid(gid).gr_name
    except KeyError:
        name = str(gid)
    if len(_groups) > 10_000:
        _groups.clear()
    _groups[gid] = (name, now + GROUP_TTL_S)
    return name


#: how long a group's name is remembered (seconds)
GROUP_TTL_S = 60.0
_groups: dict[int, tuple[str, float]] = {}


def exit_str(code: int, sig: int) -> str:
    return f"{code}:{sig}"


def gpu_indices(alloc: dict[str, Any] | None) -> dict[str, list[Any]]:
    if not alloc:
        return {}
    return {n: list(a.get("gpus", [])) for n, a in alloc.items() if isinstance(a, dict)}


def cpu_id_ranges(alloc: dict[str, Any] | None) -> dict[str, str]:
    """{node: "3-6"}: the CPU ids the allocation pins the job to, in Slurm's range form; nodes
    of an allocation made before CPU ids existed are left out (scontrol prints `CPU_IDs=`)."""
    out = {}
    for n, a in (alloc or {}).items():
        ids = a.get("cpu_ids") if isinstance(a, dict) else None
        if ids:
            out[n] = _ranges([int(c) for c in ids])
    return out


def gpus_str(job: Job) -> str:
    """Slurm's `gpu:h200:2(IDX:0-1)` for the first node of the allocation."""
    alloc = job.allocation or {}
    for _node, a in alloc.items():
        gpus = a.get("gpus", []) if isinstance(a, dict) else []
        if not gpus:
            return ""
        idx = [int(str(g).split(":")[0]) for g in gpus]
        gtype = (job.request.get("gpu_type") or a.get("gpu_type") or "gpu")
        return f"gpu:{gtype}:{len(gpus)}(IDX:{_ranges(idx)})"
    return ""


def shown_time_limit(j: Job, cfg: Config) -> int | None:
    """The limit scontrol and squeue show: a job that has none yet (no -t, and its partition
    no DefaultTime: Slurm's NO_VAL until it starts) shows its partition's MaxTime, as
    Slurm 22.05 does (tests/compat/test_time_limits.py); sacct shows Partition_Limit."""
    if j.time_limit_s is not None:
        return j.time_limit_s
    part = next((p for p in cfg.partitions if p.name == j.partition), None)
    return None if part is None else part.max_time_s


#: The spec keys JOB_VIEW and ACCT_ROW (batchd.server.acctrows) read: the store loads only
#: these for a listing (batchd.store.jobviews), never the script or the environment.
#: A key read below must be named here (tests/store/test_jobviews.py checks both agree).
SPEC_KEYS = ("workdir", "script_path", "submit_host", "output", "error", "input", "constraint", "nodelist",
             "exclude", "cpus_per_task", "exclusive", "gres", "gpus_per_node", "gpus", "gpus_per_task",
             "ntasks_per_node", "mem_mb", "mem_per_cpu_mb", "mem_per_gpu_mb")
#: The request keys JOB_VIEW and ACCT_ROW read (an array task's request also lists every
#: task of its array, which a listing never needs)
REQUEST_KEYS = ("array_max_running", "nodes", "tasks", "per_task", "gpu_type")


def job_view(j: Job, cfg: Config, now: float | None = None) -> dict[str, Any]:
    """JOB_VIEW of one job. A job whose stored request or spec cannot be shown (a
    malformed record stored before the socket checked its input) is shown with safe
    fallbacks (`sanitized`) instead of failing the whole list; logged once per job."""
    try:
        return _job_view(j, cfg, now)
    except Exception as e:
        log_bad(j, e)
        return _job_view(sanitized(j), cfg, now)


#: spec keys that JOB_VIEW and ACCT_ROW read as text
_TEXT_SPEC_KEYS = ("workdir", "script_path", "submit_host", "output", "error", "input", "constraint")
_logged_bad: set[int] = set()


def sanitized(j: Job) -> Job:
    """`j` with only what can always be shown: text spec keys that are text, an
    allocation that is a mapping of mappings, no request details."""
    spec = j.spec if isinstance(j.spec, dict) else {}
    alloc = j.allocation if isinstance(j.allocation, dict) else None
    if alloc is not None and not all(isinstance(a, dict) for a in alloc.values()):
        alloc = None
    return dataclasses.replace(
        j, spec={k: spec[k] for k in _TEXT_SPEC_KEYS if isinstance(spec.get(k), str)}, request={},
        allocation={n: {k: v for k, v in a.items() if k in ("cpus", "memory_mb") and isinstance(v, int)}
                    for n, a in alloc.items()} if alloc else None,
        tres_req=j.tres_req if _tres_ok(j.tres_req) else "", tres_alloc=j.tres_alloc if _tres_ok(j.tres_alloc) else "")


def _opt_text(v: Any) -> str | None:
    """A spec value shown as text, or None (unset, or not text in an old record)."""
    return v if isinstance(v, str) and v else None


def _tres_ok(tres: Any) -> bool:
    try:
        parse_tres(tres) if tres else None
        return tres is None or isinstance(tres, str)
    except Exception:
        return False


def log_bad(j: Job, e: BaseException) -> None:
    """Log that `j` is shown with fallbacks because of `e`: once per job id (at most
    100,000 ids remembered per process)."""
    if j.id not in _logged_bad and len(_logged_bad) < 100_000:
        _logged_bad.add(j.id)
        log.error("job record shown with fallbacks job_id=%s error=%s: %s", j.id, type(e).__name__, e)


def _job_view(j: Job, cfg: Config, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    req = j.request
    alloc = j.allocation or {}
    if j.state == "RUNNING" and j.start_time:
        run_s = int(now - j.start_time)
    elif j.start_time and j.end_time:
        run_s = int(j.end_time - j.start_time)
    else:
        run_s = 0
    nodes = len(alloc) if alloc else int(req.get("nodes") or 1)
    cpus = sum(int(a.get("cpus", 0)) for a in alloc.values()) if alloc else \
        int(req.get("tasks", 1)) * int(req.get("per_task", {}).get("cpu", 1))
    mem = sum(int(a.get("memory_mb", 0)) for a in alloc.values()) if alloc else \
        int(req.get("tasks", 1)) * int(req.get("per_task", {}).get("mem", 0))
    spec = j.spec
    task_str = None
    if j.array_job_id is not None:
        display = f"{j.array_job_id}_{j.array_task_id}"
    else:
        display = str(j.id)
    view = {
        "id": j.id, "array_job_id": j.array_job_id, "array_task_id": j.array_task_id,
        "array_task_str": task_str, "display_id": display,
        "array_max_running": req.get("array_max_running"),
        "name": j.name, "user": j.user, "uid": j.uid, "gid": j.gid, "group": group_name(j.gid),
        "account": j.account, "partition": j.partition, "qos": j.qos, "state": j.state,
        "reason": j.reason, "priority": j.priority, "nice": j.nice,
        "submit_time": j.submit_time, "eligible_time": j.eligible_time, "start_time": j.start_time,
        "end_time": j.end_time, "time_limit_s": shown_time_limit(j, cfg), "run_time_s": max(run_s, 0),
        "nodes": nodes, "node_list": j.node_list, "ntasks": int(req.get("tasks") or 1),
        "cpus": cpus, "mem_mb": mem, "tres_req": j.tres_req, "tres_alloc": j.tres_alloc,
        "gres": gpu_indices(alloc), "gpus_str": gpus_str(j), "cpu_ids": cpu_id_ranges(alloc),
        "workdir": spec.get("workdir", ""), "command": spec.get("script_path") or "", "dependency": j.dependency, "requeue": j.requeue,
        "restarts": j.restarts, "exit_code": exit_str(j.exit_code, j.exit_signal),
        "derived_exit_code": "0:0", "comment": j.comment,
        "batch_host": next(iter(alloc), None), "start_estimate": j.start_estimate,
        "begin_time": j.begin_time, "hold": j.hold, "submit_host": spec.get("submit_host"),
        "cluster": cfg.cluster_name, "req_node_list": _opt_text(spec.get("nodelist")),
        "exc_node_list": _opt_text(spec.get("exclude")),
    }
    if j.state == "FAILED" and j.reason in (None, "None") and j.exit_signal == OUTPUT_OPEN_FAILED_SIG:
        view["reason"] = "JobLaunchFailure"  # scontrol's reason; sacct keeps None
    view.update(request_keys(j, cfg))
    view.update(std_paths(j))
    if j.state == "PENDING" and j.begin_time and not j.hold and j.begin_time > (j.eligible_time or 0):
        view["eligible_time"] = j.begin_time  # Slurm shows a pending job's begin time as eligible
    return view


#: The ExitCode signal of a run whose output file could not be opened (Slurm's 0:53;
#: batchd.node.jobexec.OUTPUT_OPEN_FAILED_SIG, not imported to keep views light)
OUTPUT_OPEN_FAILED_SIG = 53
#: Slurm's NO_VAL: the array task id of a job array's one pending record (and of a plain job)
NO_VAL_TASK = 4294967294


def _tres_items(items: list[dict[str, Any]]) -> str | None:
    """Slurm 22.05's `gres:gpu:h200:2,gres:shard:4` for a list of {name, type, count}."""
    out = []
    for g in items:
        if not g or not g.get("count"):
            continue
        name = g.get("name") or "gpu"
        typ = f":{g['type']}" if g.get("type") else ""
        out.append(f"gres:{name}{typ}:{int(g['count'])}")
    return ",".join(out) or None


def request_keys(j: Job, cfg: Config) -> dict[str, Any]:
    """The optional JOB_VIEW keys that describe the request as submitted (protocol.py):
    tres_per_node/_job/_task, mem_per_cpu_mb or mem_per_node_mb, mem_per_tres,
    min_cpus, cpus_per_task, constraint."""
    spec, req = j.spec, j.request
    per_task = req.get("per_task") or {}
    # as requested (-c, or derived from --cpus-per-gpu); --exclusive widens the allocation only
    cpt = int(spec.get("cpus_per_task") or (per_task.get("cpu") if not spec.get("exclusive") else 1) or 1)
    gres = list(spec.get("gres") or [])
    if spec.get("gpus_per_node"):
        gres.append({"name": "gpu", **spec["gpus_per_node"]})
    gpus = spec.get("gpus")
    per_task_gpu = spec.get("gpus_per_task")
    out: dict[str, Any] = {
        "tres_per_node": _tres_items(gres),
        "tres_per_job": _tres_items([{"name": "gpu", **gpus}]) if gpus else None,
        "tres_per_task": _tres_items([{"name": "gpu", **per_task_gpu}]) if per_task_gpu else None,
        "cpus_per_task": cpt, "min_cpus": cpt * int(spec.get("ntasks_per_node") or 1),
        "mem_per_cpu_mb": None, "mem_per_node_mb": None, "mem_per_tres": None,
        "constraint": spec.get("constraint"),
    }
    if spec.get("mem_mb") is not None:
        out["mem_per_node_mb"] = int(spec["mem_mb"])
    elif spec.get("mem_per_cpu_mb") is not None:
        out["mem_per_cpu_mb"] = int(spec["mem_per_cpu_mb"])
    elif spec.get("mem_per_gpu_mb") is not None and (gres or gpus or per_task_gpu):
        out["mem_per_node_mb"] = 0
        out["mem_per_tres"] = f"gres:gpu:{int(spec['mem_per_gpu_mb'])}"
    else:
        out["mem_per_cpu_mb"] = int(cfg.def_mem_per_cpu_mb)
    return out


def _slurm_path(pattern: str, j: Job, master: bool) -> str:
    """A path as scontrol shows it (Slurm's own expansion of the job record): `%A`, `%a`,
    `%j`, `%u`, `%x` only (`%N` and the rest stay), relative to the working directory.
    `master`: the job array's one pending record (task id NO_VAL, the array's id)."""
    is_array = j.array_job_id is not None
    jid = j.array_job_id if master and is_array else j.id
    task = NO_VAL_TASK if master or not is_array else j.array_task_id
    codes = {"A": str(j.array_job_id if is_array else j.id), "a": str(task), "j": str(jid),
             "u": j.user, "x": j.name}
    out = pattern
    for code, value in codes.items():
        out = out.replace(f"%{code}", value)
    if out.startswith("/"):
        return out
    return f"{(j.spec.get('workdir') or '').rstrip('/')}/{out}"


def std_paths(j: Job) -> dict[str, str]:
    """JOB_VIEW stdout/stderr/stdin as scontrol prints them (Slurm's own expansion, the
    same before and after the job ran)."""
    spec = j.spec
    master = j.array_job_id is not None and j.state == "PENDING" and not j.restarts
    if spec.get("output") in (None, ""):
        out_pat = "slurm-%A_%a.out" if j.array_job_id is not None else "slurm-%j.out"
    else:
        out_pat = spec["output"]
    stdout = _slurm_path(out_pat, j, master)
    stderr = _slurm_path(spec["error"], j, master) if spec.get("error") else stdout
    stdin = _slurm_path(spec["input"], j, master) if spec.get("input") else "/dev/null"
    return {"stdout": stdout, "stderr": stderr, "stdin": stdin}


def node_views(nodes: list[Node], running: list[Job], cfg: Config) -> dict[str, Any]:
    used: dict[str, dict[str, Any]] = {n.name: {"cpus": 0, "mem": 0, "gpus": []} for n in nodes}
    for j in running:
        for name, a in (j.allocation or {}).items():
            if name in used and isinstance(a, dict):
                used[name]["cpus"] += int(a.get("cpus", 0))
                used[name]["mem"] += int(a.get("memory_mb", 0))
                used[name]["gpus"].extend(a.get("gpus", []))
    out = []
    for n in nodes:
        u = used[n.name]
        total_gpus, gtype = _gpu_total(n.gpus)
        state = n.state
        if state in ("IDLE", "MIXED", "ALLOCATED"):
            if u["cpus"] == 0 and not u["gpus"]:
                state = "IDLE"
            elif u["cpus"] >= n.cpus or (total_gpus and len(u["gpus"]) >= total_gpus and u["cpus"] >= n.cpus):
                state = "ALLOCATED"
            else:
                state = "MIXED"
        gres = f"gpu:{gtype}:{total_gpus}" if total_gpus else "(null)"
        idx = sorted(int(str(g).split(":")[0]) for g in u["gpus"])
        gres_used = f"gpu:{gtype}:{len(idx)}(IDX:{_ranges(idx) if idx else 'N/A'})" if total_gpus else "(null)"
        out.append({"name": n.name, "state": state, "reason": n.reason, "cpus": n.cpus,
                    **({"reason_user": _user_name(n.reason_uid), "reason_time": n.reason_time}
                       if n.reason and n.reason_uid is not None else {}),
                    "cpus_alloc": u["cpus"], "memory_mb": n.memory_mb, "memory_alloc_mb": u["mem"],
                    "gres": gres, "gres_used": gres_used,
                    "partitions": [p.name for p in cfg.partitions if n.name in p.nodes],
                    "features": [], "gpus": n.gpus, "heartbeat": n.heartbeat})
    parts = [{"name": p.name, "default": p.default, "nodes": p.nodes, "node_list": compress(p.nodes),
              "max_time_s": p.max_time_s, "default_time_s": p.default_time_s, "state": "UP",
              "priority_job_factor": p.priority_job_factor} for p in cfg.partitions]
    return {"nodes": out, "partitions": parts}


def _gpu_total(gpus: list[Any]) -> tuple[int, str]:
    total, gtype = 0, "gpu"
    for g in gpus:
        if "count" in g:
            total += int(g["count"])
        else:
            total += 1
        gtype = g.get("type", gtype)
    return total, gtype


def _user_name(uid: int) -> str:
    """A uid's login name (sinfo -R USER), the number where the system has no such user."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def id_segments(tasks: list[tuple[int, int]]) -> list[list[int]]:
    """(job id, task id) pairs, by job id, as [first job id, first task id, count] segments
    in which both ids step by one (a job array's tasks are usually one segment)."""
    out: list[list[int]] = []
    for jid, task in tasks:
        if out:
            last = out[-1]
            if jid == last[0] + last[2] and task == last[1] + last[2]:
                last[2] += 1
                continue
        out.append([jid, task, 1])
    return out


def fold_pending_tasks(others: list[dict[str, Any]], tasks: list[tuple[int, int, int]],
                       firsts: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """squeue's rows without -r, as `batchd.cli.fmt.fold_array_tasks` makes them from every
    task's JOB_VIEW, built from far less: `others` the JOB_VIEWs of every job but the
    pending array tasks (by id), `tasks` (id, array_job_id, array_task_id) of those tasks
    (by id), `firsts` per array job id the JOB_VIEW of its pending task with the lowest
    task id. Each array's pending tasks become one row at the place of its task with the
    lowest job id: the first task's view with `id` the array job id, `array_task_id` None,
    `array_task_str` `[0-3,7%2]` and `display_id` `123_[0-3,7%2]` (`%N` the array's
    throttle, which every task of an array shares). An array whose first task is missing
    from `firsts` (it left PENDING meanwhile) is left out."""
    groups: dict[int, list[int]] = {}
    place: dict[int, int] = {}
    for jid, aj, task in tasks:
        groups.setdefault(aj, []).append(task)
        place.setdefault(aj, jid)
    folded: list[tuple[int, dict[str, Any]]] = []
    for aj, ids in groups.items():
        first = firsts.get(aj)
        if first is None:
            continue
        throttle = first.get("array_max_running")
        text = _ranges(ids) + (f"%{throttle}" if throttle else "")
        folded.append((place[aj], dict(first, id=aj, array_task_id=None, array_task_str=f"[{text}]",
                                        display_id=f"{aj}_[{text}]")))
    if not folded:
        return others
    folded.sort(key=lambda x: x[0])
    # the texts of `others` (a ViewList) go along, so the reply is still encoded by joining them
    texts: list[str] | None = getattr(others, "texts", None)
    out, out_texts, k = [], [], 0
    for i, v in enumerate(others):
        while k < len(folded) and folded[k][0] < v["id"]:
            out.append(folded[k][1])
            out_texts.append(json.dumps(folded[k][1]))
            k += 1
        out.append(v)
        if texts is not None:
            out_texts.append(texts[i])
    for _p, f in folded[k:]:
        out.append(f)
        out_texts.append(json.dumps(f))
    return ViewList(out, out_texts) if texts is not None else out
