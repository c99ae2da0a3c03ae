"""The request half of the wire contract (`batchd/server/wire.py`): for every endpoint of
`batchd/server/api.py`'s ROUTES its query and body, typed and bounded; the endpoints are
`batchd/protocol.py`'s table, the keys of each query and body its shape in
`batchd/server/messages.py` (each rule is built from its shape: `batchd.server.wire.shaped`).

Bounds (generous: far above any cluster batchd serves, far below what would stall it):
counts (tasks, CPUs, nodes, GPUs) <= `MAX_COUNT`; memory <= `MAX_MEM_MB` (2^40 MiB); time
limits > 0, or -1 (UNLIMITED), or null (the partition's), at most Slurm's largest
(2^32 - 1 minutes); nice within Slurm's +/-2147483645; a signal between 1 and SIGRTMAX
(0 too where it means "cancel"); names, accounts, comments <= 1024 bytes and paths <= 4096
bytes (what slurmctld allows, refused with its words "Pathname of a file, directory or
other parameter too long"); the script, the environment and the host lists by the config's
`[limits]` (`max_script_bytes`, `max_env_bytes`, `max_hostlist_names`). Filename patterns
(`output`, `error`, `input`) are strings; their `%` codes are read with ASCII digits only,
so `%²j` is literal text (as Slurm reads it) and never refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from batchd.server import messages as m
from batchd.server.wire import (
    SIGRTMAX,
    Bool,
    Either,
    Enum,
    Int,
    Json,
    List,
    Map,
    Num,
    Obj,
    Route,
    Str,
    WireError,
    limit,
    shaped,
)
from batchd.slurm import hostlist

MAX_COUNT = 1_000_000
MAX_MEM_MB = 1 << 40
MAX_TIME_S = (2 ** 32 - 1) * 60
NICE_MAX = 2147483645
MAX_ID = 2 ** 53          # job and step ids (exact in every JSON reader)
MAX_UNIX = 1e11           # unix seconds: the year 5138
MAX_UID = 2 ** 32 - 2


def _hostlist(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    try:
        n = hostlist.count(v)
    except ValueError as e:
        raise WireError(path, f"must be a host list such as node[1-4],gpu7 ({e})") from None
    most = limit(lim, "max_hostlist_names")
    if n > most:
        raise WireError(path, f"must name at most {most} hosts (it names {n})", too_long=True)


def _job_ids(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    from batchd.server.views import parse_job_id

    for item in v.split(","):
        if not item:
            continue
        try:
            parse_job_id(item)
        except ValueError:
            raise WireError(path, "must be job ids such as 123, 123_4 or 123_[1-3]", item) from None


def _env_name(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    if "=" in v:
        raise WireError(path, "must be a variable name without '='")


def _pattern(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    from batchd.slurm.filepattern import expand_pattern

    try:  # a guard: every string expands (ASCII digits only), so this never refuses today
        expand_pattern(v, {"id": 1, "name": "x", "user": "u"}, "node")
    except Exception as e:  # noqa: BLE001 - refuse what the agent could not expand later
        raise WireError(path, f"is not a filename pattern batchd can expand ({e})") from None


def _end_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    """A report's end: a number, or the word `now` (the daemon's clock decides)."""
    if v != "now":
        _number_text(v, path, lim)


_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?([+-]\d{2}:\d{2}|Z)?$")


def _time_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    """A report's start or end: a number or a date / date-time (YYYY-MM-DD[THH[:MM[:SS]]]
    with an optional offset; the daemon reads one without an offset in the report's zone)."""
    if not _DATE_TEXT.match(v):
        _number_text(v, path, lim)


def _report_end_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    """A report's end: as a start, or the word `now` (the daemon's clock decides)."""
    if v != "now":
        _time_text(v, path, lim)


def _month_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    if not re.match(r"^\d{4}-\d{1,2}$", v):
        raise WireError(path, "must be a month YYYY-MM", v)


