"""`scontrol`: show jobs, nodes, partitions; hold, release, requeue and update jobs.

`show job` prints Slurm 22.05's key=value block (first line `JobId=N JobName=X`, the
others indented three spaces, a line of three spaces and an empty line after each
job); `-d` adds DerivedExitCode and the per-node GRES detail, `-o` prints one line per
record. Data from `GET /v1/jobs` and `GET /v1/nodes`; actions are `POST /v1/jobs/hold`,
`/release`, `/requeue` (`"hold": true` for `requeuehold`) and `/update` (see
batchd/protocol.py); `token` is `POST /v1/token`. Errors print `<message> for job <id>` and exit 1.
"""

import sys
import time

from batchd.cli import fmt
from batchd.cli.options import Opt, OptionError, parse
from batchd.slurm import slurmtime
from batchd.slurm.digits import isdigits

PROG = "scontrol"

TABLE = [
    Opt("a", "all", "none", "all"),
    Opt("d", "details", "none", "details", multi=True),
    Opt("h", "help", "none", "help"),
    Opt("o", "oneliner", "none", "oneliner"),
    Opt("Q", "quiet", "none", "quiet"),
    Opt(None, "usage", "none", "usage"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
]

USAGE = """scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -a or --all: equivalent to "all" command
     -d or --details: equivalent to "details" command
     -h or --help: equivalent to "help" command
     -o or --oneliner: equivalent to "oneliner" command
     -Q or --quiet: equivalent to "quiet" command
     -V or --version: equivalent to "version" command
     -v or --verbose: equivalent to "verbose" command (accepted)
     --usage: print a short usage line

  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode. It will process commands as entered until explicitly
  terminated.

    Valid <COMMAND> values are:
     hold <job_list>          place hold on specified job(s)
     release <job_list>       permit specified job(s) to execute
     requeue <job_list>       re-queue a batch job
     requeuehold <job_list>   re-queue and hold a batch job
     show <ENTITY> [<ID>]     display state of identified entity, default
                              is all records; ENTITY is job, node,
                              partition or config
     token [lifespan=<secs>] [username=<name>]
                              a JWT for the REST API (default 1800 s);
                              another user's for an administrator only
     uhold <job_list>         place user hold on specified job(s)
     update <SPECIFICATIONS>  update job: JobId=<id> followed by any of
                              TimeLimit=, Nice=, Account=, Name=,
                              Comment=, Partition=, QOS=, StartTime=,
                              NodeList=, ExcNodeList= (pending jobs)
     version                  display tool version number
"""

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE")


def _ts(v: float | None, none: str = "Unknown") -> str:
    return fmt.fmt_ts(v, none)


def _null(v: object) -> str:
    return "(null)" if v in (None, "") else str(v)


def job_lines(j: dict, details: bool = False) -> list[str]:
    """The lines of one `scontrol show job` record for a JOB_VIEW (without the trailing
    `   ` and empty lines)."""
    g = j.get
    state = g("state") or "PENDING"
    first = f"JobId={g('id')}"
    if g("array_job_id"):
        task = g("array_task_id")
        task = str(task) if task is not None else (g("array_task_str") or "").strip("[]")
        first += f" ArrayJobId={g('array_job_id')} ArrayTaskId={task}"
        if "%" in task:
            first += f" ArrayTaskThrottle={task.split('%')[1]}"
    first += f" JobName={g('name') or ''}"
    tl = g("time_limit_s")
    limit = "UNLIMITED" if tl in (None, -1) else fmt.fmt_hms(tl)
    started = bool(g("start_time")) and state != "PENDING"
    # a pending job with --begin shows its begin time as StartTime, as Slurm does
    start = g("start_time") or (g("begin_time") if state == "PENDING" else None)
    if state == "PENDING":
        end_s = "Unknown"
    elif g("end_time") and (state in FINAL or state == "COMPLETING"):
        end_s = _ts(g("end_time"))
    elif started and tl not in (None, -1):
        end_s = _ts(start + tl)
    elif g("end_time"):
        end_s = _ts(g("end_time"))
    else:
        end_s = "Unknown"
    eligible = g("eligible_time")
    accrue = g("accrue_time")
    if accrue is None and eligible and not (state == "PENDING" and g("reason") in (None, "None", "BeginTime")):
        accrue = eligible  # a job accrues age once eligible and looked at by the scheduler
    nodes = g("nodes") or 1
    cpus = g("cpus") or 1
    ntasks = g("ntasks") or 1
    lines = [
        first,
        f"   UserId={g('user')}({g('uid')}) GroupId={g('group')}({g('gid')}) MCS_label=N/A",
        f"   Priority={g('priority') or 0} Nice={g('nice') or 0} Account={g('account')} QOS={g('qos')}",
        f"   JobState={state} Reason={fmt.job_reason(j)} Dependency={_null(g('dependency'))}",
        f"   Requeue={1 if g('requeue') else 0} Restarts={g('restarts') or 0} BatchFlag=1 Reboot=0 "
        f"ExitCode={g('exit_code') or '0:0'}",
    ]
    if details:
        lines.append(f"   DerivedExitCode={g('derived_exit_code') or '0:0'}")
    lines += [
        f"   RunTime={fmt.fmt_hms(g('run_time_s') or 0)} TimeLimit={limit} TimeMin=N/A",
        f"   SubmitTime={_ts(g('submit_time'))} EligibleTime={_ts(eligible)}",
        f"   AccrueTime={_ts(accrue)}",
        f"   StartTime={_ts(start)} EndTime={end_s} Deadline=N/A",
    ]
    if started:
        lines.append(f"   PreemptEligibleTime={_ts(start)} PreemptTime={_ts(g('preempt_time'), 'None')}")
    lines += [
        f"   SuspendTime=None SecsPreSuspend=0 LastSchedEval={_ts(g('last_sched_eval') or g('submit_time'))} "
        f"Scheduler=Main",
        f"   Partition={g('partition')} AllocNode:Sid={g('alloc_node') or 'localhost'}:{g('alloc_sid') or 0}",
        f"   ReqNodeList={g('req_node_list') or '(null)'} ExcNodeList={g('exc_node_list') or '(null)'}",
        f"   NodeList={g('node_list') or ''}",
    ]
    if g("batch_host") and started:
        lines.append(f"   BatchHost={g('batch_host')}")
    per_task = g("cpus_per_task") or max(1, cpus // max(1, ntasks))
    lines += [
        f"   NumNodes={nodes} NumCPUs={cpus} NumTasks={ntasks} CPUs/Task={per_task} ReqB:S:C:T=0:0:*:*",
        f"   TRES={(g('tres_alloc') if started else None) or g('tres_req') or ''}",
        "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
    ]
    if details and started and g("gres") is not None:
        lines += gres_detail(j)
    if g("mem_per_cpu_mb") is not None:
        mem = f"MinMemoryCPU={fmt.fmt_mem(g('mem_per_cpu_mb'))}"
    elif g("mem_per_node_mb") is not None:
        mem = f"MinMemoryNode={fmt.fmt_mem(g('mem_per_node_mb'))}"
    else:
        mem = f"MinMemoryNode={fmt.fmt_mem((g('mem_mb') or 0) // nodes)}"
    lines += [
        f"   MinCPUsNode={g('min_cpus') or max(1, cpus // nodes)} {mem} MinTmpDiskNode=0",
        f"   Features={_null(g('constraint'))} DelayBoot=00:00:00",
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)",
        f"   Command={_null(g('command'))}",
        f"   WorkDir={g('workdir') or ''}",
    ]
    if g("comment"):
        lines.append(f"   Comment={g('comment')} ")
    lines += [
        f"   StdErr={g('stderr') or ''}",
        f"   StdIn={g('stdin') or '/dev/null'}",
        f"   StdOut={g('stdout') or ''}",
        "   Power=",
    ]
    if g("mem_per_tres"):
        lines.append(f"   MemPerTres={g('mem_per_tres')}")
    if g("tres_per_job"):
        lines.append(f"   TresPerJob={g('tres_per_job')}")
    if g("tres_per_node"):
        lines.append(f"   TresPerNode={g('tres_per_node')}")
    if g("tres_per_task"):
        lines.append(f"   TresPerTask={g('tres_per_task')}")
    return lines


def gres_detail(j: dict) -> list[str]:
    """`-d` lines: `JOB_GRES=gpu:h200:2` and one `Nodes=... GRES=gpu:h200:2(IDX:2-3)` per node."""
    gres = j.get("gres") or {}
    gs = j.get("gpus_str") or ""
    kind = gs.split("(")[0]
    parts = kind.split(":")
    name = parts[0] if parts and parts[0] else "gpu"
    gtype = parts[1] if len(parts) > 2 else None
    total = sum(len(v) for v in gres.values())
    prefix = f"{name}:{gtype}" if gtype else name
    lines = [f"   JOB_GRES={prefix}:{total}" if total else "   JOB_GRES=(null)"]
    nodes = j.get("nodes") or 1
    mem = (j.get("mem_mb") or 0) // nodes
    cpu_ids = j.get("cpu_ids") or {}
    for node in fmt.expand_hostlist(j.get("node_list") or "") or list(gres):
        idx = gres.get(node) or []
        g = f"{prefix}:{len(idx)}(IDX:{fmt.compress_ranges(idx)})" if idx else ""
        cpus = cpu_ids.get(node, "")
        lines.append(f"     Nodes={node} CPU_IDs={cpus} Mem={mem} GRES={g}")
    return lines


def node_lines(n: dict, partitions: list[dict]) -> list[str]:
    """`scontrol show node` record for a NODE_VIEW."""
    g = n.get
    cpus = g("cpus") or 0
    parts = ",".join(p["name"] for p in partitions if n["name"] in (p.get("nodes") or [])) or \
        ",".join(g("partitions") or [])
    feats = ",".join(g("features") or []) or "(null)"
    cfg = g("cfg_tres") or _node_tres(cpus, g("memory_mb") or 0, g("gres"))
    alloc = g("alloc_tres")
    if alloc is None:
        alloc = _node_tres(g("cpus_alloc") or 0, g("memory_alloc_mb") or 0, g("gres_used"), used=True) \
            if g("cpus_alloc") else ""
    sockets = g("sockets") or 1
    lines = [
        f"NodeName={n['name']} Arch={g('arch') or 'x86_64'} CoresPerSocket={g('cores_per_socket') or cpus // sockets} ",
        f"   CPUAlloc={g('cpus_alloc') or 0} CPUEfctv={cpus} CPUTot={cpus} CPULoad={g('cpu_load') or 0:.2f}",
        f"   AvailableFeatures={feats}",
        f"   ActiveFeatures={feats}",
        f"   Gres={g('gres') or '(null)'}",
        f"   NodeAddr={n['name']} NodeHostName={n['name']} Version={g('version') or '22.05.8'}",
        *([f"   OS={g('os')} "] if g("os") else []),
        f"   RealMemory={g('memory_mb') or 0} AllocMem={g('memory_alloc_mb') or 0} "
        f"FreeMem={g('free_mem_mb') if g('free_mem_mb') is not None else 'N/A'} Sockets={sockets} Boards=1",
        f"   State={g('state') or 'UNKNOWN'} ThreadsPerCore={g('threads_per_core') or 1} TmpDisk=0 Weight=1 "
        f"Owner=N/A MCS_label=N/A",
        f"   Partitions={parts} ",
        f"   BootTime={_ts(g('boot_time'), 'None')} SlurmdStartTime={_ts(g('start_time'), 'None')}",
        f"   LastBusyTime={_ts(g('last_busy_time'), 'None')}",
        f"   CfgTRES={cfg}",
        f"   AllocTRES={alloc}",
        "   CapWatts=n/a",
        "   CurrentWatts=0 AveWatts=0",
        "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if g("reason"):
        who = f" [{g('reason_user')}@{_ts(g('reason_time'))}]" if g("reason_user") else ""
        lines.append(f"   Reason={g('reason')}{who}")
    return lines


def _node_tres(cpus: int, mem_mb: int, gres: str | None, used: bool = False) -> str:
    """`cpu=16,mem=23081M,gres/gpu=4,gres/gpu:h200=4` from a node's figures."""
    out = [f"cpu={cpus}", f"mem={fmt.fmt_mem(mem_mb) if used else str(mem_mb) + 'M'}"]
    for item in (gres or "").split(","):
        item = item.split("(")[0]
        p = item.split(":")
        if len(p) >= 2 and isdigits(p[-1]) and int(p[-1]) > 0:
            out.append(f"gres/{p[0]}={p[-1]}")
            if len(p) == 3:
                out.append(f"gres/{p[0]}:{p[1]}={p[-1]}")
    return ",".join(out)


def partition_lines(p: dict, nodes: list[dict]) -> list[str]:
    """`scontrol show partition` record for a PARTITION_VIEW."""
    g = p.get
    members = [n for n in nodes if n["name"] in (g("nodes") or [])]
    total_cpus = sum(n.get("cpus") or 0 for n in members)
    mt = g("max_time_s")
    dt = g("default_time_s")
    lines = [
        f"PartitionName={p['name']}",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"   AllocNodes=ALL Default={'YES' if g('default') else 'NO'} QoS=N/A",
        f"   DefaultTime={'NONE' if dt is None else fmt.fmt_hms(dt)} DisableRootJobs=NO ExclusiveUser=NO "
        f"GraceTime={g('grace_time_s') or 0} Hidden=NO",
        f"   MaxNodes=UNLIMITED MaxTime={'UNLIMITED' if mt in (None, -1) else fmt.fmt_hms(mt)} MinNodes=0 "
        f"LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"   Nodes={fmt.compress_hostlist(g('nodes') or [])}",
        f"   PriorityJobFactor={g('priority_job_factor') or 1} PriorityTier={g('priority_tier') or 1} "
        f"RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"   OverTimeLimit=NONE PreemptMode={g('preempt_mode') or 'OFF'}",
        f"   State={g('state') or 'UP'} TotalCPUs={total_cpus} TotalNodes={len(members)} "
        f"SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
    ]
    if g("tres"):
        lines.append(f"   TRES={g('tres')}")
    if g("billing_weights"):
        lines.append(f"   TRESBillingWeights={g('billing_weights')}")
    return lines


def emit(records: list[list[str]], oneliner: bool, trailer: str) -> str:
    """Join record line lists: `-o` one line per record, else blocks with `trailer`."""
    out = []
    for lines in records:
        if oneliner:
            out.append(" ".join(x.strip() for x in lines if x.strip()) + "\n")
        else:
            out.append("".join(x + "\n" for x in lines) + trailer)
    return "".join(out)


# ----------------------------------------------------------------------------- commands
def _fetch_jobs(ident: str | None) -> tuple[list[dict] | None, str | None]:
    from batchd.cli import client
    q = {"all": "1", "fold": "1"}  # pending array tasks folded by the daemon (fold_array_tasks: a no-op then)
    if ident:
        q["ids"] = ident
    try:
        return client.request("GET", "/v1/jobs", query=q).get("jobs", []), None
    except client.Unreachable as e:
        return None, f"{PROG}: error: {e}"
    except client.DaemonError as e:
        return None, f"slurm_load_jobs error: {e.message}"


def show(entity: str, ident: str | None, opts: dict) -> tuple[str, str, int]:
    """`scontrol show ENTITY [ID]` -> (stdout text, stderr text, exit code)."""
    e = entity.lower()
    oneliner = bool(opts.get("oneliner"))
    if "job".startswith(e) or e == "jobs":
        if ident and not isdigits(ident.replace("_", "")):
            return "", "Invalid job id specified\n", 1
        jobs, err = _fetch_jobs(ident)
        if err:
            return "", err + "\n", 1
        if not jobs:
            if ident:
                return "", "slurm_load_jobs error: Invalid job id specified\n", 1
            return "No jobs in the system\n", "", 0
        recs = [job_lines(j, bool(opts.get("details"))) for j in fmt.fold_array_tasks(jobs)]
        return emit(recs, oneliner, "   \n\n"), "", 0
    if e in ("node", "nodes", "partition", "partitions", "part", "config"):
        reply = fmt.daemon_call(PROG, "GET", "/v1/nodes", error_prefix="slurm_load_node")
        nodes, parts = reply.get("nodes", []), reply.get("partitions", [])
        if e.startswith("node"):
            want = set(fmt.expand_hostlist_arg(PROG, ident)) if ident else None
            sel = [n for n in nodes if want is None or n["name"] in want]
            if not sel:
                return "", f"Node {ident} not found\n", 1
            return emit([node_lines(n, parts) for n in sel], oneliner, "\n"), "", 0
        if e.startswith("part"):
            sel = [p for p in parts if not ident or p["name"] == ident]
            if not sel:
                return "", f"Partition {ident} not found\n", 1
            return emit([partition_lines(p, nodes) for p in sel], oneliner, "\n"), "", 0
        ping = fmt.daemon_call(PROG, "GET", "/v1/ping")
        lines = [f"Configuration data as of {fmt.fmt_ts(time.time())}",
                 f"ClusterName             = {ping.get('cluster', '')}",
                 f"PartitionName(s)        = {','.join(p['name'] for p in parts)}",
                 f"NodeName(s)             = {fmt.compress_hostlist([n['name'] for n in nodes])}",
                 f"SLURM_VERSION           = 22.05.8 (batchd {ping.get('version', '')})"]
        return "".join(x + "\n" for x in lines) + "\n", "", 0
    return "", f"invalid entity: {entity} for keyword: show\n", 1


def _job_ids(args: list[str]) -> list[str]:
    ids: list[str] = []
    for a in args:
        ids.extend(x for x in a.split(",") if x)
    return ids


def action(verb: str, args: list[str]) -> tuple[str, int]:
    """hold/uhold/release/requeue/requeuehold -> (stderr text, exit code)."""
    ids = _job_ids(args)
    if not ids:
        return "Invalid job id specified\n", 1
    for i in ids:
        if not isdigits(i.replace("_", "").replace("[", "").replace("]", "").replace("-", "")):
            return f"Invalid job id specified for job {i}\n", 1
    body: dict[str, object] = {"ids": ids}
    path = {"hold": "hold", "uhold": "hold", "release": "release", "requeue": "requeue",
            "requeuehold": "requeue"}[verb]
    if verb == "requeuehold":
        body["hold"] = True
    if verb == "uhold":
        body["user"] = True
    reply = fmt.daemon_call(PROG, "POST", f"/v1/jobs/{path}", body)
    return _errors(reply)


def _errors(reply: dict) -> tuple[str, int]:
    errs = reply.get("errors", [])
    text = "".join(f"{e.get('message')} for job {e.get('id')}\n" for e in errs)
    return text, (1 if errs else 0)


UPDATE_KEYS = {"timelimit": "time_limit_s", "nice": "nice", "account": "account", "name": "name",
               "jobname": "name", "comment": "comment", "partition": "partition", "qos": "qos",
               "starttime": "begin_time", "nodelist": "nodelist", "reqnodelist": "nodelist",
               "excnodelist": "exclude"}


#: Node states `scontrol update NodeName=... State=` takes (Slurm 22.05's list, as it prints
#: it for an invalid one) and what batchd does with each; None: valid in Slurm, not in batchd.
NODE_STATES = {"drain": "drain", "down": "down", "resume": "resume", "undrain": "resume", "idle": "resume",
               "noresp": None, "fail": None, "future": None, "power_down": None, "power_up": None}
BAD_NODE_STATE = ("Request aborted\nValid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP "
                  "UNDRAIN\nNot all states are valid given a node's prior state\n")


def update_node(args: list[str]) -> tuple[str, int]:
    """`update NodeName=LIST State=DRAIN|DOWN|RESUME|UNDRAIN [Reason=TEXT]` -> (stderr, exit
    code), with Slurm 22.05's messages (recorded in tests/cli/test_scontrol_node_update.py): a
    DRAIN or DOWN needs a reason; an unknown node is `slurm_update error: Invalid node name
    specified`; a user who is not an admin gets `slurm_update error: Invalid user id`."""
    from batchd.cli import client

    names: list[str] = []
    state = reason = None
    for a in args:
        key, eq, val = a.partition("=")
        k = key.lower()
        if not eq:
            return f"Invalid input: {a}\nRequest aborted\n", 1
        if k in ("nodename", "node"):
            names.extend(fmt.expand_hostlist(val))
        elif k == "state":
            if val.lower() not in NODE_STATES:
                return f"Invalid input: {a}\n" + BAD_NODE_STATE, 1
            state = NODE_STATES[val.lower()]
            if state is None:
                return f"Update of this parameter is not supported: {a}\nRequest aborted\n", 1
        elif k == "reason":
            reason = val
        else:
            return f"Update of this parameter is not supported: {a}\nRequest aborted\n", 1
    if state is None:
        return "No changes specified\n", 1
    if state in ("drain", "down") and not reason:
        return "You must specify a reason when DOWNING or DRAINING a node. Request denied\n", 1
    for name in names:
        try:
            client.request("POST", "/v1/nodes/state", {"node": name, "action": state, "reason": reason})
        except client.Unreachable as e:
            return f"{PROG}: error: {e}\n", 1
        except client.DaemonError as e:
            msg = {"AccessDenied": "Invalid user id", "NotFound": "Invalid node name specified"}.get(e.code, e.message)
            return f"slurm_update error: {msg}\n", 1
    return "", 0


def update(args: list[str], now: float | None = None) -> tuple[str, int]:
    """`update JobId=N Key=Val ...` -> (stderr text, exit code); `update NodeName=...` is
    `update_node`'s."""
    if any(a.partition("=")[0].lower() in ("nodename", "node") for a in args):
        return update_node(args)
    ids: list[str] = []
    changes: dict[str, object] = {}
    for a in args:
        key, eq, val = a.partition("=")
        if not eq:
            return f"Invalid input: {a}\nRequest aborted\n", 1
        k = key.lower()
        if k in ("jobid", "job"):
            ids.extend(x for x in val.split(",") if x)
            continue
        field = UPDATE_KEYS.get(k)
        if field is None:
            return f"Update of this parameter is not supported: {a}\nRequest aborted\n", 1
        try:
            if field == "time_limit_s":
                change = slurmtime.update_time_limit(val)
                if change is None:
                    return f"{PROG}: error: Invalid TimeLimit value\n", 1
                changes[field] = change
            elif field == "nice":
                changes[field] = int(val)
            elif field == "begin_time":
                changes[field] = fmt.parse_when(val, now)
            elif field in ("nodelist", "exclude"):
                changes[field] = val or None  # `NodeList=` clears the list, as in Slurm
            else:
                changes[field] = val
        except ValueError:
            what = "time limit" if field == "time_limit_s" else k
            return f"Invalid {what} specification: {val}\nRequest aborted\n", 1
    if not ids:
        return "No job identification provided\nRequest aborted\n", 1
    if not changes:
        return "No changes specified\n", 1
    limit = changes.pop("time_limit_s", None)
    if limit is None:
        return _errors(fmt.daemon_call(PROG, "POST", "/v1/jobs/update", {"ids": ids, "changes": changes},
                                       error_prefix="slurm_update"))
    if limit[0] == "=":
        return _update_limit(ids, changes, None, limit[1])
    text, rc = "", 0
    for i in ids:  # a relative limit is each job's own (scontrol reads the job first, as Slurm's does)
        t, r = _update_limit([i], changes, limit[0], limit[1])
        text, rc = text + t, max(rc, r)
    return text, rc


#: batchd has no zero time limit (the wire refuses it: a zero must never read as "none").
ZERO_LIMIT = (f"{PROG}: error: TimeLimit=0 (end the job at once) is not supported by batchd; "
              "end the job with scancel\n")


def _update_limit(ids: list[str], changes: dict, op: str | None, secs: int) -> tuple[str, int]:
    """POST the update with `time_limit_s`: `secs` itself (op None), or the job's current
    limit plus or minus `secs` (one job id). An UNLIMITED limit stays UNLIMITED."""
    if op is not None:
        reply = fmt.daemon_call(PROG, "GET", "/v1/jobs", query={"ids": ids[0], "all": "1"},
                                error_prefix="slurm_update")
        jobs = [j for j in reply.get("jobs") or [] if ids[0] in (str(j.get("id")), j.get("display_id"))]
        if not jobs:
            return f"Invalid job id specified for job {ids[0]}\n", 1
        cur = jobs[0].get("time_limit_s")
        if cur is None or cur < 0:
            secs = -1
        elif op == "-" and secs > cur:
            return (f"{PROG}: error: TimeLimit decrement larger than current time limit "
                    f"({secs // 60} > {(cur + 59) // 60})\n", 1)
        else:
            secs = cur + secs if op == "+" else cur - secs
    if secs == 0:
        return ZERO_LIMIT, 1
    reply = fmt.daemon_call(PROG, "POST", "/v1/jobs/update", {"ids": ids, "changes": {**changes, "time_limit_s": secs}},
                            error_prefix="slurm_update")
    return _errors(reply)


def token(args: list[str]) -> tuple[str, str, int]:
    """`token [lifespan=SECONDS] [username=NAME]` -> `SLURM_JWT=...` for the slurmrestd API
    (`POST /v1/token`; another user's token only for an administrator)."""
    body: dict[str, object] = {}
    for a in args:
        key, sep, val = a.partition("=")
        key = key.lower()
        if not sep or key not in ("lifespan", "username"):
            return "", f"{PROG}: error: token: invalid argument {a!r} (lifespan=SECONDS, username=NAME)\n", 1
        if key == "lifespan":
            if not isdigits(val) or not 0 < int(val) <= 365 * 86400:
                return "", f"{PROG}: error: token: lifespan must be a number of seconds from 1 to 31536000\n", 1
            body["lifespan"] = int(val)
        else:
            body["username"] = val
    reply = fmt.daemon_call(PROG, "POST", "/v1/token", body)
    return f"SLURM_JWT={reply['token']}\n", "", 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, rest = parse(PROG, argv, TABLE)
    except OptionError as e:
        sys.stderr.write(e.message + "\n")
        return e.exit_code
    # command words may carry the options too (`scontrol show job -d 84`)
    words = []
    for w in rest:
        if w in ("-d", "--details"):
            opts["details"] = 1
        elif w in ("-o", "--oneliner"):
            opts["oneliner"] = True
        else:
            words.append(w)
    if opts.get("help") or opts.get("usage") or (words and words[0].lower() == "help"):
        fmt.write(USAGE)
        return 0
    if opts.get("version") or (words and words[0].lower() == "version"):
        fmt.write(fmt.VERSION + "\n")
        return 0
    if not words:
        sys.stderr.write(f"{PROG}: error: no command given (interactive mode is not supported)\n")
        return 1
    verb = words[0].lower()
    if verb in ("details", "oneliner") and len(words) > 1:
        opts[verb] = True
        words = words[1:]
        verb = words[0].lower()
    if verb == "show":
        if len(words) < 2:
            sys.stderr.write("too few arguments for keyword:show\n")
            return 1
        out, err, rc = show(words[1], words[2] if len(words) > 2 else None, opts)
        fmt.write(out)
    elif verb in ("hold", "uhold", "release", "requeue", "requeuehold"):
        err, rc = action(verb, words[1:])
    elif verb == "update":
        err, rc = update(words[1:])
    elif verb == "token":
        out, err, rc = token(words[1:])
        fmt.write(out)
    else:
        err, rc = f"invalid keyword: {words[0]}\n", 1
    if err and not (opts.get("quiet") and rc == 0):
        sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
