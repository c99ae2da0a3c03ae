"""The message shapes of the wire protocol (`batchd/protocol.py`) as TypedDicts: every
endpoint's query, body and reply, and the views inside replies (the four large ones,
JOB_VIEW, ACCT_ROW, NODE_VIEW and PARTITION_VIEW, are `batchd/server/viewshapes.py`'s and
are named here too).

One definition serves three readers:

- the type checker: route handlers (`batchd/server/api.py`) and the service take and return them;
- the door: each request rule of `batchd/server/wire_requests.py` and reply rule of
  `batchd/server/wire_replies.py` is built from its shape (`batchd.server.wire.shaped`), which refuses, at
  import, a rule whose fields are not exactly the shape's keys or whose required fields are
  not the shape's required keys; the rules add the types' bounds (sizes, ranges, limits);
- the tests: `tests/wire/test_protocol.py` checks real replies against these keys.

A key the shape marks `NotRequired` (or a shape declared `total=False`) may be absent; a
reply may carry keys of a newer daemon (the reply rules let them through), but this daemon
sends none that is not declared here. Free-form parts (the scheduler snapshot's entries, a
report's rows) are `dict[str, Any]`. Times are unix seconds, durations seconds, memory MiB.

Daemon side and type checking only: the commands (`cli/`) import this module under
`TYPE_CHECKING` at most, so they keep their fast start (`batchd/protocol.py` stays free of
imports).
"""

# No `from __future__ import annotations`: Python 3.11 reads Required/NotRequired of a
# TypedDict from evaluated annotations only (the shapes' required keys feed the rules).
from typing import Any, Literal, NotRequired, TypedDict

from batchd.server.viewshapes import AcctRow, JobView, NodeView, PartitionView

Query = dict[str, str]  # a parsed query string: the handlers' view of every query shape below


# ------------------------------------------------------------------------------ requests
class GpuCount(TypedDict):
    type: NotRequired[str | None]
    count: int


class GresItem(TypedDict):
    name: str
    type: NotRequired[str | None]
    count: int


class SignalSpec(TypedDict):
    """--signal=[B:]SIG[@TIME]."""
    signal: int
    time_s: NotRequired[int]
    batch_only: NotRequired[bool | None]


class JobSpec(TypedDict, total=False):
    """JOB_SPEC: what sbatch/bsub send (built by cli/slurmopts.py, resolved by
    batchd/server/jobspec.py); protocol.py says what each key means. Keys this daemon does not know
    may carry a scalar (a newer command's)."""
    name: str | None
    script: str
    script_path: str | None
    argv: list[str] | None
    workdir: str | None
    submit_dir: str | None
    environment: dict[str, str] | None
    export: str | None
    account: str | None
    partition: str | None
    qos: str | None
    comment: str | None
    reservation: str | None
    constraint: str | None
    mail_type: str | None
    mail_user: str | None
    time_limit_s: int | None
    time_min_s: int | None
    nodes_min: int | None
    nodes_max: int | None
    ntasks: int | None
    ntasks_per_node: int | None
    cpus_per_task: int | None
    cpus_per_gpu: int | None
    mem_mb: int | None
    mem_per_cpu_mb: int | None
    mem_per_gpu_mb: int | None
    gres: list[GresItem] | None
    gpus: GpuCount | None
    gpus_per_node: GpuCount | None
    gpus_per_task: GpuCount | None
    output: str | None
    error: str | None
    input: str | None
    open_mode: Literal["truncate", "append"] | None
    array: str | None
    dependency: str | None
    begin_time: float | None
    hold: bool | None
    nice: int | None
    requeue: bool | None
    exclusive: bool | None
    signal: SignalSpec | None
    test_only: bool | None
    wait: bool | None
    lsf: bool | None
    unnamed: bool | None
    wrap: bool | None
    parsable: bool | None
    submit_host: str | None
    clusters: str | None
    nodelist: str | None
    exclude: str | None
    submit_token: str | None
    uid: int | None
    gid: int | None


