"""The SQL schema: every table batchd keeps, as SQLAlchemy 2 typed models.

The schema exists in a database only through the alembic revisions in `migrations/`;
a test checks that `upgrade head` on an empty database equals this metadata. Times
are unix seconds (double precision), durations seconds, memory MiB.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Meta(Base):
    """Key/value facts of the installation (`next_job_id`)."""
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False)


class JobRow(Base):
    """One job (one array task). `spec` is the submitted JOB_SPEC but for its script,
    environment and argv (those are in `job_scripts`), `request` the resolved request of
    batchd.server.jobspec.resolve, `allocation` the current run's placement ({node: {tasks,
    gpus, cpus, memory_mb}})."""
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    array_job_id: Mapped[int | None] = mapped_column(Integer)
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    user: Mapped[str] = mapped_column(String(64), nullable=False)
    uid: Mapped[int] = mapped_column(Integer, nullable=False)
    gid: Mapped[int] = mapped_column(Integer, nullable=False)
    account: Mapped[str] = mapped_column(String(64), nullable=False)
    partition: Mapped[str] = mapped_column(String(64), nullable=False)
    qos: Mapped[str] = mapped_column(String(64), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    reason: Mapped[str] = mapped_column(String(64), nullable=False, default="None")
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    nice: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    hold: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    submit_time: Mapped[float] = mapped_column(Float, nullable=False)
    eligible_time: Mapped[float | None] = mapped_column(Float)
    begin_time: Mapped[float | None] = mapped_column(Float)
    start_time: Mapped[float | None] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float)
    time_limit_s: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    exit_signal: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    restarts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    requeue: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    dependency: Mapped[str | None] = mapped_column(String(1000))
    comment: Mapped[str | None] = mapped_column(String(1000))
    node_list: Mapped[str] = mapped_column(String(1000), nullable=False, default="")
    tres_req: Mapped[str] = mapped_column(String(500), nullable=False, default="")
    tres_alloc: Mapped[str] = mapped_column(String(500), nullable=False, default="")
    billing: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    allocation: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # the allocation's charge in batchd.slurm.gres's record form (TRES + card-share keys), set
    # with the allocation when the job starts; None while pending and for older rows
    charge: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    request: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # what the controller asked the node agent to do with the running job:
    # "cancel", "preempt", "requeue", "signal:<n>" (None = nothing); on a PENDING job,
    # "preemptor": victims were preempted for it and what they free is reserved for it.
    # action_by: the uid who asked, but for "preempt" the id of the job it is preempted for
    action: Mapped[str | None] = mapped_column(String(32))
    action_by: Mapped[int | None] = mapped_column(Integer)
    # when the controller's backfill plan expects a pending job to start (squeue --start)
    start_estimate: Mapped[float | None] = mapped_column(Float)
    # the client-made token of the submission (one per sbatch call, shared by an array's
    # tasks): a retry of a submission whose reply was lost returns the same job ids
    submit_token: Mapped[str | None] = mapped_column(String(64))
    # the run (restarts value) the node agent last launched; set before the launch, so a
    # run whose spool directory vanished is never started a second time
    launched_run: Mapped[int | None] = mapped_column(Integer)
    # (state, end_time): a state's ended jobs by end time, one index range (a cycle's last
    # day); the ids and times after them: the listings of pending array tasks read only
    # these, from the index
    __table_args__ = (Index("ix_jobs_state_end_time_ids", "state", "end_time", "restarts", "array_job_id",
                            "array_task_id", "submit_time"),
                      Index("ix_jobs_array_job_id", "array_job_id"),
                      Index("ix_jobs_uid_submit_token", "uid", "submit_token"),
                      # the listings' filters and time windows (batchd.store.jobviews)
                      Index("ix_jobs_end_time", "end_time"), Index("ix_jobs_submit_time", "submit_time"),
                      Index("ix_jobs_user", "user"), Index("ix_jobs_account", "account"))


class JobScript(Base):
    """The heavy part of a submission's spec (batchd.store.jobscripts.HEAVY_KEYS: script,
    environment, argv; kilobytes, read only to launch a job or show its script), kept
    apart so that a job row stays small: listings and cycles read every active row. One
    per job, keyed by its id, and one per job array, keyed by `array_job_id` (the
    tasks share it). No foreign key: written in the submission's transaction, never
    changed, and the jobs table has no deletes."""
    __tablename__ = "job_scripts"
    job_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)


class UsageRecord(Base):
    """One run of a job (start -> end): what was allocated and what it cost. Written
    exactly once per (job_id, run): the unique constraint makes a repeated write a no-op."""
    __tablename__ = "usage_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(Integer, nullable=False)
    run: Mapped[int] = mapped_column(Integer, nullable=False)
    array_job_id: Mapped[int | None] = mapped_column(Integer)
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    account: Mapped[str] = mapped_column(String(64), nullable=False)
    user: Mapped[str] = mapped_column(String(64), nullable=False)
    uid: Mapped[int] = mapped_column(Integer, nullable=False)
    gid: Mapped[int] = mapped_column(Integer, nullable=False)
    partition: Mapped[str] = mapped_column(String(64), nullable=False)
    qos: Mapped[str] = mapped_column(String(64), nullable=False)
    node_list: Mapped[str] = mapped_column(String(1000), nullable=False)
    tres_alloc: Mapped[str] = mapped_column(String(500), nullable=False)
    tres: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    billing: Mapped[float] = mapped_column(Float, nullable=False)
    submit_time: Mapped[float] = mapped_column(Float, nullable=False)
    start_time: Mapped[float] = mapped_column(Float, nullable=False)
    end_time: Mapped[float] = mapped_column(Float, nullable=False)
    elapsed_s: Mapped[int] = mapped_column(Integer, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    exit_code: Mapped[int] = mapped_column(Integer, nullable=False)
    exit_signal: Mapped[int] = mapped_column(Integer, nullable=False)
    cpu_time_s: Mapped[float | None] = mapped_column(Float)
    max_rss_mb: Mapped[float | None] = mapped_column(Float)
    gpu_util_pct: Mapped[float | None] = mapped_column(Float)
    gpu_mem_mb: Mapped[float | None] = mapped_column(Float)
    __table_args__ = (UniqueConstraint("job_id", "run", name="uq_usage_records_job_run"),
                      Index("ix_usage_records_end_time", "end_time"),
                      Index("ix_usage_records_start_time", "start_time"))


class AccountRow(Base):
    """An account (a KAI queue): `resources` maps a TRES name to
    {quota, limit, over_quota_weight, lending_limit}."""
    __tablename__ = "accounts"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    parent: Mapped[str | None] = mapped_column(String(64))
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=100)
    shares: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created: Mapped[float] = mapped_column(Float, nullable=False)
    # Slurm's association limits of the account (batchd.slurm.assocpolicy); None = none
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Association(Base):
    """A user's membership of an account; `shares` None = FairShare=parent; `policy` the
    user's own association limits (batchd.slurm.assocpolicy), None = the account's."""
    __tablename__ = "associations"
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    account: Mapped[str] = mapped_column(String(64), primary_key=True)
    shares: Mapped[int | None] = mapped_column(Integer, default=1)
    is_default: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class NodeRow(Base):
    """A node as the cluster sees it; `gpus` is the snapshot's device list."""
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    reason: Mapped[str | None] = mapped_column(String(200))
    cpus: Mapped[int] = mapped_column(Integer, nullable=False)
    memory_mb: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus: Mapped[list[Any]] = mapped_column(JSON, nullable=False)
    heartbeat: Mapped[float] = mapped_column(Float, nullable=False)
    # when the node first registered: its capacity counts in reports from then on
    registered: Mapped[float] = mapped_column(Float, nullable=False)
    # who set `reason` and when (sinfo -R USER and TIMESTAMP); None with no reason
    reason_uid: Mapped[int | None] = mapped_column(Integer)
    reason_time: Mapped[float | None] = mapped_column(Float)


