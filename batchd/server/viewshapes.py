"""The shapes of the large views inside replies, as TypedDicts (see `batchd/server/messages.py`,
which names them with the other message shapes): JOB_VIEW (squeue, scontrol show job,
bjobs; built by `batchd.server.views`), ACCT_ROW (sacct; `batchd.server.acctrows`), NODE_VIEW and
PARTITION_VIEW (sinfo, scontrol show node/partition; `batchd.server.views`). protocol.py says
what each key means; a key a view may lack is `NotRequired`.
"""

# No `from __future__ import annotations`: the shapes' required keys feed the reply rules
# (batchd/server/wire_replies.py), and Python 3.11 reads NotRequired from evaluated annotations only.
from typing import Any, NotRequired, TypedDict


class JobView(TypedDict):
    """JOB_VIEW (squeue, scontrol show job, bjobs); protocol.py says what each key means."""
    id: int
    array_job_id: NotRequired[int | None]
    array_task_id: NotRequired[int | None]
    array_task_str: NotRequired[str | None]
    display_id: str
    array_max_running: NotRequired[int | None]
    name: str
    user: str
    uid: int
    gid: int
    group: NotRequired[str]
    account: str
    partition: str
    qos: str
    state: str
    reason: str
    priority: int
    nice: int
    submit_time: float
    eligible_time: NotRequired[float | None]
    start_time: NotRequired[float | None]
    end_time: NotRequired[float | None]
    time_limit_s: int | None
    run_time_s: int
    nodes: int
    node_list: str
    ntasks: int
    cpus: int
    mem_mb: int
    tres_req: str
    tres_alloc: str
    gres: NotRequired[dict[str, list[int | str]]]
    gpus_str: NotRequired[str]
    cpu_ids: NotRequired[dict[str, str]]
    workdir: str
    stdout: str
    stderr: str
    stdin: NotRequired[str]
    command: NotRequired[str]
    dependency: NotRequired[str | None]
    requeue: bool
    restarts: int
    exit_code: str
    derived_exit_code: NotRequired[str]
    comment: NotRequired[str | None]
    batch_host: NotRequired[str | None]
    req_node_list: NotRequired[str | None]
    exc_node_list: NotRequired[str | None]
    start_estimate: NotRequired[float | None]
    begin_time: NotRequired[float | None]
    hold: NotRequired[bool]
    submit_host: NotRequired[str | None]
    cluster: NotRequired[str | None]
    mem_per_cpu_mb: NotRequired[int | None]
    mem_per_node_mb: NotRequired[int | None]
    tres_per_node: NotRequired[str | None]
    tres_per_job: NotRequired[str | None]
    tres_per_task: NotRequired[str | None]
    mem_per_tres: NotRequired[str | None]
    min_cpus: NotRequired[int]
    cpus_per_task: NotRequired[int]
    accrue_time: NotRequired[float | None]
    last_sched_eval: NotRequired[float | None]
    preempt_time: NotRequired[float | None]
    alloc_node: NotRequired[str | None]
    alloc_sid: NotRequired[int | None]
    constraint: NotRequired[str | None]


class AcctRow(TypedDict):
    """ACCT_ROW (sacct): one row per job run and per step."""
    job_id: str
    job_id_raw: str
    name: NotRequired[str | None]
    user: NotRequired[str | None]
    uid: NotRequired[int | None]
    gid: NotRequired[int | None]
    group: NotRequired[str | None]
    account: NotRequired[str | None]
    partition: NotRequired[str | None]
    qos: NotRequired[str | None]
    state: str
    exit_code: NotRequired[str | None]
    derived_exit_code: NotRequired[str | None]
    submit: NotRequired[float | None]
    eligible: NotRequired[float | None]
    start: NotRequired[float | None]
    end: NotRequired[float | None]
    elapsed_s: int
    time_limit_s: NotRequired[int | None]
    alloc_tres: NotRequired[str | None]
    req_tres: NotRequired[str | None]
    node_list: NotRequired[str | None]
    nnodes: NotRequired[int | None]
    ncpus: NotRequired[int | None]
    ntasks: NotRequired[int | None]
    restarts: NotRequired[int | None]
    workdir: NotRequired[str | None]
    comment: NotRequired[str | None]
    reason: NotRequired[str | None]
    priority: NotRequired[int | None]
    alloc_cpus: NotRequired[int | None]
    req_mem: NotRequired[float | None]
    billing: NotRequired[float | None]
    cancelled_by: NotRequired[int | None]
    req_cpus: NotRequired[int | None]
    submit_line: NotRequired[str | None]
    flags: NotRequired[str | None]
    cluster: NotRequired[str | None]
    total_cpu_s: NotRequired[float | None]
    max_rss_kb: NotRequired[int | None]
    step: NotRequired[str | None]


class NodeView(TypedDict):
    """NODE_VIEW (sinfo, scontrol show node)."""
    name: str
    state: str
    reason: NotRequired[str | None]
    cpus: int
    cpus_alloc: int
    memory_mb: int
    memory_alloc_mb: int
    gres: str
    gres_used: str
    partitions: list[str]
    features: NotRequired[list[str]]
    gpus: NotRequired[Any]
    heartbeat: NotRequired[float | None]
    sockets: NotRequired[int | None]
    cores_per_socket: NotRequired[int | None]
    threads_per_core: NotRequired[int | None]
    free_mem_mb: NotRequired[int | None]
    cpu_load: NotRequired[float | None]
    os: NotRequired[str | None]
    arch: NotRequired[str | None]
    version: NotRequired[str | None]
    boot_time: NotRequired[float | None]
    start_time: NotRequired[float | None]
    last_busy_time: NotRequired[float | None]
    cfg_tres: NotRequired[str | None]
    alloc_tres: NotRequired[str | None]
    reason_user: NotRequired[str | None]
    reason_time: NotRequired[float | None]
    tmp_disk_mb: NotRequired[int | None]
    weight: NotRequired[int | None]


class PartitionView(TypedDict):
    """PARTITION_VIEW."""
    name: str
    default: bool
    nodes: list[str]
    node_list: NotRequired[str | None]
    max_time_s: int
    default_time_s: NotRequired[int | None]
    state: str
    priority_job_factor: NotRequired[int]
    preempt_mode: NotRequired[str | None]
    grace_time_s: NotRequired[int | None]
    priority_tier: NotRequired[int | None]
    tres: NotRequired[str | None]
    billing_weights: NotRequired[str | None]
