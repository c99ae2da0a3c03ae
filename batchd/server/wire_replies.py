"""The reply half of the wire contract (`batchd/server/wire.py`): what each endpoint of
`batchd/server/api.py` answers with status 200, typed as `batchd/protocol.py` documents it
(JOB_VIEW, ACCT_ROW, NODE_VIEW, PARTITION_VIEW, ...); each rule is built from its reply
shape in `batchd/server/messages.py` (`batchd.server.wire.shaped`: the same keys, the same required ones).

Replies are not checked on the hot path; the tests check real replies against these
schemas and their shapes (tests/wire/test_protocol.py in-process, tests/e2e/test_hostile_socket.py
from a running daemon). Each view names its documented keys with their types; the optional
keys the commands read "when present" are typed too, and a view may carry more keys
(`unknown="allow"`), so a new optional key never breaks an older command. Error replies
have the envelope `ERROR`.
"""

from __future__ import annotations

from typing import Any

from batchd.protocol import JOB_STATES_ACTIVE, JOB_STATES_FINAL
from batchd.server import messages as m
from batchd.server.wire import Bool, Either, Enum, Int, Json, List, Map, Num, Obj, Rule, Str, shaped

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


def _view(shape: Any, fields: dict[str, Rule]) -> Obj:
    return shaped(shape, fields, unknown="allow")


JOB_VIEW = _view(m.JobView, {
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
})

ACCT_ROW = _view(m.AcctRow, {
    "job_id": S, "job_id_raw": S, "name": S0, "user": S0, "uid": I0, "gid": I0, "group": S0, "account": S0,
    "partition": S0, "qos": S0, "state": S, "exit_code": S0, "derived_exit_code": S0, "submit": N0,
    "eligible": N0, "start": N0, "end": N0, "elapsed_s": NAT, "time_limit_s": TIME, "alloc_tres": S0,
    "req_tres": S0, "node_list": S0, "nnodes": I0, "ncpus": I0, "ntasks": I0, "restarts": I0, "workdir": S0,
    "comment": S0, "reason": S0, "priority": I0, "alloc_cpus": I0, "req_mem": Num(0, null=True),
    "billing": Num(0, null=True), "cancelled_by": I0, "req_cpus": I0, "submit_line": S0, "flags": S0,
    "cluster": S0, "total_cpu_s": Num(0, null=True), "max_rss_kb": I0, "step": S0,
})

NODE_VIEW = _view(m.NodeView, {
    "name": S, "state": S, "reason": S0, "cpus": NAT, "cpus_alloc": NAT, "memory_mb": NAT,
    "memory_alloc_mb": NAT, "gres": S, "gres_used": S, "partitions": STRS, "features": STRS,
    "gpus": Json(), "heartbeat": N0, "sockets": I0, "cores_per_socket": I0, "threads_per_core": I0,
    "free_mem_mb": I0, "cpu_load": N0, "os": S0, "arch": S0, "version": S0, "boot_time": N0, "start_time": N0,
    "last_busy_time": N0, "cfg_tres": S0, "alloc_tres": S0, "reason_user": S0, "reason_time": N0,
    "tmp_disk_mb": I0, "weight": I0,
})

PARTITION_VIEW = _view(m.PartitionView, {
    "name": S, "default": B, "nodes": STRS, "node_list": S0, "max_time_s": Int(-1), "default_time_s": I0,
    "state": S, "priority_job_factor": Int(), "preempt_mode": S0, "grace_time_s": I0, "priority_tier": I0,
    "tres": S0, "billing_weights": S0,
})

DONE = _view(m.DoneReply, {"done": STRS, "errors": List(_view(m.JobError, {"id": S, "message": S}),
                                                         max_items=_BIG)})
FREE = Obj({}, unknown="allow")  # a free-form object (the snapshot's parts, a report's rows)
FREES = List(FREE, max_items=_BIG)
ACCOUNT_VIEW = _view(m.AccountView, {"name": S, "parent": S0, "priority": Int(), "shares": Int(0),
                                     "resources": Map(S, Map(S, N)), "policy": Json()})
USER_VIEW = _view(m.UserView, {"name": S, "account": S, "shares": Either(Int(0), Enum("parent")), "default": B,
                               "policy": Json()})
CHANGES = _view(m.ApplyReply, {"changes": STRS, "applied": B})
ERROR = Obj({"error": Obj({"code": S, "message": S, "exit": Int(0, 255), "detail": S},
                          required=("code", "message", "exit"))},
            required=("error",))