class NodeEvent(Base):
    """A node's state changes (registration included), for the report's down GPU-time:
    the node was in `state` from `time` until its next event. Written in the same
    transaction as the change."""
    __tablename__ = "node_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(64), nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    reason: Mapped[str | None] = mapped_column(String(200))
    __table_args__ = (Index("ix_node_events_node_time", "node", "time"),)


class UsageState(Base):
    """Decayed fair-share usage (billing-seconds) per association key
    (`account` or `account/user`), as of `updated`."""
    __tablename__ = "usage_state"
    key: Mapped[str] = mapped_column(String(140), primary_key=True)
    usage: Mapped[float] = mapped_column(Float, nullable=False)
    updated: Mapped[float] = mapped_column(Float, nullable=False)


class AuditRow(Base):
    """Every admin action: who, when, what."""
    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    uid: Mapped[int] = mapped_column(Integer, nullable=False)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    detail: Mapped[str] = mapped_column(Text, nullable=False)


class StepTask(Base):
    """One task of a job step started with `srun` inside a job: it runs on `node` (one
    of the job's nodes) through that node's agent. `run` is the job's run (restart)."""
    __tablename__ = "step_tasks"
    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    procid: Mapped[int] = mapped_column(Integer, primary_key=True)
    localid: Mapped[int] = mapped_column(Integer, nullable=False)
    nodeid: Mapped[int] = mapped_column(Integer, nullable=False)
    node: Mapped[str] = mapped_column(String(64), nullable=False)
    ntasks: Mapped[int] = mapped_column(Integer, nullable=False)
    argv: Mapped[list[Any]] = mapped_column(JSON, nullable=False)
    env: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    cwd: Mapped[str] = mapped_column(String(4096), nullable=False)
    stdout: Mapped[str] = mapped_column(String(4096), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    exit_code: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    exit_signal: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    start_time: Mapped[float | None] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float)
    __table_args__ = (Index("ix_step_tasks_node_state", "node", "state"),)


