"""The reply half of the wire contract (`batchd/wire.py`): what each endpoint of
`batchd/api.py` answers with status 200, typed as `batchd/protocol.py` documents it
(JOB_VIEW, ACCT_ROW, NODE_VIEW, PARTITION_VIEW, ...).

Replies are not checked on the hot path; the tests check real replies of a running
daemon against these schemas (tests/e2e/test_hostile_socket.py, tests/wire/). Each view
names its documented keys with their types; the optional keys the commands read "when
present" are typed too, and a view may carry more keys (`unknown="allow"`), so a new
optional key never breaks an older command. Error replies have the envelope `ERROR`.
"""

from __future__ import annotations

from batchd.protocol import JOB_STATES_ACTIVE, JOB_STATES_FINAL
from batchd.wire import Bool, Either, Enum, Int, Json, List, Map, Num, Obj, Rule, Str

_BIG = 1 << 24
S = Str(_BIG, too_long=False)
S0 = Str(_BIG, null=True, too_long=False)
I0 = Int(null=True)
N = Num()
N0 = Num(null=True)
B = Bool(null=False)
NAT = Int(0)
TIME = Int(null=True)          # seconds, -1 UNLIMITED, None unset
STRS = List(S, max_items=_BIG)


def _view(fields: dict[str, Rule], required: tuple[str, ...]) -> Obj:
    return Obj(fields, required=required, unknown="allow")


JOB_VIEW = _view({
    "id": Int(1), "array_job_id": I0, "array_task_id": I0, "array_task_str": S0, "display_id": S,
    "array_max_running": I0, "name": S, "user": S, "uid": NAT, "gid": NAT, "group": S, "account": S,
    "partition": S, "qos": S, "state": Enum(*JOB_STATES_ACTIVE, *JOB_STATES_FINAL), "reason": S,
    "priority": Int(), "nice": Int(), "submit_time": N, "eligible_time": N0, "start_time": N0, "end_time": N0,
    "time_limit_s": TIME, "run_time_s": NAT, "nodes": NAT, "node_list": S, "ntasks": NAT, "cpus": NAT,
    "mem_mb": NAT, "tres_req": S, "tres_alloc": S,
    "gres": Map(S, List(Either(NAT, S), max_items=_BIG)), "gpus_str": S, "cpu_ids": Map(S, S),
    "workdir": S, "stdout": S, "stderr": S, "stdin": S, "command": S, "dependency": S0, "requeue": B,
    "restarts": NAT, "exit_code": S, "derived_exit_code": S, "comment": S0, "batch_host": S0,
    "req_node_list": S0, "exc_node_list": S0,
    "start_estimate": N0, "begin_time": N0, "hold": Bool(), "submit_host": S0, "cluster": S0,
    "mem_per_cpu_mb": I0, "mem_per_node_mb": I0, "tres_per_node": S0, "tres_per_job": S0, "tres_per_task": S0,
    "mem_per_tres": S0, "min_cpus": NAT, "cpus_per_task": NAT, "accrue_time": N0, "last_sched_eval": N0,
    "preempt_time": N0, "alloc_node": S0, "alloc_sid": I0, "constraint": S0,
}, ("id", "display_id", "name", "user", "uid", "gid", "account", "partition", "qos", "state", "reason",
    "priority", "nice", "submit_time", "time_limit_s", "run_time_s", "nodes", "node_list", "ntasks", "cpus",
    "mem_mb", "tres_req", "tres_alloc", "workdir", "stdout", "stderr", "requeue", "restarts", "exit_code"))

ACCT_ROW = _view({
    "job_id": S, "job_id_raw": S, "name": S0, "user": S0, "uid": I0, "gid": I0, "group": S0, "account": S0,
    "partition": S0, "qos": S0, "state": S, "exit_code": S0, "derived_exit_code": S0, "submit": N0,
    "eligible": N0, "start": N0, "end": N0, "elapsed_s": NAT, "time_limit_s": TIME, "alloc_tres": S0,
    "req_tres": S0, "node_list": S0, "nnodes": I0, "ncpus": I0, "ntasks": I0, "restarts": I0, "workdir": S0,
    "comment": S0, "reason": S0, "priority": I0, "alloc_cpus": I0, "req_mem": Num(0, null=True),
    "billing": Num(0, null=True), "cancelled_by": I0, "req_cpus": I0, "submit_line": S0, "flags": S0,
    "cluster": S0, "total_cpu_s": Num(0, null=True), "max_rss_kb": I0, "step": S0,
}, ("job_id", "job_id_raw", "state", "elapsed_s"))

