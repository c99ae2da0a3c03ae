"""The daemon's configuration: `/etc/batchd/batchd.toml` (or `--config`, `BATCHD_CONFIG`).

A wrong file is refused with one `ConfigError` whose message names the key and the
problem (`batchd.toml: node[2].cpus: must be a positive integer, got "x"`). A key a table
does not know is refused in every table (`batchd.configkeys`: the keys of each), with the
closest known key suggested: `batchd.toml: scheduler.intervl_s: unknown key in [scheduler]
(did you mean "interval_s"?)`; only `[gpu_aliases]` takes any key (GPU product names).

Layout (every key optional unless marked):

    cluster_name = "batchd"
    state_dir = "/var/lib/batchd"          # spool and the SQLite database
    database_url = ""                       # default sqlite:///<state_dir>/batchd.db
    database_password_file = "/etc/batchd/db.password"   # optional: the URL's password, 0600
    socket = "/run/batchd/batchd.sock"
    admin_group = "batchd-admin"
    gpu_env = "index"                       # CUDA_VISIBLE_DEVICES as "index" or "uuid"
    shard_per_gpu = 0                       # gres/shard per whole GPU (0 = no shards)
    mps = false                             # the GPUs run the MPS control daemon: shard jobs get
                                            # their share of SMs and memory as MPS limits
    isolation = "auto"                      # "auto" | "systemd" | "plain": jobs in transient
                                            # systemd units, or the plain supervisor (see
                                            # batchd.node.isolation; "systemd" refuses to start
                                            # where the node cannot)
    accounts = "accounts.toml"              # optional: an accounts file (batchd.server.accounts) that the
                                            # daemon applies at start, relative to this file

    [scheduler]   interval_s = 5, placement = "pack"|"spread", backfill = true, kill_wait_s = 30,
                  def_mem_per_cpu_mb = 1024, enforce_memory = true, node_timeout_s = 30,
                  grace_time_s = 60, quota_reclaim_by_priority = false, passes = [...],
                  budget_recount_s = 60 (how often GrpTRESMins budgets' use is recounted),
                  min_job_age_s = 300 (Slurm's MinJobAge: how long an ended job stays in
                  squeue, scontrol and scancel; sacct keeps it), spool_keep_s = 3600 (how
                  long a node keeps an ended run's spool directory, its script and records,
                  once its usage is stored, and the srun step tasks of an ended run; 0 =
                  purge at the next minute's pass),
                  cycle_min_gap_ms = 50 (while wake-ups keep coming, a scheduling cycle starts
                  at most this long, or the last cycle's own duration if longer, after the
                  previous one ended: a burst of submissions shares one cycle; a wake-up
                  after a quiet spell starts one at once); the scheduler's policy keys
                  backfill_max_reservations = 20, reclaimer_saturation_multiplier = 1.0,
                  fairshare_k_value = 1.0 (batchd.scheduler.cycle)
    [priority]    the policy keys of batchd.priority (weight_age, decay_half_life_s, ...)
    [accounting]  tres_billing_weights = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0", sample_interval_s = 30,
                  rollup_interval_s = 300, zero_gpu_flag_s = 3600
    [report]      timezone = "UTC": the IANA zone (zoneinfo) of `batchd report`'s month and day
                  boundaries when the command gives no --tz; an unknown zone is refused
    [limits]      what one client may ask of the daemon (batchd.config.LIMITS):
                  max_connections = 512 (open API connections in all), max_connections_per_user = 64
                  (one over either cap gets a quick 503 TooManyConnections), request_timeout_s = 5
                  (a connection must deliver its whole request in that time; a kept-alive one, the
                  next request after its last reply), max_request_bytes = 16777216 (a larger
                  Content-Length is a 413), api_threads = 16 (requests run at once; on PostgreSQL
                  the connection pool holds api_threads + 4);
                  what one request may carry (checked by batchd.server.wire before anything is stored):
                  max_script_bytes = 4194304 (a batch script, Slurm's max_script_size),
                  max_env_bytes = 1048576 (a job's or step's environment, and its arguments, each:
                  the sum of len(NAME) + len(VALUE) + 2 in UTF-8 bytes), max_hostlist_names = 10000
                  (names in one host list: -w, -x, node filters), max_array_size = 1001 (Slurm's
                  MaxArraySize: --array task ids run from 0 to one less; at most 4000001)
    [gpu_aliases] "NVIDIA RTX PRO 6000 Blackwell Server Edition" = "rtxpro6000"
    [http]        listen = "127.0.0.1:6820" (metrics, slurmrestd API, dashboard; "" = none), tls_cert,
                  tls_key, jwt_key (the HS256 key of `scontrol token`; default <state_dir>/jwt_hs256.key)
                  (PEM files; required for an address beyond the loopback)
    [[partition]] name (required), nodes = ["n1"] or "ALL", default = false,
                  max_time = "UNLIMITED" | Slurm time, default_time = Slurm time, priority_job_factor = 1
    [[node]]      name (required), cpus (required), memory_mb (required),
                  gpus = [{type = "h200", count = 4}] | [{index, uuid, type, mig = [...]}] | "nvml"
    [[qos]]       name (required), priority = 0, preemptible = true, usage_factor = 1.0,
                  max_gpus_per_user = -1, grace_time_s = 60, min_runtime_reclaim_s = 0,
                  min_runtime_preempt_s = 0 (seconds a running job of the QOS is no victim of
                  reclaim by another account / of preemption in its own; the larger of these
                  and its account's min_runtime_* counts, docs/preemption.md),
                  max_wall = "UNLIMITED" | Slurm time (Slurm's MaxWall: a longer -t is refused,
                  a job without -t gets it), idle_timeout = Slurm time (default none: a
                  running job of the QOS whose GPUs all read 0 % in every NVML sample for
                  that long is ended, docs/interactive.md)
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchd import configkeys as keys
from batchd.errors import ConfigError

SYSTEM_CONFIG = "/etc/batchd/batchd.toml"


def _examples_dir() -> Path:
    """examples/: inside the package where a wheel installed it (batchd/examples, package
    data), else beside the package in a checkout (an editable install)."""
    here = Path(__file__).resolve().parent
    installed = here / "examples"
    return installed if installed.is_dir() else here.parent / "examples"


#: the 16-GPU example, the config of `batchd serve --dev` without --config
EXAMPLE_CONFIG = _examples_dir() / "cluster-16gpu.toml"

# the keys of [limits]: name -> (default, minimum); a float default allows a fractional value
LIMITS: dict[str, tuple[int | float, int | float]] = {
    "max_connections": (512, 1),
    "max_connections_per_user": (64, 1),
    "request_timeout_s": (5.0, 0.1),
    "max_request_bytes": (16 << 20, 1024),
    "api_threads": (16, 1),
    "max_script_bytes": (4 << 20, 1),
    "max_env_bytes": (1 << 20, 1),
    "max_hostlist_names": (10_000, 1),
    "max_array_size": (1001, 1),
}


@dataclass
class NodeConfig:
    name: str
    cpus: int
    memory_mb: int
    gpus: list[dict[str, Any]] | str = field(default_factory=list)
    features: list[str] = field(default_factory=list)


@dataclass
class PartitionConfig:
    name: str
    nodes: list[str]
    default: bool = False
    max_time_s: int = -1          # -1 = UNLIMITED
    default_time_s: int | None = None
    priority_job_factor: int = 1


@dataclass
class QosConfig:
    name: str
    priority: int = 0
    preemptible: bool = True
    usage_factor: float = 1.0
    max_gpus_per_user: int = -1
    grace_time_s: int = 60
    min_runtime_reclaim_s: int = 0  # protection from reclaim (another account), seconds
    min_runtime_preempt_s: int = 0  # protection from preemption in its account (PreemptExemptTime)
    max_wall_s: int = -1  # Slurm's MaxWall; -1 = UNLIMITED
    idle_timeout_s: int = 0  # end a job whose GPUs stayed at 0 % this long; 0 = never


@dataclass
class Config:
    path: str
    cluster_name: str = "batchd"
    state_dir: str = "/var/lib/batchd"
    database_url: str = ""
    socket: str = "/run/batchd/batchd.sock"
    admin_group: str = "batchd-admin"
    gpu_env: str = "index"
    shard_per_gpu: int = 0
    isolation: str = "auto"
    mps: bool = False
    nodes: list[NodeConfig] = field(default_factory=list)
    partitions: list[PartitionConfig] = field(default_factory=list)
    qos: list[QosConfig] = field(default_factory=list)
    scheduler: dict[str, Any] = field(default_factory=dict)
    priority: dict[str, Any] = field(default_factory=dict)
    tres_billing_weights: str = "CPU=1.0,Mem=0.25G,GRES/gpu=1.0"
    gpu_aliases: dict[str, str] = field(default_factory=dict)
    accounts_file: str | None = None
    accounting: dict[str, Any] = field(default_factory=dict)
    http: dict[str, Any] = field(default_factory=lambda: {"listen": DEFAULT_HTTP_LISTEN, "tls_cert": None,
                                                          "tls_key": None, "jwt_key": None})
    report_timezone: str = "UTC"  # [report] timezone: month/day boundaries of `batchd report`
    database_password_file: str | None = None
    dev: bool = False
    limits: dict[str, Any] = field(default_factory=lambda: {k: d for k, (d, _) in LIMITS.items()})

    @property
    def interval_s(self) -> float:
        return float(self.scheduler.get("interval_s", 5))

    @property
    def cycle_min_gap_s(self) -> float:
        """The least time between the end of a scheduling cycle and the start of the next
        (`[scheduler] cycle_min_gap_ms`, default 50): wake-ups within it share one cycle."""
        return float(self.scheduler.get("cycle_min_gap_ms", 50)) / 1000.0

    @property
    def sample_interval_s(self) -> float:
        """How often the agent samples each running job's CPU/GPU use (0 = never)."""
        return float(self.accounting.get("sample_interval_s", 30))

    @property
    def rollup_interval_s(self) -> float:
        """How often the controller rolls usage records up into hourly sums."""
        return float(self.accounting.get("rollup_interval_s", 300))

    @property
    def zero_gpu_flag_s(self) -> float:
        """A run holding its GPUs at 0 % this long is flagged in the report."""
        return float(self.accounting.get("zero_gpu_flag_s", 3600))

    @property
    def enforce_memory(self) -> bool:
        """Kill a job whose processes use more memory than it was given (OUT_OF_MEMORY)."""
        return bool(self.scheduler.get("enforce_memory", True))

    @property
    def def_mem_per_cpu_mb(self) -> int:
        """Memory per CPU for a job that asks for none (Slurm's DefMemPerCPU)."""
        return int(self.scheduler.get("def_mem_per_cpu_mb", 1024))

    @property
    def kill_wait_s(self) -> int:
        return int(self.scheduler.get("kill_wait_s", 30))

    def db_url(self) -> str:
        """The database URL; with `database_password_file`, the password is read from
        that file (keep it 0600, root's) and put into the URL, never into the config."""
        url = self.database_url or f"sqlite:///{os.path.join(self.state_dir, 'batchd.db')}"
        if self.database_password_file and "://" in url:
            from urllib.parse import quote

            with open(self.database_password_file) as f:
                pw = f.read().strip()
            scheme, _, rest = url.partition("://")
            creds, at, host = rest.rpartition("@")
            user = creds.split(":", 1)[0] if at else ""
            url = f"{scheme}://{user}:{quote(pw, safe='')}@{host}" if at else url
        return url

    def spool_dir(self) -> str:
        return os.path.join(self.state_dir, "spool")

    def node(self, name: str) -> NodeConfig:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def default_partition(self) -> PartitionConfig:
        for p in self.partitions:
            if p.default:
                return p
        return self.partitions[0]