REPLIES: dict[tuple[str, str], Rule] = {
    ("GET", "/v1/ping"): _view(m.Ping, {"cluster": S, "version": S}),
    ("POST", "/v1/jobs"): _view(m.SubmitReply, {
        "job_id": Int(1, null=True), "array_task_ids": List(NAT, null=True, max_items=_BIG), "duplicate": B,
        "start_time": N0, "nodes": S0, "partition": S0, "cpus": I0}),
    ("GET", "/v1/jobs"): _view(m.JobsReply, {
        "jobs": List(JOB_VIEW, max_items=_BIG),
        "task_runs": List(_view(m.TaskRunView, {"view": JOB_VIEW, "tasks": List(List(NAT, max_items=3),
                                                                                  max_items=_BIG)}),
                          max_items=_BIG)}),
    ("POST", "/v1/jobs/signal"): DONE,
    ("POST", "/v1/jobs/hold"): DONE,
    ("POST", "/v1/jobs/release"): DONE,
    ("POST", "/v1/jobs/requeue"): DONE,
    ("POST", "/v1/jobs/update"): DONE,
    ("GET", "/v1/accounting"): _view(m.AccountingReply, {"records": List(ACCT_ROW, max_items=_BIG),
                                                          "pending_tasks": Map(S, List(NAT, max_items=_BIG))}),
    ("GET", "/v1/nodes"): _view(m.NodesReply, {"nodes": List(NODE_VIEW), "partitions": List(PARTITION_VIEW)}),
    ("GET", "/v1/snapshot"): _view(m.SnapshotReply, {
        "version": Int(1), "now": N, "policy": FREE, "cluster": S, "partitions": FREES, "nodes": FREES,
        "accounts": FREES, "users": FREES, "usage": FREE, "jobs": FREES, "qos": FREES}),
    ("POST", "/v1/steps"): _view(m.StepReply, {"job_id": Int(1), "step_id": NAT,
                                              "tasks": List(_view(m.StepTask, {"procid": NAT, "node": S}))}),
    ("GET", "/v1/steps"): Either(
        _view(m.StepTasksReply, {"tasks": List(_view(m.StepTaskState, {
            "procid": NAT, "node": S, "state": S, "exit_code": I0, "exit_signal": I0}))}),
        _view(m.ActiveStepsReply, {"steps": List(_view(m.ActiveStep, {
            "job_id": Int(1), "step_id": NAT, "name": S, "node_list": S, "ntasks": NAT, "start_time": N0,
            "state": S}))})),
    ("POST", "/v1/steps/cancel"): _view(m.StepCancelReply, {"cancelled": NAT}),
    ("GET", "/v1/why"): _view(m.WhyReply, {"job": Int(1), "lines": STRS}),
    ("GET", "/v1/controller"): _view(m.ControllerReply, {"node": S0, "pid": I0, "since": N0, "host": S0,
                                                         "this_node": S, "this_is_controller": B}),
    ("POST", "/v1/nodes/state"): _view(m.NodeStateReply, {"node": S, "state": S}),
    ("POST", "/v1/token"): _view(m.TokenReply, {"token": S, "user": S, "expires": NAT}),
    ("GET", "/v1/accounts"): _view(m.AccountsReply, {
        "account": List(ACCOUNT_VIEW), "user": List(USER_VIEW), "cluster": S, "qos": STRS, "qos_info": FREES,
        "admins": STRS, "gpu_types": STRS}),
    ("POST", "/v1/accounts/apply"): CHANGES,
    ("POST", "/v1/accounts/modify"): CHANGES,
    ("GET", "/v1/report"): _view(m.ReportReply, {
        "period": FREE, "currency": S, "rate_card": FREES, "group_by": STRS, "rows": FREES, "user_rows": FREES,
        "idle_gpu_hours": N0, "idle_cost": S0, "capacity_gpu_hours": N, "down_gpu_hours": N, "down_cost": S,
        "totals": FREE, "jobs_cost": S, "reconciled": B, "running_included": NAT, "flags": FREES,
        "daily": Map(S, Map(S, N)), "capacity": Json(), "cluster": S, "scope": Enum("all", "member_accounts"),
        "budgets": FREES}),
    ("GET", "/v1/prices"): _view(m.PricesReply, {"prices": List(_view(m.PriceView, {
        "tres": S, "per_hour": S, "currency": S, "valid_from": N, "valid_to": N0})), "currency": S}),
    ("POST", "/v1/prices"): _view(m.AddedReply, {"added": NAT}),
    ("GET", "/v1/eff"): _view(m.EffReply, {"cluster": S, "job": FREE, "now": N, "zero_gpu_flag_s": N,
                                           "runs": FREES, "efficiency": Json(), "summary": Json()}),
    ("POST", "/v1/rollup"): _view(m.RollupReply, {"rolled": NAT}),
}