class SubmitRequest(TypedDict):
    spec: JobSpec


JobIds = list[int | str]  # job ids: numbers, or Slurm's texts "123", "123_4", "123_[1-3]"


class JobsQuery(TypedDict, total=False):
    """GET /v1/jobs: lists are comma separated."""
    ids: str
    all: str
    fold: str
    keys: str
    nodes: str
    users: str
    accounts: str
    partitions: str
    states: str
    names: str
    qos: str


class SignalFilters(TypedDict, total=False):
    users: str | list[str] | None
    accounts: str | list[str] | None
    names: str | list[str] | None
    states: str | list[str] | None
    partitions: str | list[str] | None
    qos: str | list[str] | None
    nodes: str | None


class SignalRequest(TypedDict, total=False):
    ids: JobIds | None
    filters: SignalFilters | None
    signal: int | None
    batch_only: bool | None


class HoldRequest(TypedDict):
    ids: JobIds
    user: NotRequired[bool | None]


class ReleaseRequest(TypedDict):
    ids: JobIds


class RequeueRequest(TypedDict):
    ids: JobIds
    hold: NotRequired[bool | None]


class JobUpdate(TypedDict, total=False):
    time_limit_s: int
    nice: int
    account: str
    name: str
    comment: str | None
    partition: str
    qos: str
    begin_time: float | None
    nodelist: str | None
    exclude: str | None


class UpdateRequest(TypedDict):
    ids: JobIds
    changes: NotRequired[JobUpdate | None]


class AccountingQuery(TypedDict, total=False):
    ids: str
    users: str
    accounts: str
    states: str
    names: str
    partitions: str
    qos: str
    start: str
    end: str
    all_users: str
    duplicates: str
    fold: str


class SnapshotQuery(TypedDict, total=False):
    """GET /v1/snapshot: `jobs=running` leaves the pending jobs out (sshare reads only the
    running ones)."""
    jobs: str


class StepRequest(TypedDict):
    job_id: int
    argv: list[str]
    ntasks: NotRequired[int | None]
    nodes: NotRequired[int | None]
    env: NotRequired[dict[str, str] | None]
    cwd: NotRequired[str | None]


class StepsQuery(TypedDict, total=False):
    """Both or neither: one step's tasks, or every active step."""
    job_id: str
    step_id: str


class StepCancelRequest(TypedDict):
    job_id: int
    step_id: int


class WhyQuery(TypedDict):
    job: str


class NodeStateRequest(TypedDict):
    node: str
    action: Literal["drain", "resume", "down"]
    reason: NotRequired[str | None]


class TokenRequest(TypedDict, total=False):
    lifespan: int | None
    username: str | None


class AccountsQuery(TypedDict, total=False):
    slurm: str


class AccountEntry(TypedDict):
    """An `[[account]]` of an accounts file (batchd.server.accounts); policy keys ride along."""
    name: str
    parent: NotRequired[str | None]
    priority: NotRequired[int]
    shares: NotRequired[int | None]
    resources: NotRequired[dict[str, dict[str, float]] | None]
    users: NotRequired[list[str] | None]
    default_for: NotRequired[list[str] | None]


class UserEntry(TypedDict):
    name: str
    account: str
    shares: NotRequired[int | Literal["parent"] | None]
    default: NotRequired[bool | None]


class PriceEntry(TypedDict):
    """A `[[price]]`: per_hour a decimal text, valid_from/valid_to dates or unix seconds."""
    tres: str
    per_hour: str | float
    currency: NotRequired[str]
    valid_from: NotRequired[str | float | None]
    valid_to: NotRequired[str | float | None]


class AccountsFile(TypedDict, total=False):
    account: list[AccountEntry]
    user: list[UserEntry]
    price: list[PriceEntry]


class ApplyRequest(TypedDict):
    doc: AccountsFile | None
    dry_run: NotRequired[bool | None]


