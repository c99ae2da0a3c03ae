"""batchd's views as slurmrestd v0.0.38 shows them (Slurm 22.05): JOB_VIEW -> a
`v0.0.38_job_response_properties`, NODE_VIEW -> `v0.0.38_node`, PARTITION_VIEW ->
`v0.0.38_partition`, ACCT_ROW -> `dbv0.0.38_job`, the accounts tree -> `dbv0.0.38_account`
and `dbv0.0.38_association`. Pure functions of the views (`batchd/protocol.py` names them).

Every value has the type Slurm's published OpenAPI document gives it: where slurmrestd
22.05 itself sends `null` for an unset number, or an integer where the document says
string (`meta.Slurm.version.major`), batchd follows the document (an unset field is left
out; the version parts are strings), so a client generated from the document reads every
reply (docs/rest.md, "Differences from slurmrestd").
"""

from __future__ import annotations

from typing import Any

API = "v0.0.38"
META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": "22", "minor": "05", "micro": "8"}, "release": "22.05.8"}}
#: the TRES ids slurmdbd gives the built-in kinds (gres get 1001 and on, in the order met)
TRES_IDS = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5}
UNLIMITED = 0xFFFFFFFF  # Slurm's INFINITE for a time limit in minutes


def envelope(**parts: Any) -> dict[str, Any]:
    return {"meta": META, "errors": [], **parts}


def _i(v: Any) -> int:
    return int(v or 0)


def _minutes(secs: int | None) -> int | None:
    """A limit in seconds (-1 UNLIMITED, None unset) as Slurm's minutes (INFINITE)."""
    if secs is None:
        return None
    return UNLIMITED if secs < 0 else int(secs) // 60


def _code(text: str | None) -> int:
    """"0:0" / "1:0" / "0:9" -> the wait status Slurm packs (exit << 8 | signal)."""
    code, _, sig = (text or "0:0").partition(":")
    try:
        return (int(code) << 8) | int(sig or 0)
    except ValueError:
        return 0


def _put(out: dict[str, Any], **kv: Any) -> dict[str, Any]:
    out.update({k: v for k, v in kv.items() if v is not None})
    return out


def job(v: dict[str, Any], cluster: str) -> dict[str, Any]:
    """A JOB_VIEW as slurmrestd's `GET /slurm/v0.0.38/jobs` item."""
    out: dict[str, Any] = {
        "account": v.get("account") or "", "admin_comment": "", "array_job_id": _i(v.get("array_job_id")),
        "array_max_tasks": _i(v.get("array_max_running")), "array_task_string": v.get("array_task_str") or "",
        "batch_features": "", "batch_flag": True, "batch_host": v.get("batch_host") or "", "flags": [], "burst_buffer": "",
        "burst_buffer_state": "", "cluster": cluster, "cluster_features": "", "command": v.get("command") or "",
        "comment": v.get("comment") or "", "container": "", "contiguous": False,
        "cpus_per_tres": "", "current_working_directory": v.get("workdir") or "", "deadline": 0,
        "delay_boot": 0, "dependency": v.get("dependency") or "",
        "derived_exit_code": _code(v.get("derived_exit_code")), "eligible_time": _i(v.get("eligible_time")),
        "end_time": _i(v.get("end_time")), "excluded_nodes": v.get("exc_node_list") or "",
        "exit_code": _code(v.get("exit_code")), "features": v.get("constraint") or "",
        "federation_origin": "", "federation_siblings_active": "", "federation_siblings_viable": "",
        "gres_detail": [v["gpus_str"]] if v.get("gpus_str") else [], "group_id": _i(v.get("gid")),
        "group_name": v.get("group") or "", "job_id": int(v["id"]), "job_state": v.get("state") or "",
        "licenses": "", "mcs_label": "", "memory_per_tres": v.get("mem_per_tres") or "",
        "name": v.get("name") or "", "nice": _i(v.get("nice")), "node_count": _i(v.get("nodes")),
        "nodes": v.get("node_list") or "", "partition": v.get("partition") or "",
        "priority": _i(v.get("priority")), "profile": [], "qos": v.get("qos") or "", "reboot": False,
        "requeue": bool(v.get("requeue")), "required_nodes": v.get("req_node_list") or "",
        "restart_cnt": _i(v.get("restarts")), "resv_name": "", "show_flags": [],
        "standard_error": v.get("stderr") or "", "standard_input": v.get("stdin") or "/dev/null",
        "standard_output": v.get("stdout") or "", "start_time": _i(v.get("start_time") or v.get("begin_time")),
        "state_description": "", "state_reason": v.get("reason") or "None",
        "submit_time": _i(v.get("submit_time")), "suspend_time": 0, "system_comment": "",
        "tasks": _i(v.get("ntasks")), "cpus": _i(v.get("cpus")), "tres_alloc_str": v.get("tres_alloc") or "",
        "tres_bind": "", "tres_freq": "", "tres_per_job": v.get("tres_per_job") or "",
        "tres_per_node": v.get("tres_per_node") or "", "tres_per_socket": "",
        "tres_per_task": v.get("tres_per_task") or "", "tres_req_str": v.get("tres_req") or "",
        "user_id": _i(v.get("uid")), "user_name": v.get("user") or "", "wckey": "",
        "accrue_time": _i(v.get("accrue_time")), "last_sched_evaluation": _i(v.get("last_sched_eval")),
        "preempt_time": _i(v.get("preempt_time")), "pre_sus_time": 0, "resize_time": 0,
        "het_job_id": 0, "het_job_id_set": "", "het_job_offset": 0,
    }
    limit = _minutes(v.get("time_limit_s"))
    return _put(out, array_task_id=v.get("array_task_id"), time_limit=limit,
                cpus_per_task=None if v.get("cpus_per_task") is None else str(v["cpus_per_task"]),
                memory_per_cpu=v.get("mem_per_cpu_mb"), memory_per_node=v.get("mem_per_node_mb"),
                minimum_cpus_per_node=v.get("min_cpus"), max_nodes=None,
                job_resources=_resources(v) if v.get("node_list") and v.get("state") == "RUNNING" else None)