NODE_VIEW = _view({
    "name": S, "state": S, "reason": S0, "cpus": NAT, "cpus_alloc": NAT, "memory_mb": NAT,
    "memory_alloc_mb": NAT, "gres": S, "gres_used": S, "partitions": STRS, "features": STRS,
    "gpus": Json(), "heartbeat": N0, "sockets": I0, "cores_per_socket": I0, "threads_per_core": I0,
    "free_mem_mb": I0, "cpu_load": N0, "os": S0, "arch": S0, "version": S0, "boot_time": N0, "start_time": N0,
    "last_busy_time": N0, "cfg_tres": S0, "alloc_tres": S0, "reason_user": S0, "reason_time": N0,
    "tmp_disk_mb": I0, "weight": I0,
}, ("name", "state", "cpus", "cpus_alloc", "memory_mb", "memory_alloc_mb", "gres", "gres_used", "partitions"))

PARTITION_VIEW = _view({
    "name": S, "default": B, "nodes": STRS, "node_list": S0, "max_time_s": Int(-1), "default_time_s": I0,
    "state": S, "priority_job_factor": Int(), "preempt_mode": S0, "grace_time_s": I0, "priority_tier": I0,
    "tres": S0, "billing_weights": S0,
}, ("name", "default", "nodes", "max_time_s", "state"))

DONE = _view({"done": STRS, "errors": List(_view({"id": S, "message": S}, ("id", "message")), max_items=_BIG)},
             ("done", "errors"))
ERROR = Obj({"error": Obj({"code": S, "message": S, "exit": Int(0, 255), "detail": S},
                          required=("code", "message", "exit"))},
            required=("error",))
FREE = Obj({}, unknown="allow")

REPLIES: dict[tuple[str, str], Rule] = {
    ("GET", "/v1/ping"): _view({"cluster": S, "version": S}, ("cluster", "version")),
    ("POST", "/v1/jobs"): _view({"job_id": Int(1, null=True), "array_task_ids": List(NAT, null=True,
                                                                                     max_items=_BIG),
                                 "start_time": N0, "nodes": S0, "partition": S0, "cpus": I0}, ("job_id",)),
    ("GET", "/v1/jobs"): _view({"jobs": List(JOB_VIEW, max_items=_BIG)}, ("jobs",)),
    ("POST", "/v1/jobs/signal"): DONE,
    ("POST", "/v1/jobs/hold"): DONE,
    ("POST", "/v1/jobs/release"): DONE,
    ("POST", "/v1/jobs/requeue"): DONE,
    ("POST", "/v1/jobs/update"): DONE,
    ("GET", "/v1/accounting"): _view({"records": List(ACCT_ROW, max_items=_BIG)}, ("records",)),
    ("GET", "/v1/nodes"): _view({"nodes": List(NODE_VIEW), "partitions": List(PARTITION_VIEW)},
                                ("nodes", "partitions")),
    ("GET", "/v1/snapshot"): _view({"nodes": List(FREE), "accounts": List(FREE), "jobs": List(FREE, max_items=_BIG)},
                                   ("nodes", "accounts", "jobs")),
    ("POST", "/v1/steps"): _view({"job_id": Int(1), "step_id": NAT,
                                  "tasks": List(_view({"procid": NAT, "node": S}, ("procid", "node")))},
                                 ("job_id", "step_id", "tasks")),
    ("GET", "/v1/steps"): Either(
        _view({"tasks": List(_view({"procid": NAT, "node": S, "state": S, "exit_code": I0, "exit_signal": I0},
                                   ("procid", "node", "state")))}, ("tasks",)),
        _view({"steps": List(_view({"job_id": Int(1), "step_id": NAT, "name": S, "node_list": S, "ntasks": NAT,
                                    "start_time": N0, "state": S}, ("job_id", "step_id", "state")))},
              ("steps",))),
    ("POST", "/v1/steps/cancel"): _view({"cancelled": NAT}, ("cancelled",)),
    ("GET", "/v1/why"): _view({"lines": STRS}, ("lines",)),
    ("GET", "/v1/controller"): _view({"node": S0, "pid": I0, "since": N0}, ()),
    ("POST", "/v1/nodes/state"): _view({"node": S, "state": S}, ("node", "state")),
    ("GET", "/v1/accounts"): _view({"account": List(_view({"name": S}, ("name",))),
                                    "user": List(_view({"name": S, "account": S}, ("name", "account")))},
                                   ("account",)),
    ("POST", "/v1/accounts/apply"): _view({"changes": STRS, "applied": B}, ("changes", "applied")),
    ("POST", "/v1/accounts/modify"): _view({"changes": STRS, "applied": B}, ("changes", "applied")),
    ("GET", "/v1/report"): _view({"period": FREE, "currency": S, "rows": List(FREE, max_items=_BIG),
                                  "totals": FREE, "reconciled": B}, ("period", "rows", "totals")),
    ("GET", "/v1/prices"): _view({"prices": List(FREE), "currency": S}, ("prices", "currency")),
    ("POST", "/v1/prices"): _view({"added": NAT}, ("added",)),
    ("GET", "/v1/eff"): _view({"job": FREE, "runs": List(FREE), "efficiency": Json(), "summary": Json()},
                              ("job", "runs")),
    ("POST", "/v1/rollup"): _view({"rolled": NAT}, ("rolled",)),
}