# ---- chargeback tables (issue 6) ----
# Owned by batchd.accounting; SQL in batchd/store/accounting.py; revision 0002_chargeback.


class PriceRow(Base):
    """A price per TRES-hour (`mem`: per GiB-hour) valid over [valid_from, valid_to)
    (unix seconds, hour-aligned, valid_to None = open). `per_hour` is a decimal string,
    never a float. Where validity periods of one TRES overlap, the one that starts
    latest applies."""
    __tablename__ = "prices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tres: Mapped[str] = mapped_column(String(100), nullable=False)
    per_hour: Mapped[str] = mapped_column(String(40), nullable=False)
    currency: Mapped[str] = mapped_column(String(8), nullable=False)
    valid_from: Mapped[float] = mapped_column(Float, nullable=False)
    valid_to: Mapped[float | None] = mapped_column(Float)
    created: Mapped[float] = mapped_column(Float, nullable=False)
    __table_args__ = (Index("ix_prices_tres", "tres"),)


class TresSeconds:
    """The TRES-second columns that `usage_hourly` and `usage_daily` share (see UsageHourly)."""
    cpu_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    mem_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    node_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    billing_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_type_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_busy_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_measured_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    amount: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)


class UsageHourly(TresSeconds, Base):
    """Usage rolled up per UTC hour (`hour` = its first second), account, user, node
    list and GPU type of the job ("" for CPU-only jobs), in TRES-seconds. The common
    TRES are columns of one row with `tres` = "": `cpu_s`, `mem_s` (MiB-seconds),
    `node_s`, `billing_s` (billing-unit-seconds), `gpu_s` (gres/gpu), `gpu_type_s`
    (gres/gpu:<gpu_type>), `gpu_busy_s` (measured utilisation x GPU-seconds / 100),
    `gpu_measured_s` (GPU-seconds that had a measurement). Any other TRES (a second GPU
    type, gres/shard, licenses) has its own row with `tres` = its name and `amount`."""
    __tablename__ = "usage_hourly"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    hour: Mapped[int] = mapped_column(BigInteger, nullable=False)
    account: Mapped[str] = mapped_column(String(64), nullable=False)
    user: Mapped[str] = mapped_column(String(64), nullable=False)
    node: Mapped[str] = mapped_column(String(1000), nullable=False)
    gpu_type: Mapped[str] = mapped_column(String(64), nullable=False)
    tres: Mapped[str] = mapped_column(String(100), nullable=False)
    __table_args__ = (UniqueConstraint("hour", "account", "user", "node", "gpu_type", "tres",
                                       name="uq_usage_hourly_key"),)