def _resources(v: dict[str, Any]) -> dict[str, Any]:
    nodes = [n for n in str(v.get("node_list") or "").split(",") if n]
    return {"nodes": v.get("node_list") or "", "allocated_cpus": _i(v.get("cpus")), "allocated_hosts": _i(v.get("nodes")),
            "allocated_nodes": [{"nodename": n} for n in nodes]}


_NODE_STATES = {"IDLE": "idle", "MIXED": "mixed", "ALLOCATED": "allocated", "DOWN": "down", "DRAINED": "idle",
                "DRAINING": "mixed", "DRAIN": "idle", "COMPLETING": "mixed"}


def node(n: dict[str, Any]) -> dict[str, Any]:
    """A NODE_VIEW as `GET /slurm/v0.0.38/nodes` shows it (state lower case, DRAIN a flag)."""
    state = str(n.get("state") or "")
    base = state.split("+")[0]
    flags = ["DRAIN"] if "DRAIN" in state else []
    out = {
        "architecture": n.get("arch") or "", "burstbuffer_network_address": "", "boards": 1, "comment": "",
        "cores": _i(n.get("cores_per_socket") or n.get("cpus")), "cpu_binding": 0, "extra": "",
        "cpus": _i(n.get("cpus")), "features": ",".join(n.get("features") or []),
        "active_features": ",".join(n.get("features") or []), "gres": n.get("gres") or "",
        "gres_drained": "N/A", "gres_used": n.get("gres_used") or "", "mcs_label": "", "name": n["name"],
        "next_state_after_reboot": "invalid", "address": n["name"], "hostname": n["name"],
        "state": _NODE_STATES.get(base, base.lower()), "state_flags": flags, "next_state_after_reboot_flags": [],
        "operating_system": n.get("os") or "", "partitions": list(n.get("partitions") or []),
        "real_memory": _i(n.get("memory_mb")), "reason": n.get("reason") or "",
        "reason_changed_at": _i(n.get("reason_time")), "sockets": _i(n.get("sockets") or 1),
        "threads": _i(n.get("threads_per_core") or 1), "temporary_disk": _i(n.get("tmp_disk_mb")),
        "weight": _i(n.get("weight") or 1), "tres": n.get("cfg_tres") or "", "slurmd_version": n.get("version") or "",
        "alloc_memory": _i(n.get("memory_alloc_mb")), "alloc_cpus": _i(n.get("cpus_alloc")),
        "idle_cpus": max(0, _i(n.get("cpus")) - _i(n.get("cpus_alloc"))), "tres_used": n.get("alloc_tres") or "",
        "boot_time": _i(n.get("boot_time")), "slurmd_start_time": _i(n.get("start_time")),
        "last_busy": _i(n.get("last_busy_time")), "port": 6818,
    }
    return _put(out, free_memory=n.get("free_mem_mb"),
                cpu_load=None if n.get("cpu_load") is None else int(float(n["cpu_load"]) * 100),
                reason_set_by_user=n.get("reason_user") or None)