def _fail(path: str, key: str, problem: str) -> ConfigError:
    return ConfigError(f"{os.path.basename(path)}: {key}: {problem}")


def _table(path: str, where: str, v: Any, known: tuple[str, ...], label: str) -> dict[str, Any]:
    """`v`, the table at `where` ("" the file itself), when it is a table of `known` keys
    only; else the ConfigError naming the first unknown key (`batchd.configkeys`)."""
    if not isinstance(v, dict):
        raise _fail(path, where, "must be a table")
    k = keys.first_unknown(v, known)
    if k is not None:
        raise _fail(path, f"{where}.{k}" if where else k, keys.unknown_key(k, label, known, LIMITS))
    return v


def _tables(path: str, where: str, v: Any) -> list[Any]:
    """An array of tables (`[[node]]`, `[[partition]]`, `[[qos]]`)."""
    if not isinstance(v, list):
        raise _fail(path, where, "must be an array of tables")
    return v


def _int(path: str, key: str, v: Any, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _fail(path, key, f"must be an integer >= {minimum}, got {v!r}")
    return v


def _str(path: str, key: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _fail(path, key, f"must be a non-empty string, got {v!r}")
    return v


DEFAULT_HTTP_LISTEN = "127.0.0.1:6820"


def _http(path: str, t: dict[str, Any]) -> dict[str, Any]:
    """[http]: `listen` ("HOST:PORT", "" = no listener; default 127.0.0.1:6820), and TLS
    (`tls_cert`, `tls_key`, both or neither), required for an address beyond the loopback."""
    listen = t.get("listen", DEFAULT_HTTP_LISTEN)
    if not isinstance(listen, str):
        raise _fail(path, "http.listen", f"must be \"HOST:PORT\" or \"\", got {listen!r}")
    cert, key = t.get("tls_cert"), t.get("tls_key")
    if (cert is None) != (key is None):
        raise _fail(path, "http.tls_cert" if cert is None else "http.tls_key", "tls_cert and tls_key go together")
    if listen:
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535 or not host:
            raise _fail(path, "http.listen", f"must be \"HOST:PORT\" or \"\", got {listen!r}")
        host = host.strip("[]")
        if cert is None and host not in ("127.0.0.1", "::1", "localhost"):
            raise _fail(path, "http.listen", f"{listen}: an address beyond the loopback needs tls_cert and tls_key")
    jwt_key = t.get("jwt_key")
    if jwt_key is not None and (not isinstance(jwt_key, str) or not jwt_key.startswith("/")):
        raise _fail(path, "http.jwt_key", f"must be an absolute path, got {jwt_key!r}")
    return {"listen": listen, "tls_cert": cert, "tls_key": key, "jwt_key": jwt_key}


def _idle(path: str, key: str, v: Any) -> int:
    """An idle timeout in seconds: absent or UNLIMITED = 0 (never); else a Slurm time
    (whole minutes, as every Slurm time limit)."""
    if v is None:
        return 0
    secs = parse_duration(path, key, v)
    return 0 if secs < 0 else secs


def parse_duration(path: str, key: str, v: Any) -> int:
    """A Slurm time ("1-00:00:00", "60", "UNLIMITED") or an integer of minutes -> seconds."""
    from batchd.slurm.slurmtime import time_limit_s  # sbatch's own grammar, one parser for both

    if isinstance(v, int) and not isinstance(v, bool):
        return v * 60
    if isinstance(v, str):
        secs = time_limit_s(v)
        if secs is not None:
            return secs
    raise _fail(path, key, f"not a valid time, got {v!r}")


def _gpus(path: str, key: str, v: Any) -> list[dict[str, Any]] | str:
    if v == "nvml":
        return "nvml"
    if not isinstance(v, list):
        raise _fail(path, key, f'must be "nvml" or a list of tables, got {v!r}')
    out: list[dict[str, Any]] = []
    for i, g in enumerate(v):
        k = f"{key}[{i}]"
        _table(path, k, g, keys.GPU, "a node's gpus entry")
        for j, m in enumerate(g["mig"] if isinstance(g.get("mig"), list) else []):
            _table(path, f"{k}.mig[{j}]", m, keys.MIG, "a GPU's mig entry")
        if "links" in g:
            _table(path, f"{k}.links", g["links"], keys.LINKS, "a GPU's links")
        _str(path, f"{k}.type", g.get("type"))
        if "count" in g:
            _int(path, f"{k}.count", g["count"], 1)
        elif "index" not in g:
            raise _fail(path, k, "needs either count or index")
        out.append(dict(g))
    return out


def parse_config(data: dict[str, Any], path: str = "batchd.toml") -> Config:
    _table(path, "", data, keys.TOP, keys.TOP_LEVEL)
    cfg = Config(path=path)
    for k in ("cluster_name", "state_dir", "socket", "admin_group"):
        if k in data:
            setattr(cfg, k, _str(path, k, data[k]))
    if "database_url" in data:
        if not isinstance(data["database_url"], str):
            raise _fail(path, "database_url", "must be a string")
        cfg.database_url = data["database_url"]
    if "gpu_env" in data:
        if data["gpu_env"] not in ("index", "uuid"):
            raise _fail(path, "gpu_env", f'must be "index" or "uuid", got {data["gpu_env"]!r}')
        cfg.gpu_env = data["gpu_env"]
    if "database_password_file" in data:
        pf = _str(path, "database_password_file", data["database_password_file"])
        if not os.path.isfile(pf):
            raise _fail(path, "database_password_file", f"no such file {pf}")
        cfg.database_password_file = pf
    if "accounts" in data:
        af = _str(path, "accounts", data["accounts"])
        cfg.accounts_file = af if os.path.isabs(af) else os.path.join(os.path.dirname(os.path.abspath(path)), af)
        if not os.path.exists(cfg.accounts_file):
            raise _fail(path, "accounts", f"no such file {cfg.accounts_file}")
    if "isolation" in data:
        if data["isolation"] not in ("auto", "systemd", "plain"):
            raise _fail(path, "isolation", f'must be "auto", "systemd" or "plain", got {data["isolation"]!r}')
        cfg.isolation = data["isolation"]
    if "mps" in data:
        if not isinstance(data["mps"], bool):
            raise _fail(path, "mps", f"must be true or false, got {data['mps']!r}")
        cfg.mps = data["mps"]
    if "shard_per_gpu" in data:
        cfg.shard_per_gpu = _int(path, "shard_per_gpu", data["shard_per_gpu"])
    for sect, known in (("scheduler", keys.SCHEDULER), ("priority", keys.PRIORITY),
                        ("accounting", keys.ACCOUNTING), ("report", keys.REPORT), ("limits", tuple(LIMITS)),
                        ("http", keys.HTTP)):
        if sect in data:
            _table(path, sect, data[sect], known, f"[{sect}]")
    if not isinstance(data.get("gpu_aliases", {}), dict):
        raise _fail(path, "gpu_aliases", "must be a table")
    for k, v in data.get("limits", {}).items():
        default, minimum = LIMITS[k]
        kind = "a number" if isinstance(default, float) else "an integer"
        if (isinstance(v, bool) or not isinstance(v, int | float) or v < minimum
                or (isinstance(default, int) and not isinstance(v, int))):
            raise _fail(path, f"limits.{k}", f"must be {kind} >= {minimum}, got {v!r}")
        cfg.limits[k] = v
    cfg.scheduler = dict(data.get("scheduler", {}))
    if "interval_s" in cfg.scheduler:
        iv = cfg.scheduler["interval_s"]
        if not isinstance(iv, (int, float)) or isinstance(iv, bool) or iv <= 0:
            raise _fail(path, "scheduler.interval_s", f"must be a positive number, got {iv!r}")
    for k in ("min_job_age_s", "spool_keep_s", "cycle_min_gap_ms"):
        v = cfg.scheduler.get(k, 0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise _fail(path, f"scheduler.{k}", f"must be a number >= 0, got {v!r}")
    cfg.priority = dict(data.get("priority", {}))
    cfg.http = _http(path, data.get("http", {}))
    cfg.gpu_aliases = {str(k): _str(path, f"gpu_aliases.{k}", v)
                       for k, v in data.get("gpu_aliases", {}).items()}
    acct = data.get("accounting", {})
    for k, v in acct.items():
        if k != "tres_billing_weights" and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            raise _fail(path, f"accounting.{k}", f"must be a number >= 0, got {v!r}")
    cfg.accounting = dict(acct)
    if "tres_billing_weights" in acct:
        w = _str(path, "accounting.tres_billing_weights", acct["tres_billing_weights"])
        try:
            from batchd.slurm.tres import parse_billing_weights

            parse_billing_weights(w)
        except ImportError:
            pass
        except ValueError as e:
            raise _fail(path, "accounting.tres_billing_weights", str(e)) from None
        cfg.tres_billing_weights = w
    if "timezone" in data.get("report", {}):
        from batchd.accounting.zones import UnknownZone, zone_of

        tz = _str(path, "report.timezone", data["report"]["timezone"])
        try:
            zone_of(tz)
        except UnknownZone as e:
            raise _fail(path, "report.timezone", str(e)) from None
        cfg.report_timezone = tz

    nodes = data.get("node", [])
    if not isinstance(nodes, list) or not nodes:
        raise _fail(path, "node", "at least one [[node]] table is required")
    seen: set[str] = set()
    for i, n in enumerate(nodes):
        k = f"node[{i}]"
        _table(path, k, n, keys.NODE, "[[node]]")
        name = _str(path, f"{k}.name", n.get("name"))
        if name in seen:
            raise _fail(path, f"{k}.name", f"duplicate node name {name!r}")
        seen.add(name)
        cfg.nodes.append(NodeConfig(
            name=name,
            cpus=_int(path, f"{k}.cpus", n.get("cpus"), 1),
            memory_mb=_int(path, f"{k}.memory_mb", n.get("memory_mb"), 1),
            gpus=_gpus(path, f"{k}.gpus", n.get("gpus", [])),
            features=list(n.get("features", [])),
        ))

    parts = _tables(path, "partition", data.get("partition", []))
    if not parts:
        parts = [{"name": "batch", "nodes": "ALL", "default": True}]
    for i, p in enumerate(parts):
        k = f"partition[{i}]"
        _table(path, k, p, keys.PARTITION, "[[partition]]")
        pnodes = p.get("nodes", "ALL")
        if pnodes == "ALL":
            pnodes = [n.name for n in cfg.nodes]
        if not isinstance(pnodes, list):
            raise _fail(path, f"{k}.nodes", 'must be a list of node names or "ALL"')
        for nn in pnodes:
            if nn not in seen:
                raise _fail(path, f"{k}.nodes", f"unknown node {nn!r}")
        cfg.partitions.append(PartitionConfig(
            name=_str(path, f"{k}.name", p.get("name")),
            nodes=list(pnodes),
            default=bool(p.get("default", False)),
            max_time_s=parse_duration(path, f"{k}.max_time", p.get("max_time", "UNLIMITED")),
            default_time_s=(parse_duration(path, f"{k}.default_time", p["default_time"])
                            if "default_time" in p else None),
            priority_job_factor=_int(path, f"{k}.priority_job_factor", p.get("priority_job_factor", 1)),
        ))
    if sum(p.default for p in cfg.partitions) > 1:
        raise _fail(path, "partition", "more than one partition has default = true")

    for i, q in enumerate(_tables(path, "qos", data.get("qos", []))):
        k = f"qos[{i}]"
        _table(path, k, q, keys.QOS, "[[qos]]")
        cfg.qos.append(QosConfig(
            name=_str(path, f"{k}.name", q.get("name")),
            priority=int(q.get("priority", 0)),
            preemptible=bool(q.get("preemptible", True)),
            usage_factor=float(q.get("usage_factor", 1.0)),
            max_gpus_per_user=int(q.get("max_gpus_per_user", -1)),
            grace_time_s=int(q.get("grace_time_s", 60)),
            min_runtime_reclaim_s=_int(path, f"{k}.min_runtime_reclaim_s", q.get("min_runtime_reclaim_s", 0)),
            min_runtime_preempt_s=_int(path, f"{k}.min_runtime_preempt_s", q.get("min_runtime_preempt_s", 0)),
            max_wall_s=parse_duration(path, f"{k}.max_wall", q.get("max_wall", "UNLIMITED")),
            idle_timeout_s=_idle(path, f"{k}.idle_timeout", q.get("idle_timeout")),
        ))
    if not cfg.qos:
        # no [[qos]] at all: KAI's classes, a preemptible `normal` for training and
        # non-preemptible `interactive` and `inference` (which must fit in their quota)
        cfg.qos = [QosConfig(name="normal", priority=10, preemptible=True),
                   QosConfig(name="interactive", priority=50, preemptible=False),
                   QosConfig(name="inference", priority=100, preemptible=False)]
    elif not any(q.name == "normal" for q in cfg.qos):
        cfg.qos.insert(0, QosConfig(name="normal"))  # Slurm always has `normal`
    return cfg


def load_config(path: str | None = None, *, dev: bool = False) -> Config:
    """Read and validate a config file. Without a path: $BATCHD_CONFIG, else the system
    file, else (dev mode only) the bundled 16-GPU example."""
    p = path or os.environ.get("BATCHD_CONFIG")
    if not p:
        p = str(EXAMPLE_CONFIG) if dev or not os.path.exists(SYSTEM_CONFIG) else SYSTEM_CONFIG
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{os.path.basename(p)}: not valid TOML: {e}") from None
    cfg = parse_config(data, p)
    cfg.dev = dev
    if dev:
        # dev mode: everything under ./.batchd of the current directory, run as the caller
        base = os.path.abspath(".batchd")
        cfg.state_dir = base
        cfg.socket = os.path.join(base, "batchd.sock")
        if not data.get("database_url"):
            cfg.database_url = ""
    return cfg