class UsageDaily(TresSeconds, Base):
    """`usage_hourly` summed per UTC day (`day` = its first second), same keys and
    columns: the report reads whole days of a period here and only the hours of a
    partial day from `usage_hourly`. Written by the rollup in the same transaction."""
    __tablename__ = "usage_daily"
    day: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    node: Mapped[str] = mapped_column(String(1000), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    tres: Mapped[str] = mapped_column(String(100), primary_key=True)
    # SQLite: rows stored in key order, so that a range of days is read in one sweep
    __table_args__ = {"sqlite_with_rowid": False}


class GpuHourly(Base):
    """The GPU columns of `usage_hourly` per hour and account only (no user, no node):
    what borrowed GPU-hours, idle capacity and the daily chart need, a row per hour,
    account and GPU type instead of one per user and node. `gpu_s`, `gpu_type_s` as in
    `usage_hourly` (row `tres` = ""); a second GPU type of a run (`gres/gpu:...` other
    than the row's) has its own row with `tres` = its name and `amount`.
    Written by the rollup in the same transaction."""
    __tablename__ = "gpu_hourly"
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    tres: Mapped[str] = mapped_column(String(100), primary_key=True)
    gpu_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_type_s: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    amount: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    __table_args__ = {"sqlite_with_rowid": False}


class RollupLedger(Base):
    """The rollup's watermark, kept per usage record, and the per-job side of the bill's
    check: a row per usage record already added to `usage_hourly`, written in the same
    transaction as the sums (so a crashed rollup neither loses nor doubles a record; ids
    may commit out of order on PostgreSQL, which a single max-id watermark would miss).
    It keeps what the record is charged for: its whole-second run [start_s, end_s), the
    common TRES counts (as in `usage_hourly`: `typed_n` counts gres/gpu:<gpu_type>) and
    any other TRES in `other` ({name: count}, None when there is none)."""
    __tablename__ = "rollup_ledger"
    usage_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rolled_at: Mapped[float] = mapped_column(Float, nullable=False)
    account: Mapped[str] = mapped_column(String(64), nullable=False)
    user: Mapped[str] = mapped_column(String(64), nullable=False)
    start_s: Mapped[int] = mapped_column(BigInteger, nullable=False)
    end_s: Mapped[int] = mapped_column(BigInteger, nullable=False)
    gpu_type: Mapped[str] = mapped_column(String(64), nullable=False)
    cpu_n: Mapped[float] = mapped_column(Float, nullable=False)
    mem_n: Mapped[float] = mapped_column(Float, nullable=False)
    node_n: Mapped[float] = mapped_column(Float, nullable=False)
    billing_n: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_n: Mapped[float] = mapped_column(Float, nullable=False)
    typed_n: Mapped[float] = mapped_column(Float, nullable=False)
    other: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))


class LedgerEdge(Base):
    """The ledger summed as run edges, for the per-job side of the bill without a pass
    over every ledger row: per UTC hour, account, user and GPU type, what the runs
    starting in that hour add minus what the runs ending in it take away. For each
    TRES, `<x>_n` is the net count (sum of counts of runs starting in the hour minus
    those of runs ending in it) and `<x>_ns` the net count x seconds past the hour's
    start at which they start (resp. end). Written with the ledger rows, in the same
    transaction. For an hour-aligned t, F(t) = sum over hours h < t of
    `n * (t - h) - ns` is the count x seconds of all those runs before t, exactly as
    the runs were recorded (whole seconds); a segment [a, b) is F(b) - F(a).
    The common TRES are columns of the row with `tres` = "" (`typed` = gres/gpu:<gpu_type>),
    any other TRES has its own row with `tres` = its name and `amount_n`/`amount_ns`."""
    __tablename__ = "ledger_edges"
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    tres: Mapped[str] = mapped_column(String(100), primary_key=True)
    cpu_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    cpu_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    mem_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    mem_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    node_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    node_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    billing_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    billing_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    typed_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    typed_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    amount_n: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    amount_ns: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    # the gres/gpu count of the runs starting in the hour, and of those ending in it (each
    # a sum of positive counts, not a net): bounds of what an account holds in the hour
    gpu_up: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_down: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    # SQLite: rows stored in key order, so that a range of hours is read in one sweep
    __table_args__ = {"sqlite_with_rowid": False}


class JobEfficiency(Base):
    """Efficiency samples of one run of a job, kept as running sums and peaks: CPU %
    (100 = one core busy), resident memory MiB, GPU utilisation % and GPU memory MiB
    (None where NVML is absent); `gpu_zero_s` is the current stretch of samples with
    GPUs held at 0 %, `gpu_zero_max_s` the longest such stretch (seconds)."""
    __tablename__ = "job_efficiency"
    job_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    run: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    samples: Mapped[int] = mapped_column(Integer, nullable=False)
    first_time: Mapped[float] = mapped_column(Float, nullable=False)
    last_time: Mapped[float] = mapped_column(Float, nullable=False)
    cpu_pct_sum: Mapped[float] = mapped_column(Float, nullable=False)
    cpu_pct_max: Mapped[float] = mapped_column(Float, nullable=False)
    rss_mb_max: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_samples: Mapped[int] = mapped_column(Integer, nullable=False)
    gpu_util_sum: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_util_max: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_mem_max_mb: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_zero_s: Mapped[float] = mapped_column(Float, nullable=False)
    gpu_zero_max_s: Mapped[float] = mapped_column(Float, nullable=False)