def partition(p: dict[str, Any]) -> dict[str, Any]:
    max_min = _minutes(p.get("max_time_s"))
    out = {
        "flags": ["default"] if p.get("default") else [],
        "preemption_mode": [str(p.get("preempt_mode") or "off").lower()], "allowed_allocation_nodes": "",
        "allowed_accounts": "", "allowed_groups": "", "allowed_qos": "", "alternative": "",
        "billing_weights": p.get("billing_weights") or "", "denied_accounts": "", "denied_qos": "",
        "preemption_grace_time": _i(p.get("grace_time_s")), "maximum_cpus_per_node": -1,
        "maximum_nodes_per_job": -1, "max_time_limit": -1 if max_min == UNLIMITED or max_min is None else max_min,
        "min_nodes_per_job": 0, "name": p["name"], "nodes": p.get("node_list") or ",".join(p.get("nodes") or []),
        "priority_job_factor": _i(p.get("priority_job_factor")), "priority_tier": _i(p.get("priority_tier") or 1),
        "qos": "", "state": p.get("state") or "UP", "total_nodes": len(p.get("nodes") or []),
        "tres": p.get("tres") or "",
    }
    return _put(out, default_time_limit=_minutes(p.get("default_time_s")))


def _tres_list(text: str | None) -> list[dict[str, Any]]:
    """"cpu=2,mem=4G,node=1,billing=6,gres/gpu=2" -> slurmdbd's [{"type", "name", "id", "count"}]."""
    out = []
    gres_id = 1001
    for item in (text or "").split(","):
        key, sep, val = item.partition("=")
        if not sep:
            continue
        count = _count(key, val)
        if key.startswith("gres/"):
            out.append({"type": "gres", "name": key[5:], "id": gres_id, "count": count})
            gres_id += 1
        else:
            out.append({"type": key, "name": "", "id": TRES_IDS.get(key, 0), "count": count})
    return out


def _count(key: str, val: str) -> int:
    """A TRES string's value as slurmdbd counts it (memory in MiB)."""
    mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    if key == "mem" and val and val[-1] in mult:
        return int(float(val[:-1]) * mult[val[-1]])
    try:
        return int(float(val))
    except ValueError:
        return 0


def _exit(text: str | None) -> dict[str, Any]:
    code, _, sig = (text or "0:0").partition(":")
    rc, signo = int(code or 0), int(sig or 0)
    if signo:
        return {"status": "SIGNALED", "return_code": rc, "signal": {"signal_id": signo}}
    return {"status": "SUCCESS" if rc == 0 else "FAILED", "return_code": rc}


def _secs(v: Any) -> dict[str, int]:
    s = float(v or 0)
    return {"seconds": int(s), "microseconds": int((s - int(s)) * 1e6)}


