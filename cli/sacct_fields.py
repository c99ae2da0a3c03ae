"""sacct's fields: every name sacct accepts with its width, and the text of one field for
one ACCT_ROW (`field_value`), sizes and CPU times in sacct's forms."""

from batchd.cli import fmt

# Every field sacct 22.05 accepts (`sacct -e` order), with its default width
# (negative: left-justified).
FIELD_WIDTHS = {
    "Account": 10, "AdminComment": 15, "AllocCPUS": 10, "AllocNodes": 10, "AllocTRES": 10,
    "AssocID": 10, "AveCPU": 10, "AveCPUFreq": 10, "AveDiskRead": 12, "AveDiskWrite": 12,
    "AvePages": 10, "AveRSS": 10, "AveVMSize": 10, "BlockID": 16, "Cluster": 10, "Comment": 15,
    "Constraints": 19, "ConsumedEnergy": 14, "ConsumedEnergyRaw": 17, "Container": 19,
    "CPUTime": 10, "CPUTimeRAW": 10, "DBIndex": 9, "DerivedExitCode": 15, "Elapsed": 10,
    "ElapsedRaw": 10, "Eligible": 19, "End": 19, "ExitCode": 8, "Flags": 20, "GID": 6,
    "Group": 9, "JobID": -12, "JobIDRaw": -12, "JobName": 10, "Layout": 8, "MaxDiskRead": 12,
    "MaxDiskReadNode": 15, "MaxDiskReadTask": 15, "MaxDiskWrite": 12, "MaxDiskWriteNode": 16,
    "MaxDiskWriteTask": 16, "MaxPages": 8, "MaxPagesNode": 12, "MaxPagesTask": 12, "MaxRSS": 10,
    "MaxRSSNode": 10, "MaxRSSTask": 10, "MaxVMSize": 10, "MaxVMSizeNode": 14, "MaxVMSizeTask": 14,
    "McsLabel": 20, "MinCPU": 10, "MinCPUNode": 10, "MinCPUTask": 10, "NCPUS": 10, "NNodes": 8,
    "NodeList": 15, "NTasks": 8, "Partition": 10, "Priority": 10, "QOS": 10, "QOSRAW": 10,
    "Reason": 20, "ReqCPUFreq": 13, "ReqCPUFreqGov": 13, "ReqCPUFreqMax": 13, "ReqCPUFreqMin": 13,
    "ReqCPUS": 8, "ReqMem": 10, "ReqNodes": 8, "ReqTRES": 10, "Reservation": 20,
    "ReservationId": 20, "Reserved": 10, "ResvCPU": 10, "ResvCPURAW": 10, "Start": 19, "State": 10,
    "Submit": 19, "SubmitLine": 20, "Suspended": 10, "SystemComment": 15, "SystemCPU": 10,
    "Timelimit": 10, "TimelimitRaw": 10, "TotalCPU": 10, "TRESUsageInAve": 14,
    "TRESUsageInMax": 14, "TRESUsageInMaxNode": 18, "TRESUsageInMaxTask": 18,
    "TRESUsageInMin": 14, "TRESUsageInMinNode": 18, "TRESUsageInMinTask": 18,
    "TRESUsageInTot": 14, "TRESUsageOutAve": 15, "TRESUsageOutMax": 15,
    "TRESUsageOutMaxNode": 19, "TRESUsageOutMaxTask": 19, "TRESUsageOutMin": 15,
    "TRESUsageOutMinNode": 19, "TRESUsageOutMinTask": 19, "TRESUsageOutTot": 15, "UID": 6,
    "User": 9, "UserCPU": 10, "WCKey": 10, "WCKeyID": 10, "WorkDir": 15,
}
# accepted but not listed by `sacct -e` (batchd extras)
EXTRA_WIDTHS = {"Restarts": 8}
CANONICAL = {k.lower(): k for k in (*FIELD_WIDTHS, *EXTRA_WIDTHS)}
# fields Slurm leaves empty on step rows (`123.batch`), whatever the record holds
STEP_BLANK = ("User", "Partition", "QOS", "Timelimit", "TimelimitRaw", "ReqMem", "ReqTRES", "WorkDir",
              "Reason", "DerivedExitCode", "Priority", "Restarts", "Comment", "SubmitLine")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "REQUEUED", "REVOKED")


def _final(row: dict) -> bool:
    return (row.get("state") or "").split(" ")[0] in FINAL


def _time(row: dict, key: str) -> str:
    v = row.get(key)
    if v:
        return fmt.fmt_ts(v)
    if key in ("start", "end", "eligible") and _final(row):
        return "None" if key != "eligible" else "Unknown"
    return "Unknown"


UNIT_TYPES = "KMGTP"