class ModifyRequest(TypedDict):
    op: Literal["account.add", "account.modify", "account.remove", "user.add", "user.modify", "user.remove"]
    name: str
    parent: NotRequired[str | None]
    priority: NotRequired[int | None]
    shares: NotRequired[int | Literal["parent"] | None]
    resources: NotRequired[dict[str, dict[str, float]] | None]
    account: NotRequired[str | None]
    default: NotRequired[bool | None]
    policy: NotRequired[dict[str, Any] | None]
    dry_run: NotRequired[bool | None]


class ReportQuery(TypedDict, total=False):
    """start/end unix seconds or dates in tz (end also "now"), month YYYY-MM, by a comma list."""
    start: str
    end: str
    month: str
    tz: str
    by: str
    accounts: str
    users: str
    spread_idle: str
    daily: str
    raw: str
    zero_gpu_s: str
    by_user: str


class PricesRequest(TypedDict):
    prices: list[PriceEntry]


class EffQuery(TypedDict, total=False):
    job: str


class RollupRequest(TypedDict):
    """An empty object."""


# ------------------------------------------------------------------------------ views
# JOB_VIEW, ACCT_ROW, NODE_VIEW and PARTITION_VIEW are batchd/server/viewshapes.py's (imported above)
class JobError(TypedDict):
    id: str
    message: str


class StepTask(TypedDict):
    procid: int
    node: str


class StepTaskState(TypedDict):
    procid: int
    node: str
    state: str
    exit_code: NotRequired[int | None]
    exit_signal: NotRequired[int | None]


class ActiveStep(TypedDict):
    job_id: int
    step_id: int
    name: NotRequired[str]
    node_list: NotRequired[str]
    ntasks: NotRequired[int]
    start_time: NotRequired[float | None]
    state: str


class AccountView(TypedDict):
    """An account as `batchd account show` and sacctmgr read it (batchd.server.accounts.to_doc)."""
    name: str
    parent: NotRequired[str | None]
    priority: NotRequired[int]
    shares: NotRequired[int]
    resources: NotRequired[dict[str, dict[str, float]]]
    policy: NotRequired[dict[str, Any]]


class UserView(TypedDict):
    name: str
    account: str
    shares: NotRequired[int | Literal["parent"]]
    default: NotRequired[bool]
    policy: NotRequired[dict[str, Any]]


class PriceView(TypedDict):
    tres: str
    per_hour: str
    currency: str
    valid_from: float
    valid_to: float | None


# ------------------------------------------------------------------------------ replies
class Ping(TypedDict):
    cluster: str
    version: str


class SubmitReply(TypedDict):
    """The job id (an array's master id) and its task ids; `duplicate` when the submission's
    token was stored already; --test-only: job_id None, start_time, nodes, partition, cpus."""
    job_id: int | None
    array_task_ids: NotRequired[list[int] | None]
    duplicate: NotRequired[bool]
    start_time: NotRequired[float | None]
    nodes: NotRequired[str | None]
    partition: NotRequired[str | None]
    cpus: NotRequired[int | None]


class TaskRunView(TypedDict):
    """Alike pending tasks of a job array that never ran (`fold=runs`): `view` the JOB_VIEW of
    the first; `tasks` [job id, task id, count] segments, each `count` tasks whose job id and
    task id both step by one; every task's view is `view` with its own `id`,
    `array_task_id` and `display_id` (`<array_job_id>_<task id>`)."""
    view: JobView
    tasks: list[list[int]]


class JobsReply(TypedDict):
    jobs: list[JobView]
    task_runs: NotRequired[list[TaskRunView]]


class DoneReply(TypedDict):
    """A change of jobs: the display ids changed, and a Slurm-worded error per job that was not."""
    done: list[str]
    errors: list[JobError]