def db_job(row: dict[str, Any], steps: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    """An sacct job row (and its step rows) as `GET /slurmdb/v0.0.38/jobs` shows it."""
    jid = str(row.get("job_id_raw") or row.get("job_id"))
    base, _, task = str(row.get("job_id") or "").partition("_")
    state = str(row.get("state") or "").split(" ")[0]
    out: dict[str, Any] = {
        "account": row.get("account") or "", "cluster": cluster, "allocation_nodes": str(_i(row.get("nnodes"))),
        "array": {"job_id": int(base) if task and base.isdigit() else 0, "limits": {"max": {"running": {"tasks": 0}}}},
        "association": {"account": row.get("account") or "", "cluster": cluster, "user": row.get("user") or ""},
        "comment": {"job": row.get("comment") or ""}, "constraints": "", "derived_exit_code": _exit(
            row.get("derived_exit_code")), "exit_code": _exit(row.get("exit_code")), "flags": [],
        "group": row.get("group") or "", "het": {"job_id": 0}, "job_id": int(jid.split("_")[0].split(".")[0]),
        "name": row.get("name") or "", "mcs": {"label": ""},
        "nodes": row.get("node_list") or "None assigned", "partition": row.get("partition") or "",
        "priority": _i(row.get("priority")), "qos": row.get("qos") or "",
        "required": {"CPUs": _i(row.get("req_cpus") or row.get("ncpus")), "memory": _i(row.get("req_mem"))},
        "state": {"current": state, "reason": row.get("reason") or "None"},
        "time": {"elapsed": _i(row.get("elapsed_s")), "eligible": _i(row.get("eligible")), "end": _i(row.get("end")),
                 "start": _i(row.get("start")), "submission": _i(row.get("submit")), "suspended": 0,
                 "system": _secs(0), "total": _secs(row.get("total_cpu_s")), "user": _secs(0)},
        "tres": {"allocated": _tres_list(row.get("alloc_tres")), "requested": _tres_list(row.get("req_tres"))},
        "user": row.get("user") or "", "wckey": {"wckey": "", "flags": []},
        "working_directory": row.get("workdir") or "", "steps": [_step(s, base) for s in steps],
        "kill_request_user": "", "reservation": {"id": 0, "name": 0},  # the document: an integer
    }
    if task.isdigit():
        out["array"]["task_id"] = int(task)
        out["array"]["task"] = task
    limit = _minutes(row.get("time_limit_s"))
    if limit is not None:
        out["time"]["limit"] = limit
    return out


def _step(s: dict[str, Any], job_id: str) -> dict[str, Any]:
    name = str(s.get("job_id") or "").rpartition(".")[2]
    return {
        "nodes": {"count": _i(s.get("nnodes")), "range": s.get("node_list") or ""},
        "tres": {"allocated": _tres_list(s.get("alloc_tres"))},
        "time": {"elapsed": _i(s.get("elapsed_s")), "end": _i(s.get("end")), "start": _i(s.get("start")),
                 "suspended": 0, "system": _secs(0), "total": _secs(s.get("total_cpu_s")), "user": _secs(0)},
        "exit_code": _exit(s.get("exit_code")), "tasks": {"count": _i(s.get("ntasks") or 1)},
        "state": str(s.get("state") or "").split(" ")[0],
        "step": {"job_id": int(job_id.split(".")[0]) if job_id.split(".")[0].isdigit() else 0,
                 "id": name, "name": s.get("name") or name},
    }


def accounts(doc: dict[str, Any], cluster: str) -> list[dict[str, Any]]:
    """The accounts tree (`GET /v1/accounts?slurm=1`) as `dbv0.0.38_account`s, each with its
    associations (the account's own and one per user)."""
    users: dict[str, list[str]] = {}
    for u in doc.get("user") or []:
        users.setdefault(u["account"], []).append(u["name"])
    out = []
    for a in sorted(doc.get("account") or [], key=lambda a: a["name"]):
        assoc = [{"account": a["name"], "cluster": cluster}]
        assoc += [{"account": a["name"], "cluster": cluster, "user": u} for u in sorted(users.get(a["name"], []))]
        out.append({"associations": assoc, "coordinators": [], "description": a.get("description") or a["name"],
                    "name": a["name"], "organization": a.get("organization") or a["name"], "flags": []})
    return out


def associations(doc: dict[str, Any], cluster: str) -> list[dict[str, Any]]:
    """One `dbv0.0.38_association` per account and per (user, account)."""
    qos = list(doc.get("qos") or ["normal"])
    by_name = {a["name"]: a for a in doc.get("account") or []}
    out = []
    for a in sorted(by_name.values(), key=lambda a: a["name"]):
        item = {"account": a["name"], "cluster": cluster, "default": {"qos": ""}, "flags": [],
                "max": {"jobs": {"per": {}}, "tres": {"total": [], "per": {"job": [], "node": []}}, "per": {}},
                "min": {}, "shares_raw": _i(a.get("shares") if a.get("shares") is not None else 1),
                "priority": _i(a.get("priority")), "QOS": qos}
        if a.get("parent"):
            item["parent_account"] = a["parent"]
        out.append(item)
    for u in sorted(doc.get("user") or [], key=lambda u: (u["account"], u["name"])):
        shares = u.get("shares")
        out.append({"account": u["account"], "cluster": cluster, "user": u["name"], "default": {"qos": ""},
                    "flags": [], "max": {"jobs": {"per": {}}, "tres": {"total": [], "per": {"job": [], "node": []}},
                                         "per": {}},
                    "min": {}, "shares_raw": shares if isinstance(shares, int) else 1, "QOS": qos,
                    "is_default": bool(u.get("default"))})
    return out
