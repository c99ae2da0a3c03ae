"""The wire protocol shared by the daemon (`batchd/server/api.py`) and the commands (`cli/`):
the table of endpoints (`ENDPOINTS`), and the messages in prose.

This module is imported by the Slurm-named commands, so it must stay cheap: it imports
nothing (the message shapes as types are `batchd/server/messages.py`, daemon side). Every
message is a JSON object; the keys below are the contract. Times are unix seconds (float), durations are seconds (int) with
`None` meaning "not set" and `-1` meaning UNLIMITED, memory is MiB.

Transport
---------
HTTP/1.1 over the daemon's Unix socket, paths under `/v1/`. The daemon learns the
caller's uid/gid from SO_PEERCRED. Every error reply has the envelope

    {"error": {"code": "InvalidAccount", "message": "Invalid account or account/partition combination specified", "exit": 1}}

and an HTTP status >= 400. `message` is printed by the command as `<prog>: error: <message>`
(sbatch prints `sbatch: error: Batch job submission failed: <message>` for submit
rejections, as Slurm does); `exit` is the exit code Slurm uses for that case. An optional
`"detail"` is batchd's own explanation (which GPU types exist, the most CPUs a node has); the
command prints it as a further `<prog>: error: <detail>` line after Slurm's.

Checked at the door: every request is checked against its route's schema
(`batchd/server/wire_requests.py`, daemon side only; the rules engine is `batchd/server/wire.py`)
before the service sees it. A violation is a 400 `InvalidRequest` whose message names the
field path and the rule, `spec.cpus_per_task: must be an integer >= 1 (got -8)`; a field
over its size cap starts with Slurm's `Pathname of a file, directory or other parameter too
long (spec.script: must be at most 4194304 bytes (it has 5242890))`. The rules, in short:
integers are JSON integers (not bools, not floats, not strings), counts >= 1 (sizes >= 0)
and at most 1,000,000 (memory 2^40 MiB); time limits > 0, -1 UNLIMITED or null; nice within
+/-2147483645; signals 1..SIGRTMAX (0..SIGRTMAX for /v1/jobs/signal, where 0 and null
cancel); strings are strings, valid Unicode, without NUL; names/accounts/comments <= 1024
bytes, paths <= 4096; the script <= `[limits] max_script_bytes` (4 MiB), the environment and
the arguments <= `max_env_bytes` (1 MiB) each, a host list <= `max_hostlist_names` (10,000)
names; a body is a JSON object (NaN and Infinity are not JSON). Unknown keys are refused,
except in JOB_SPEC and the submit body, where keys this daemon does not know may carry a
scalar (null, bool, number, string <= 1024 bytes; at most 32), so that a newer command
works with an older daemon; query keys a route does not name are ignored. The replies'
schemas (`batchd/server/wire_replies.py`) are checked by the tests against a running daemon.

The transport (`batchd/server/httpserver.py`, limits in the config's `[limits]`) answers before any
route: 408 `RequestTimeout` when a connection has not sent its whole request within
`request_timeout_s`, 400 for a malformed head, 411 for a chunked body, 413 when
Content-Length exceeds `max_request_bytes`, 431 for a head over 64 KiB, and 503
`TooManyConnections` when the caller holds `max_connections_per_user` connections or the
daemon `max_connections` (the commands retry a refused connect and this 503 for up to 5 s).

Database errors are a 503 with the cause: `DiskFull` (no space left on device),
`DatabaseBusy` (a lock was not granted in time), `DatabaseConflict` (a concurrent writer
took a key), `DatabaseUnavailable` (unreachable); in each case nothing was changed.

Endpoints
---------
`ENDPOINTS` below is the table of every endpoint: method, path, the handler of
`batchd/server/api.py`'s ROUTES, the shapes of its query, body and reply (TypedDicts of
`batchd/server/messages.py`, which the request rules of `batchd/server/wire_requests.py` and the reply
rules of `batchd/server/wire_replies.py` are built from), and who may call it: ANYONE (any local
user), OWNER (a job's owner, or an administrator; for anyone else the job is refused:
`Access/permission denied`, scontrol update's `Invalid user id`), ADMIN (root, the admin
group; anyone else gets 403 AccessDenied). tests/wire/test_protocol.py holds the table to
the routes api.py registers, both ways, and the shapes to real replies. In short:

GET  /v1/ping                 -> Ping {cluster, version}
POST /v1/jobs                 SubmitRequest {"spec": JOB_SPEC} -> SubmitReply {"job_id": int, "array_task_ids":
                              [int] | None}, plus "duplicate": true when spec["submit_token"] names a
                              submission this uid already stored (its ids are returned, nothing is stored);
                              with spec["test_only"]: {"job_id": None, "start_time", "nodes", "partition",
                              "cpus"} (nothing stored). --uid/--gid (spec "uid"/"gid"): root only
GET  /v1/jobs?JobsQuery       -> {"jobs": [JOB_VIEW]}; query keys (all optional, lists comma separated): ids
                              (job ids or `123_4` array tasks), users, accounts, partitions, states, names,
                              qos; `all=1` also returns finished jobs still in memory (squeue shows only
                              PENDING/RUNNING/...); `nodes=HOSTLIST` only jobs allocated one of these nodes;
                              `fold=1` the pending tasks of a job array as one JOB_VIEW (squeue without -r):
                              array_task_id null, array_task_str `[0-3,7%2]`, display_id `123_[0-3,7%2]`,
                              the rest the lowest task's, placed where its lowest job id would be;
                              `fold=runs` (squeue -r): the pending array tasks that never ran are
                              not in "jobs" but in "task_runs": [TaskRunView {"view": JOB_VIEW,
                              "tasks": [[job id, task id, count]]}], runs of alike tasks whose views
                              differ only in id, array_task_id and display_id (the command expands them);
                              `keys=k1,k2,...` every JOB_VIEW (a run's too) carries only those keys
                              (squeue asks for what its layout reads).
POST /v1/jobs/signal          OWNER. SignalRequest {"ids": [str], "filters": {users, accounts, names,
                              states, partitions, qos}, "signal": int | None, "batch_only": bool} (filters
                              narrow the given ids, or select jobs when ids is empty, a non-admin's own
                              only; scancel -w resolves nodes to ids itself); signal None = cancel
                              -> DoneReply {"done": [str], "errors": [{"id", "message"}]}
POST /v1/jobs/hold            OWNER. {"ids": [str], "user": bool} -> DoneReply; "user": true = `scontrol
                              uhold` (JobHeldUser even for an admin; an admin's hold of another's job is
                              JobHeldAdmin, which only an admin releases)
POST /v1/jobs/release         OWNER. {"ids": [str]} -> DoneReply
POST /v1/jobs/requeue         OWNER. {"ids": [str], "hold": bool} -> DoneReply; "hold": true = `scontrol
                              requeuehold` (requeued held, reason "job requeued in held state")
POST /v1/jobs/update          OWNER. {"ids": [str], "changes": {"time_limit_s", "nice", "account", "name",
                              "comment", "partition", "qos", "begin_time", "nodelist", "exclude"}} ->
                              DoneReply ("begin_time": unix seconds, `scontrol update StartTime=`); a
                              negative nice and a longer time limit are an administrator's; a partition or
                              QOS that does not exist, or an account the job's user may not use, is a per-job
                              error with Slurm's words ("Invalid partition name specified", "Invalid qos
                              specification")
GET  /v1/accounting?AccountingQuery -> {"records": [ACCT_ROW]}; query: ids, users, accounts, states, names,
                              partitions, qos, start, end (unix), all_users=1, duplicates=1 (without ids or
                              users a user sees their own jobs, root all)
GET  /v1/nodes                -> {"nodes": [NODE_VIEW], "partitions": [PARTITION_VIEW]}
GET  /v1/snapshot             -> the scheduler snapshot of docs/snapshot.md (plus "users", "usage",
                              "qos", "partitions"); `batchd plan --dump`, sshare and sprio compute from it
POST /v1/steps                OWNER. StepRequest {"job_id", "argv": [str], "ntasks": int | None, "nodes":
                              int | None, "env": {str: str}, "cwd": str} (srun inside a job) -> {"job_id",
                              "step_id", "tasks": [{"procid", "node"}]}
GET  /v1/steps?job_id=&step_id= -> {"tasks": [{"procid", "node", "state", "exit_code", "exit_signal"}]};
                              without both: {"steps": [{job_id, step_id, name, node_list, ntasks,
                              start_time, state}]}, every step still pending or running (squeue -s)
POST /v1/steps/cancel         OWNER. {"job_id", "step_id"} -> {"cancelled": int}
GET  /v1/why?job=ID           -> {"job": int, "lines": [str]} (`batchd why`: what a job waits for)
GET  /v1/controller           -> {"node", "pid", "since", "host", "this_node", "this_is_controller"}: who
                              holds the controller role
POST /v1/nodes/state          ADMIN. {"node", "action": "drain" | "resume" | "down", "reason"} -> {"node",
                              "state"}; drain and down need a reason (audited)
POST /v1/token                {"lifespan": seconds | null, "username": str | null} -> {"token", "user",
                              "expires"}: a JWT for the slurmrestd API (`scontrol token`); another
                              user's only for an administrator (batchd/server/tokens.py)
GET  /v1/accounts[?slurm=1]   -> the accounts file of the tree {"account": [...], "user": [...]}; slurm=1
                              adds "cluster", "qos", "qos_info", "admins", "gpu_types" (sacctmgr)
POST /v1/accounts/apply       ADMIN. {"doc": ACCOUNTS_FILE, "dry_run": bool} -> {"changes": [str],
                              "applied": bool} (`batchd apply`; batchd/server/accounts.py)
POST /v1/accounts/modify      ADMIN. {"op": "account.add" | ... | "user.remove", "name", ...} -> as apply
                              (`batchd account ...`, `batchd user ...`, sacctmgr)
GET  /v1/report?ReportQuery   -> the report of docs/report.md (batchd/accounting/routes.py); a
                              non-admin sees the accounts they are a member of, without idle capacity;
                              spread_idle=1 is an administrator's
GET  /v1/prices               -> {"prices": [{tres, per_hour, currency, valid_from, valid_to}], "currency"}
POST /v1/prices               ADMIN. {"prices": [{tres, per_hour, currency, valid_from, valid_to}]} ->
                              {"added": int}
GET  /v1/eff?job=ID           -> {"job": {...}, "runs": [...], "efficiency": {...} | None, "summary", ...}
POST /v1/rollup               ADMIN. {} -> {"rolled": int}: roll usage up now instead of at the timer

JOB_SPEC (what sbatch/bsub send; built by cli/slurmopts.py, checked by batchd/server/jobspec.py)
---------------------------------------------------------------------------------------
name: str                 job name (-J); default: script file name, "wrap" for --wrap, "sbatch" for stdin
script: str               the script text (for --wrap: "#!/bin/sh\\n# This script was created by sbatch --wrap.\\n\\nCMD\\n")
script_path: str | None   path as given on the command line (for %x / name)
argv: [str]               arguments after the script
workdir: str              absolute; -D/--chdir resolved against the submit dir
submit_dir: str           absolute cwd of sbatch
environment: {str: str}   the environment the job gets before SLURM_* are added (after --export)
export: str               the raw --export value ("ALL" default)
account, partition, qos, comment, reservation, constraint: str | None
time_limit_s: int | None  None = partition default; -1 UNLIMITED
time_min_s: int | None
nodes_min, nodes_max: int | None
ntasks: int | None; ntasks_per_node: int | None; cpus_per_task: int | None
mem_mb: int | None (per node); mem_per_cpu_mb, mem_per_gpu_mb: int | None
gres: [{"name": "gpu"|"shard", "type": str | None, "count": int}]   per node (--gres)
gpus: {"type": str | None, "count": int} | None                      total (--gpus / -G)
gpus_per_node, gpus_per_task: {"type", "count"} | None
cpus_per_gpu: int | None
output, error, input: str | None   raw patterns (%j ...)
open_mode: "truncate" | "append"
array: str | None         raw --array value, e.g. "0-15:4%2"
dependency: str | None    raw --dependency value
begin_time: float | None
hold: bool; nice: int; requeue: bool | None; exclusive: bool
signal: {"signal": int, "time_s": int, "batch_only": bool} | None
mail_type, mail_user: ignored but stored
test_only: bool
submit_token: str | None  client-made, 1-64 of [A-Za-z0-9_-] (sbatch/bsub: 32 hex digits per call);
                          a retry after a lost reply sends the same token and gets the same job
uid, gid: int | None      sbatch --uid/--gid: only a root caller may send them; the job runs and
                          is charged as that user
wait: bool                sbatch -W (the command then polls the job)
lsf: bool                 submitted by bsub (only changes messages)
Added by sbatch (cli/sbatch.py, cli/sbatch_opts.py; the option parser is cli/options.py):
unnamed: bool             no name given and the script came from stdin: the job is named "sbatch"
                          but, as in Slurm, gets no SLURM_JOB_NAME
submit_host: str          short host name of the submitting machine (SLURM_SUBMIT_HOST)
wrap: bool; parsable: bool; clusters: str | None (-M, only echoed by --parsable)
nodelist, exclude: str | None   -w / -x, raw
gres items are {"name": "gpu"|"shard"|..., "type": str | None, "count": int}; gpus* accept one
  type only. Resolved by batchd/server/jobspec.py (`resolve`), job environment by batchd/node/jobenv.py,
  --array by batchd/slurm/arrayspec.py, --dependency by batchd/slurm/dependency.py.
Submit rejections use these error codes (sbatch prints an extra Slurm line for the first two):
  InvalidPartition, MemoryNotSatisfiable, NodeConfigUnavailable, InvalidAccount, InvalidQOS,
  InvalidGres, InvalidTimeLimit, InvalidNodeCount, InvalidArray, DependencyProblem.

JOB_VIEW (squeue, scontrol show job, bjobs)
-------------------------------------------
id: int; array_job_id: int | None; array_task_id: int | None; array_task_str: str | None
  (for a pending array master: "[4-7%2]"); display_id: str ("123_4", "123_[4-7]" or "123")
name, user, uid, gid, group, account, partition, qos, state, reason: str
priority: int; nice: int; submit_time, eligible_time, start_time, end_time: float | None
time_limit_s: int | None (-1 UNLIMITED); run_time_s: int
nodes: int; node_list: str; ntasks: int; cpus: int; mem_mb: int
tres_req, tres_alloc: str (Slurm's "cpu=2,mem=4G,node=1,billing=6,gres/gpu=2")
gres: {node: [gpu indices]} ; gpus_str: "gpu:h200:2(IDX:0-1)"
workdir, stdout, stderr, command: str; dependency: str | None; requeue: bool; restarts: int
req_node_list, exc_node_list: str | None   -w / -x as given (scontrol's ReqNodeList/ExcNodeList)
  (dependency as squeue %E / scontrol print it: one item per job with its status,
  "afterany:63(unfulfilled),afterany:65(failed)", "singleton(unfulfilled)"; None once satisfied)
exit_code: str ("0:0"); derived_exit_code: str; comment: str | None; batch_host: str | None
start_estimate: float | None (squeue --start)
begin_time: float | None  --begin / after-requeue hold-off; a pending job shows it as its start time
Optional keys the commands print when present (fallbacks in brackets):
mem_per_cpu_mb / mem_per_node_mb: int | None   the memory request as given or defaulted, one of
  them set (squeue %m, scontrol MinMemoryCPU=/MinMemoryNode=) [mem_mb as MinMemoryNode]
tres_per_node, tres_per_job: str | None   Slurm's "gres:gpu:h200:2" for --gres / --gpus (squeue
  %b and -O tres-per-node/-job, scontrol TresPerNode=/TresPerJob=) [N/A]
tres_per_task: str | None  "gres:gpu:1" for --gpus-per-task (scontrol TresPerTask=) [not printed]
mem_per_tres: str | None  "gres:gpu:8192" for --mem-per-gpu (scontrol MemPerTres=)
array_max_running: int | None   the array's %N throttle (squeue 123_[0-9%2])
min_cpus, cpus_per_task: int   scontrol MinCPUsNode= / CPUs/Task= [cpus / nodes, cpus / ntasks]
cpu_ids: {node: "3-6"}    scontrol -d CPU_IDs=
accrue_time, last_sched_eval, preempt_time: float | None   scontrol AccrueTime=, LastSchedEval=,
  PreemptTime= [eligible_time once evaluated, submit_time, None]
alloc_node: str, alloc_sid: int   scontrol AllocNode:Sid= (submit host and sbatch's session id)
constraint: str | None (scontrol Features=); stdin: str (scontrol StdIn=) [/dev/null]
Array jobs: every task is its own JOB_VIEW (id = its own job id, array_job_id = the master id,
array_task_id = the index; the last task keeps the master id, the others take the ids after it).
The daemon never collapses them: squeue and scontrol collapse the PENDING tasks of one array into
one `123_[4-7]` record (unless squeue -r), showing the lowest task's reason, as Slurm shows its
one master record; sacct does the same for pending task rows.

ACCT_ROW (sacct): one row per job run and per step ("batch", "extern")
------------------------------------------------------------------------
job_id: str ("123", "123.batch", "123_4"), job_id_raw: str, name, user, uid, group, account, partition,
qos, state, exit_code ("0:0"), derived_exit_code, submit, eligible, start, end: float | None,
elapsed_s: int, time_limit_s, alloc_tres, req_tres: str, node_list, nnodes, ncpus, ntasks,
restarts, workdir, comment, reason, priority, alloc_cpus, req_mem, billing: int
state may read "CANCELLED by <uid>" (or give the uid in the optional cancelled_by: int | None);
req_mem is MiB (printed as 1G / 1500M). Step rows may repeat the job's fields: sacct blanks
User, Partition, QOS, Timelimit, ReqMem, ReqTRES, WorkDir, Reason on them as Slurm does.
Optional: gid, req_cpus, submit_line, flags, cluster; total_cpu_s: float (user + system CPU of
the run, on its job and batch rows: sacct TotalCPU); max_rss_kb: int (peak resident memory of the
run, on its batch row: sacct MaxRSS/AveRSS).

NODE_VIEW (sinfo, scontrol show node)
-------------------------------------
name, state ("IDLE", "MIXED", "ALLOCATED", "DRAINED", "DOWN", ...), reason, cpus, cpus_alloc,
memory_mb, memory_alloc_mb, gres ("gpu:h200:4"), gres_used ("gpu:h200:2(IDX:0-1)"),
partitions: [str], features: [str]
Optional (sinfo -N -l / -O, scontrol show node): sockets, cores_per_socket, threads_per_core: int
[1, cpus, 1]; free_mem_mb: int; cpu_load: float; os, arch, version: str; boot_time, start_time,
last_busy_time: float; cfg_tres, alloc_tres: str (Slurm's CfgTRES=/AllocTRES= strings);
reason_user: str, reason_time: float (sinfo -R USER/TIMESTAMP); tmp_disk_mb, weight: int

PARTITION_VIEW: name, default: bool, nodes: [str], max_time_s: int (-1 UNLIMITED),
default_time_s: int | None, state ("UP"), priority_job_factor: int
Optional (scontrol show partition): preempt_mode ("REQUEUE"), grace_time_s, priority_tier: int,
tres (its TRES= string), billing_weights (its TRESBillingWeights= string)
"""