class AccountingReply(TypedDict):
    """`fold=1`: the pending array tasks that never ran have a record for the first of each
    run of alike tasks only; `pending_tasks` names, per array job id, the task ids of the
    others, which sacct folds into that array's one pending row."""
    records: list[AcctRow]
    pending_tasks: NotRequired[dict[str, list[int]]]


class NodesReply(TypedDict):
    nodes: list[NodeView]
    partitions: list[PartitionView]


class SnapshotReply(TypedDict):
    """The scheduler snapshot of DESIGN.md section 5 (`batchd plan --dump`, sshare, sprio)."""
    version: NotRequired[int]
    now: NotRequired[float]
    policy: NotRequired[dict[str, Any]]
    cluster: NotRequired[str]
    partitions: NotRequired[list[dict[str, Any]]]
    nodes: list[dict[str, Any]]
    accounts: list[dict[str, Any]]
    users: NotRequired[list[dict[str, Any]]]
    usage: NotRequired[dict[str, Any]]
    jobs: list[dict[str, Any]]
    qos: NotRequired[list[dict[str, Any]]]


class StepReply(TypedDict):
    job_id: int
    step_id: int
    tasks: list[StepTask]


class StepTasksReply(TypedDict):
    tasks: list[StepTaskState]


class ActiveStepsReply(TypedDict):
    steps: list[ActiveStep]


class StepCancelReply(TypedDict):
    cancelled: int


class WhyReply(TypedDict):
    job: int
    lines: list[str]


class ControllerReply(TypedDict, total=False):
    """Who holds the controller role; `this_node`/`this_is_controller` from a daemon."""
    node: str | None
    pid: int | None
    since: float | None
    host: str | None
    this_node: str
    this_is_controller: bool


class TokenReply(TypedDict):
    token: str
    user: str
    expires: int


class NodeStateReply(TypedDict):
    node: str
    state: str


class AccountsReply(TypedDict):
    """The accounts file of the database's tree; with slurm=1 also what sacctmgr prints."""
    account: list[AccountView]
    user: NotRequired[list[UserView]]
    cluster: NotRequired[str]
    qos: NotRequired[list[str]]
    qos_info: NotRequired[list[dict[str, Any]]]
    admins: NotRequired[list[str]]
    gpu_types: NotRequired[list[str]]


class ApplyReply(TypedDict):
    changes: list[str]
    applied: bool


class ReportReply(TypedDict):
    """The report of DESIGN.md section 7 (batchd.accounting.report), with the scope the
    caller may see and the accounts' budgets."""
    period: dict[str, Any]
    currency: NotRequired[str]
    rate_card: NotRequired[list[dict[str, Any]]]
    group_by: NotRequired[list[str]]
    rows: list[dict[str, Any]]
    user_rows: NotRequired[list[dict[str, Any]]]
    idle_gpu_hours: NotRequired[float | None]
    idle_cost: NotRequired[str | None]
    capacity_gpu_hours: NotRequired[float]
    down_gpu_hours: NotRequired[float]
    down_cost: NotRequired[str]
    totals: dict[str, Any]
    jobs_cost: NotRequired[str]
    reconciled: NotRequired[bool]
    running_included: NotRequired[int]
    flags: NotRequired[list[dict[str, Any]]]
    daily: NotRequired[dict[str, dict[str, float]]]
    capacity: NotRequired[Any]
    cluster: NotRequired[str]
    scope: NotRequired[Literal["all", "member_accounts"]]
    budgets: NotRequired[list[dict[str, Any]]]


class PricesReply(TypedDict):
    prices: list[PriceView]
    currency: str


class AddedReply(TypedDict):
    added: int


class EffReply(TypedDict):
    cluster: NotRequired[str]
    job: dict[str, Any]
    now: NotRequired[float]
    zero_gpu_flag_s: NotRequired[float]
    runs: list[dict[str, Any]]
    efficiency: NotRequired[dict[str, Any] | None]
    summary: NotRequired[Any]


class RollupReply(TypedDict):
    rolled: int