def _job_or_task(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    """A job id `N` or an array task `N_M`, ASCII digits only."""
    head, sep, task = v.partition("_")
    for part in (head, task) if sep else (head,):
        _int_text(part, path, lim)


def _view_keys(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    for k in v.split(","):
        if k and not (k.isascii() and k.replace("_", "a").isalnum()):
            raise WireError(path, "must be JOB_VIEW keys separated by commas", v)


def _fold(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    if v not in ("", "0", "1", "runs"):
        raise WireError(path, "must be 1 (one row per job array) or runs (runs of alike tasks)", v)


def _snapshot_jobs(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    if v not in ("", "all", "running"):
        raise WireError(path, "must be all or running", v)


def _number_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    try:
        x = float(v)
    except ValueError:
        raise WireError(path, "must be a number", v) from None
    if not (-MAX_UNIX <= x <= MAX_UNIX):
        raise WireError(path, f"must be a number between {-MAX_UNIX:g} and {MAX_UNIX:g}", v)


def _int_text(v: str, path: str, lim: Mapping[str, Any] | None) -> None:
    if not (v.isascii() and v.isdigit()) or int(v) > MAX_ID:
        raise WireError(path, f"must be an integer between 0 and {MAX_ID}", v)


NAME = Str(1024)                         # names, accounts, partitions, QOS, comments
NAME_OR_NULL = Str(1024, null=True)
PATH = Str(4096, null=True)
PATTERN = Str(4096, null=True, test=_pattern)
HOSTLIST = Str(1 << 20, null=True, test=_hostlist)
COUNT = Int(1, MAX_COUNT, null=True)
SIZE_MB = Int(0, MAX_MEM_MB, null=True)
TIME_S = Int(1, MAX_TIME_S, null=True, also={-1: "UNLIMITED"})
NICE = Int(-NICE_MAX, NICE_MAX, null=True)
UNIX = Num(0, MAX_UNIX, null=True)
FLAG = Bool()
JOB_ID_TEXT = Str(256, min_len=1, test=_job_ids, what="a job id")
JOB_ID = Either(Int(0, MAX_ID), JOB_ID_TEXT)
JOB_IDS = List(JOB_ID, max_items=100_000)
ENV = Map(Str("max_env_bytes", min_len=1, test=_env_name), Str("max_env_bytes"), max_bytes="max_env_bytes",
          null=True)
ARGV = List(Str("max_env_bytes"), max_items=100_000, max_bytes="max_env_bytes", null=True)
GPU_TYPE = Str(64, null=True)
GPUS = shaped(m.GpuCount, {"type": GPU_TYPE, "count": Int(0, MAX_COUNT)}, null=True)
GRES = List(shaped(m.GresItem, {"name": Str(64, min_len=1), "type": GPU_TYPE, "count": Int(0, MAX_COUNT)}),
            max_items=64, null=True)
SIGNAL = shaped(m.SignalSpec, {"signal": Int(1, SIGRTMAX), "time_s": Int(0, 65535), "batch_only": FLAG},
                null=True, what="an object {signal, time_s, batch_only}")


def _nodes_range(spec: dict, path: str, lim: Mapping[str, Any] | None) -> None:
    lo, hi = spec.get("nodes_min"), spec.get("nodes_max")
    if lo is not None and hi is not None and hi < lo:
        raise WireError(f"{path}.nodes_max", f"must be >= nodes_min ({lo})", hi)


JOB_SPEC = shaped(m.JobSpec, {
    "name": NAME_OR_NULL, "script": Str("max_script_bytes"), "script_path": PATH,
    "argv": ARGV, "workdir": PATH, "submit_dir": PATH, "environment": ENV, "export": Str("max_env_bytes", null=True),
    "account": NAME_OR_NULL, "partition": NAME_OR_NULL, "qos": NAME_OR_NULL, "comment": NAME_OR_NULL,
    "reservation": NAME_OR_NULL, "constraint": NAME_OR_NULL, "mail_type": NAME_OR_NULL, "mail_user": NAME_OR_NULL,
    "time_limit_s": TIME_S, "time_min_s": TIME_S, "nodes_min": COUNT, "nodes_max": COUNT, "ntasks": COUNT,
    "ntasks_per_node": COUNT, "cpus_per_task": COUNT, "cpus_per_gpu": COUNT,
    "mem_mb": SIZE_MB, "mem_per_cpu_mb": SIZE_MB, "mem_per_gpu_mb": SIZE_MB,
    "gres": GRES, "gpus": GPUS, "gpus_per_node": GPUS, "gpus_per_task": GPUS,
    "output": PATTERN, "error": PATTERN, "input": PATTERN, "open_mode": Enum("truncate", "append", null=True),
    "array": Str(65536, null=True), "dependency": Str(65536, null=True), "begin_time": UNIX,
    "hold": FLAG, "nice": NICE, "requeue": FLAG, "exclusive": FLAG, "signal": SIGNAL,
    "test_only": FLAG, "wait": FLAG, "lsf": FLAG, "unnamed": FLAG, "wrap": FLAG, "parsable": FLAG,
    "submit_host": Str(255, null=True), "clusters": NAME_OR_NULL, "nodelist": HOSTLIST, "exclude": HOSTLIST,
    "submit_token": Str(64, null=True), "uid": Int(0, MAX_UID, null=True), "gid": Int(0, MAX_UID, null=True),
}, unknown="scalars", checks=(_nodes_range,), what="a job specification (an object)")

UPDATE = shaped(m.JobUpdate, {
    "time_limit_s": Int(1, MAX_TIME_S, also={-1: "UNLIMITED"}), "nice": Int(-NICE_MAX, NICE_MAX),
    "account": Str(1024, min_len=1), "name": NAME, "comment": NAME_OR_NULL, "partition": Str(1024, min_len=1),
    "qos": Str(1024, min_len=1), "begin_time": UNIX, "nodelist": HOSTLIST, "exclude": HOSTLIST,
}, null=True)

FILTER = Either(Str(65536), List(Str(1024), max_items=10_000), null=True)
RESOURCES = Map(Str(128, min_len=1), Map(Str(64, min_len=1), Num(-1, 1e15)), null=True)
SHARES = Either(Int(0, 2 ** 31 - 1), Enum("parent"), null=True)
WHEN = Either(Str(64), Num(0, MAX_UNIX), null=True)
PRICE = shaped(m.PriceEntry, {"tres": Str(128, min_len=1), "per_hour": Either(Str(64), Num(0, 1e15)),
                              "currency": Str(16), "valid_from": WHEN, "valid_to": WHEN}, unknown="allow")
ACCOUNT = shaped(m.AccountEntry, {
    "name": Str(256, min_len=1), "parent": Str(256, null=True), "priority": Int(-2 ** 31, 2 ** 31 - 1),
    "shares": Int(0, 2 ** 31 - 1, null=True), "resources": RESOURCES, "users": List(Str(256), null=True),
    "default_for": List(Str(256), null=True)}, unknown="allow")
USER = shaped(m.UserEntry, {"name": Str(256, min_len=1), "account": Str(256, min_len=1), "shares": SHARES,
                            "default": FLAG}, unknown="allow")
ACCOUNTS_DOC = shaped(m.AccountsFile, {"account": List(ACCOUNT), "user": List(USER), "price": List(PRICE)},
                      unknown="allow", null=True)

# ---------------------------------------------------------------------------- queries
Q_TEXT = Str(65536)
Q_FLAG = Str(16)
Q_NUMBER = Str(64, test=_number_text)
Q_END = Str(64, test=_end_text)
Q_INT = Str(32, test=_int_text)


def Q(shape: Any, **fields: Any) -> Obj:  # noqa: N802 - reads as a schema
    """A query of `shape`: its keys are strings; keys it does not name are ignored by the handlers."""
    return shaped(shape, fields, unknown="allow")


def _step_query(q: dict, path: str, lim: Mapping[str, Any] | None) -> None:
    if "job_id" in q and "step_id" not in q:
        raise WireError("step_id", "is required with job_id")


NO_QUERY = Obj({}, unknown="allow")  # a route that reads no query (the keys are ignored)
JOB_FILTERS = {"users": Q_TEXT, "accounts": Q_TEXT, "partitions": Q_TEXT, "states": Q_TEXT, "names": Q_TEXT,
               "qos": Q_TEXT}


def _body(shape: Any, fields: dict[str, Any], checks: tuple[Any, ...] = ()) -> Obj:
    return shaped(shape, fields, what="a JSON object", checks=checks)


REQUESTS: dict[tuple[str, str], Route] = {
    ("GET", "/v1/ping"): Route(NO_QUERY, None),
    ("POST", "/v1/jobs"): Route(NO_QUERY, shaped(m.SubmitRequest, {"spec": JOB_SPEC}, unknown="scalars",
                                                 what="a JSON object")),
    ("GET", "/v1/jobs"): Route(Q(m.JobsQuery, ids=Str(1 << 20, test=_job_ids), all=Q_FLAG, fold=Str(16, test=_fold),
                                 keys=Str(4096, test=_view_keys),
                                 nodes=HOSTLIST, **JOB_FILTERS), None),
    ("POST", "/v1/jobs/signal"): Route(NO_QUERY, _body(m.SignalRequest, {
        "ids": List(JOB_ID, max_items=100_000, null=True),
        "filters": shaped(m.SignalFilters, {"users": FILTER, "accounts": FILTER, "names": FILTER, "states": FILTER,
                                            "partitions": FILTER, "qos": FILTER, "nodes": HOSTLIST}, null=True),
        "signal": Int(0, SIGRTMAX, null=True), "batch_only": FLAG})),
    ("POST", "/v1/jobs/hold"): Route(NO_QUERY, _body(m.HoldRequest, {"ids": JOB_IDS, "user": FLAG})),
    ("POST", "/v1/jobs/release"): Route(NO_QUERY, _body(m.ReleaseRequest, {"ids": JOB_IDS})),
    ("POST", "/v1/jobs/requeue"): Route(NO_QUERY, _body(m.RequeueRequest, {"ids": JOB_IDS, "hold": FLAG})),
    ("POST", "/v1/jobs/update"): Route(NO_QUERY, _body(m.UpdateRequest, {"ids": JOB_IDS, "changes": UPDATE})),
    ("GET", "/v1/accounting"): Route(Q(m.AccountingQuery, ids=Str(1 << 20, test=_job_ids), users=Q_TEXT,
                                       accounts=Q_TEXT, states=Q_TEXT, names=Q_TEXT, partitions=Q_TEXT, qos=Q_TEXT,
                                       start=Q_NUMBER, end=Q_NUMBER, all_users=Q_FLAG, duplicates=Q_FLAG,
                                       fold=Q_FLAG), None),
    ("GET", "/v1/nodes"): Route(NO_QUERY, None),
    ("GET", "/v1/snapshot"): Route(Q(m.SnapshotQuery, jobs=Str(16, test=_snapshot_jobs)), None),
    ("POST", "/v1/steps"): Route(NO_QUERY, _body(m.StepRequest, {
        "job_id": Int(1, MAX_ID), "argv": List(Str("max_env_bytes"), min_items=1, max_items=100_000,
                                               max_bytes="max_env_bytes"),
        "ntasks": COUNT, "nodes": COUNT, "env": ENV, "cwd": PATH})),
    ("GET", "/v1/steps"): Route(shaped(m.StepsQuery, {"job_id": Q_INT, "step_id": Q_INT}, unknown="allow",
                                       checks=(_step_query,)), None),
    ("POST", "/v1/steps/cancel"): Route(NO_QUERY, _body(m.StepCancelRequest, {"job_id": Int(1, MAX_ID),
                                                                             "step_id": Int(0, MAX_ID)})),
    ("GET", "/v1/why"): Route(Q(m.WhyQuery, job=JOB_ID_TEXT), None),
    ("GET", "/v1/controller"): Route(NO_QUERY, None),
    ("POST", "/v1/nodes/state"): Route(NO_QUERY, _body(m.NodeStateRequest, {
        "node": Str(255, min_len=1), "action": Enum("drain", "resume", "down"), "reason": NAME_OR_NULL})),
    ("POST", "/v1/token"): Route(NO_QUERY, _body(m.TokenRequest, {
        "lifespan": Int(1, 365 * 86400, null=True), "username": Str(255, min_len=1, null=True)})),
    ("GET", "/v1/accounts"): Route(Q(m.AccountsQuery, slurm=Q_FLAG), None),
    ("POST", "/v1/accounts/apply"): Route(NO_QUERY, _body(m.ApplyRequest, {"doc": ACCOUNTS_DOC, "dry_run": FLAG})),
    ("POST", "/v1/accounts/modify"): Route(NO_QUERY, _body(m.ModifyRequest, {
        "op": Enum("account.add", "account.modify", "account.remove", "user.add", "user.modify", "user.remove"),
        "name": Str(256, min_len=1), "parent": Str(256, null=True), "priority": Int(-2 ** 31, 2 ** 31 - 1, null=True),
        "shares": SHARES, "resources": RESOURCES, "account": Str(256, null=True), "default": FLAG,
        "policy": Map(Str(64, min_len=1), Json(max_depth=3), null=True), "dry_run": FLAG})),
    # chargeback (batchd/accounting/routes.py)
    ("GET", "/v1/report"): Route(Q(m.ReportQuery, start=Str(64, test=_time_text), end=Str(64, test=_report_end_text),
                                   month=Str(16, test=_month_text), tz=Str(64), by=Str(256), accounts=Q_TEXT,
                                   users=Q_TEXT, spread_idle=Q_FLAG, daily=Q_FLAG, raw=Q_FLAG, zero_gpu_s=Q_NUMBER,
                                   by_user=Q_FLAG), None),
    ("GET", "/v1/prices"): Route(NO_QUERY, None),
    ("POST", "/v1/prices"): Route(NO_QUERY, _body(m.PricesRequest, {
        "prices": List(PRICE, min_items=1, max_items=10_000)})),
    ("GET", "/v1/eff"): Route(Q(m.EffQuery, job=Str(64, test=_job_or_task)), None),
    ("POST", "/v1/rollup"): Route(NO_QUERY, _body(m.RollupRequest, {})),
}