PROTOCOL_VERSION = 1
API_PREFIX = "/v1"

#: who may call an endpoint (ENDPOINTS' last column; the service enforces it)
ANYONE = "anyone"
OWNER = "owner"   # the job's owner, or an administrator
ADMIN = "admin"   # root, or a member of the configured admin group

#: Every endpoint: (method, path, handler in batchd/server/api.py's ROUTES, query shape, body
#: shape, reply shape, who may call it). Shapes are names of batchd/server/messages.py (None: the
#: route reads no query / takes no body; a tuple: one of these replies). Plain strings:
#: this module is imported by the commands and imports nothing.
ENDPOINTS: tuple[tuple[str, str, str, str | None, str | None, str | tuple[str, ...], str], ...] = (
    ("GET", "/v1/ping", "batchd.server.api.ping", None, None, "Ping", ANYONE),
    ("POST", "/v1/jobs", "batchd.server.api.submit", None, "SubmitRequest", "SubmitReply", ANYONE),
    ("GET", "/v1/jobs", "batchd.server.api.list_jobs", "JobsQuery", None, "JobsReply", ANYONE),
    ("POST", "/v1/jobs/signal", "batchd.server.api.signal", None, "SignalRequest", "DoneReply", OWNER),
    ("POST", "/v1/jobs/hold", "batchd.server.api.hold", None, "HoldRequest", "DoneReply", OWNER),
    ("POST", "/v1/jobs/release", "batchd.server.api.release", None, "ReleaseRequest", "DoneReply", OWNER),
    ("POST", "/v1/jobs/requeue", "batchd.server.api.requeue", None, "RequeueRequest", "DoneReply", OWNER),
    ("POST", "/v1/jobs/update", "batchd.server.api.update", None, "UpdateRequest", "DoneReply", OWNER),
    ("GET", "/v1/accounting", "batchd.server.api.accounting", "AccountingQuery", None, "AccountingReply", ANYONE),
    ("GET", "/v1/nodes", "batchd.server.api.nodes", None, None, "NodesReply", ANYONE),
    ("GET", "/v1/snapshot", "batchd.server.api.snapshot", "SnapshotQuery", None, "SnapshotReply", ANYONE),
    ("POST", "/v1/steps", "batchd.server.api.create_step", None, "StepRequest", "StepReply", OWNER),
    ("GET", "/v1/steps", "batchd.server.api.step_status", "StepsQuery", None, ("StepTasksReply", "ActiveStepsReply"),
     ANYONE),
    ("POST", "/v1/steps/cancel", "batchd.server.api.cancel_step", None, "StepCancelRequest", "StepCancelReply", OWNER),
    ("GET", "/v1/why", "batchd.server.api.why", "WhyQuery", None, "WhyReply", ANYONE),
    ("GET", "/v1/controller", "batchd.server.api.controller", None, None, "ControllerReply", ANYONE),
    ("POST", "/v1/nodes/state", "batchd.server.api.set_node_state", None, "NodeStateRequest", "NodeStateReply", ADMIN),
    ("POST", "/v1/token", "batchd.server.api.token", None, "TokenRequest", "TokenReply", ANYONE),
    ("GET", "/v1/accounts", "batchd.server.api.list_accounts", "AccountsQuery", None, "AccountsReply", ANYONE),
    ("POST", "/v1/accounts/apply", "batchd.server.api.apply_accounts", None, "ApplyRequest", "ApplyReply", ADMIN),
    ("POST", "/v1/accounts/modify", "batchd.server.api.modify_accounts", None, "ModifyRequest", "ApplyReply", ADMIN),
    ("GET", "/v1/report", "batchd.accounting.routes.report", "ReportQuery", None, "ReportReply", ANYONE),
    ("GET", "/v1/prices", "batchd.accounting.routes.prices", None, None, "PricesReply", ANYONE),
    ("POST", "/v1/prices", "batchd.accounting.routes.set_prices", None, "PricesRequest", "AddedReply", ADMIN),
    ("GET", "/v1/eff", "batchd.accounting.routes.eff", "EffQuery", None, "EffReply", ANYONE),
    ("POST", "/v1/rollup", "batchd.accounting.routes.rollup", None, "RollupRequest", "RollupReply", ADMIN),
)

JOB_STATES_ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED")
JOB_STATES_FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
                    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def step_output_path(cwd: str, job_id: int, step_id: int, procid: int) -> str:
    """Where task `procid` of step `step_id` of a job writes its output (stdout and
    stderr): a hidden file in the step's working directory, which srun prints and
    removes when the step ends (the job's nodes share that directory)."""
    return f"{cwd.rstrip('/')}/.srun-{job_id}.{step_id}.{procid}.out"


#: the Reason an ended job keeps when its QOS's idle_timeout ended it (its GPUs stayed at 0 %)
IDLE_REASON = "GpuIdleTimeout"