def fmt_size(value: float, base: str, units: str | None = None, noconvert: bool = False) -> str:
    """A size given in unit `base` ("K" or "M") the way sacct prints it: converted to
    `units` when given (two decimals unless whole: "3.91G"), else as it is with
    `noconvert`, else moved up a unit while it divides exactly by 1024 (2048M -> "2G",
    2140K stays "2140K")."""
    i = UNIT_TYPES.index(base)
    if units:
        v = value * 1024.0 ** (i - UNIT_TYPES.index(units))
        return f"{int(v)}{units}" if v == int(v) else f"{v:.2f}{units}"
    v = int(value)
    if not noconvert:
        while v and v % 1024 == 0 and i < len(UNIT_TYPES) - 1:
            v //= 1024
            i += 1
    return f"{v}{UNIT_TYPES[i]}"


def fmt_cpu_time(seconds: float) -> str:
    """TotalCPU: `MM:SS.mmm` under an hour, else `HH:MM:SS` or `D-HH:MM:SS` (sacct's form)."""
    if seconds < 3600:
        minutes, s = divmod(max(0.0, seconds), 60)
        return f"{int(minutes):02d}:{int(s):02d}.{int(round((s - int(s)) * 1000)) % 1000:03d}"
    return fmt.fmt_hms(seconds)


def field_value(row: dict, name: str, units: str | None = None, noconvert: bool = False) -> str:
    """The text of field `name` (canonical) for one ACCT_ROW; `units`/`noconvert` are
    sacct's --units and --noconvert (sizes: ReqMem, MaxRSS, AveRSS)."""
    g = row.get
    is_step = "." in str(g("job_id") or "")
    if is_step and name in STEP_BLANK:
        return ""
    if name == "JobID":
        return str(g("job_id") or "")
    if name == "JobIDRaw":
        return str(g("job_id_raw") or g("job_id") or "")
    if name == "JobName":
        return g("name") or ""
    if name == "State":
        st = g("state") or ""
        if st == "CANCELLED" and g("cancelled_by") is not None and not is_step:
            return f"CANCELLED by {g('cancelled_by')}"
        return st
    if name in ("ExitCode", "DerivedExitCode"):
        v = g("exit_code" if name == "ExitCode" else "derived_exit_code")
        if v is None:
            return "" if is_step and name == "DerivedExitCode" else "0:0"
        return str(v)
    if name in ("Submit", "Eligible", "Start", "End"):
        return _time(row, name.lower())
    if name == "Elapsed":
        return fmt.fmt_hms(g("elapsed_s") or 0)
    if name == "ElapsedRaw":
        return str(g("elapsed_s") or 0)
    if name in ("Timelimit", "TimelimitRaw") and g("time_limit_s") is None:
        # a job that has no limit of its own yet (no -t, no DefaultTime): Slurm's NO_VAL
        return "" if is_step else "Partition_Limit"
    if name == "Timelimit":
        return fmt.fmt_hms(g("time_limit_s"))
    if name == "TimelimitRaw":
        tl = g("time_limit_s")
        return "UNLIMITED" if tl == fmt.UNLIMITED else str((tl + 59) // 60)
    if name in ("AllocCPUS", "NCPUS"):
        v = g("alloc_cpus") if g("alloc_cpus") is not None else g("ncpus")
        return "" if v is None else str(v)
    if name == "ReqCPUS":
        return str(g("req_cpus") if g("req_cpus") is not None else (g("ncpus") or ""))
    if name == "ReqMem":
        mem = g("req_mem")
        if (units or noconvert) and isinstance(mem, int | float) and mem:
            return fmt_size(mem, "M", units, noconvert)
        return fmt.fmt_mem(mem)
    if name in ("MaxRSS", "AveRSS"):
        kb = g("max_rss_kb")
        return "" if kb is None else fmt_size(kb, "K", units, noconvert)
    if name == "MaxRSSNode":
        return "" if g("max_rss_kb") is None else (g("node_list") or "")
    if name == "MaxRSSTask":
        return "" if g("max_rss_kb") is None else "0"
    if name == "TotalCPU":
        v = g("total_cpu_s")
        return "" if v is None else fmt_cpu_time(float(v))
    if name == "AllocTRES":
        return g("alloc_tres") or ""
    if name == "ReqTRES":
        return g("req_tres") or ""
    if name in ("NNodes", "AllocNodes"):
        v = g("nnodes")
        return "" if v is None else str(v)
    if name == "NodeList":
        return g("node_list") or ("None assigned" if not is_step else "")
    if name == "CPUTimeRAW":
        return str((g("elapsed_s") or 0) * (g("alloc_cpus") or g("ncpus") or 0))
    if name == "CPUTime":
        return fmt.fmt_hms((g("elapsed_s") or 0) * (g("alloc_cpus") or g("ncpus") or 0))
    if name == "Group":
        return g("group") or ""
    if name == "WorkDir":
        return g("workdir") or ""
    if name == "QOS":
        return g("qos") or ""
    if name == "Cluster":
        return g("cluster") or ""
    simple = {"User": "user", "UID": "uid", "GID": "gid", "Account": "account", "Partition": "partition",
              "NTasks": "ntasks", "Restarts": "restarts", "Comment": "comment", "Reason": "reason",
              "Priority": "priority", "SubmitLine": "submit_line", "Flags": "flags"}
    key = simple.get(name)
    if key is None:
        return ""
    v = g(key)
    return "" if v is None else str(v)
