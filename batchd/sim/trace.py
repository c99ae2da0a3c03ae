"""Job traces for `batchd simulate`.

batchd's own CSV (documented in docs/simulate.md), one job a row, a header naming the
columns; only `submit_s`, `duration_s` and `gpus` are required:

    submit_s,duration_s,gpus,team,user,qos,time_limit_s,checkpoint_s,id
    0,3600,2,training,bob,normal,7200,600,
    30,600,1,notebooks,carol,interactive,,,

`gpus` is a count of whole cards (a fraction rounds up). `checkpoint_s` is how often the
job saves its work (0 or empty: never; a preempted job then starts again from the start).
An optional `gres` column asks as sbatch's `--gres` does, for one node: `gpu:1g.24gb:2` (two
MIG instances of that profile), `shard:4` (four shards), `gpu:h200:2` (two whole cards of
that type) or `gpu:2`; where it is set, `gpus` may be left empty and is not read.

The Alibaba `cluster-trace-gpu-v2023` job file (`alibaba_openb_2023_jobs.csv`): each pod
that asks for a GPU and started becomes a job (the others are left out and counted), its
`gpus` the pod's `num_gpu`, its duration the pod's. A pod that asks for a share of one
card (`gpu_milli` < 1000) keeps that share (`gpu_fraction`): on a cluster with shards
(`shard_per_gpu`) it asks for that share of a card's shards, rounded up; elsewhere (the
example clusters) for a whole card. The trace has no user or team:
`teams` assigns them, by an explicit rule the output names:

- `qos`: by the pod's QoS class, a mapping such as `LS=serving,BE=training,*=notebooks`.
- `hash`: a seeded hash of the pod's name, with team sizes as weights, such as
  `serving=6,training=6,notebooks=4` (the teams' quotas are the natural weights).

batchd's own history: `sacct --json` output (Slurm's dbv0.0.38 shape, batchd's or a real
Slurm's: `sacct -a -X --json -S 2026-11-01 -E 2026-12-01 > month.json`): each run that
started and ended is a job of its account and user, submitted at its submission time, for
its elapsed time (end − start), with the GPUs of its allocated TRES (else the requested):
MIG instances (`gres/gpu:PROFILE`) and shards (`gres/shard`) as such, else `gres/gpu` as
whole cards; its QOS and time limit; a job still pending or running is left out and counted.

Times can be compressed (`scale`: every time divided by it) and arrivals thinned or
repeated (`load`: 0.5 keeps every second job in a seeded draw, 2 adds each job twice,
the second copy shifted by half its gap to the next).
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: int
    submit_s: float
    duration_s: float
    gpus: int
    team: str
    user: str
    qos: str | None = None
    time_limit_s: float | None = None
    checkpoint_s: float = 0.0
    name: str = ""
    gres: str = ""                # "gpu:PROFILE:N", "shard:N", "gpu:TYPE:N" (one node's); "": `gpus` cards
    gpu_fraction: float = 1.0     # a share of one card (Alibaba's gpu_milli / 1000): shards where offered


@dataclass
class Trace:
    jobs: list[TraceJob]
    source: str
    rule: str  # how teams were assigned, said in the output
    skipped: int = 0  # rows left out (no GPU, never started)


def split_gres(text: str) -> tuple[str, str | None, int]:
    """(name, type, count) of a trace's `gres`: one `gpu[:TYPE][:N]` or `shard[:N]` item, N
    at least 1 (ValueError otherwise)."""
    from batchd.slurm.jobopts import OptionError, parse_gres

    try:
        items = parse_gres(text.strip())
    except OptionError:
        items = []
    if len(items) != 1 or items[0]["name"] not in ("gpu", "shard") or int(items[0]["count"]) < 1 \
            or (items[0]["name"] == "shard" and items[0]["type"]):
        raise ValueError(f"gres: {text!r}: expected one gpu[:TYPE][:COUNT] or shard[:COUNT], COUNT at least 1")
    return str(items[0]["name"]), items[0]["type"], int(items[0]["count"])


def _num(row: dict[str, str], key: str, where: str, default: float | None = None) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return default
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{where}: {key}: not a number: {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}: {key}: must be a number >= 0, got {text!r}")
    return v


def read_csv(path: str | Path, default_team: str = "default") -> Trace:
    """batchd's trace CSV (the module's doc)."""
    jobs: list[TraceJob] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"submit_s", "duration_s", "gpus"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: the header lacks {', '.join(sorted(missing))}")
        for i, row in enumerate(reader, start=2):
            where = f"{path}:{i}"
            submit = _num(row, "submit_s", where)
            duration = _num(row, "duration_s", where)
            gres = (row.get("gres") or "").strip()
            if gres:
                try:
                    name, _type, count = split_gres(gres)
                except ValueError as e:
                    raise ValueError(f"{where}: {e}") from None
                gpus: float | None = count if name == "gpu" else 1
            else:
                gpus = _num(row, "gpus", where)
            if submit is None or duration is None or gpus is None:
                raise ValueError(f"{where}: submit_s, duration_s and gpus (or gres) are required")
            team = (row.get("team") or "").strip() or default_team
            jobs.append(TraceJob(
                id=len(jobs) + 1, submit_s=submit, duration_s=duration, gpus=int(math.ceil(gpus)), team=team,
                user=(row.get("user") or "").strip() or f"{team}-user", qos=(row.get("qos") or "").strip() or None,
                time_limit_s=_num(row, "time_limit_s", where), checkpoint_s=_num(row, "checkpoint_s", where, 0.0) or 0.0,
                name=(row.get("id") or "").strip(), gres=gres))
    jobs.sort(key=lambda j: (j.submit_s, j.id))
    return Trace(renumber(jobs), str(path), "the trace's team column")


def read_sacct_json(path: str | Path) -> Trace:
    """`sacct --json` (the module's doc)."""
    import json

    with open(path) as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None
    rows = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: no \"jobs\" list (sacct --json's output)")
    jobs: list[TraceJob] = []
    skipped = 0
    for r in rows:
        t = r.get("time") or {}
        start, end, submit = t.get("start") or 0, t.get("end") or 0, t.get("submission") or 0
        state = str(((r.get("state") or {}).get("current")) or "") if isinstance(r.get("state"), dict) else ""
        if state.split(" ")[0] in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "CONFIGURING", "COMPLETING") \
                or not (isinstance(start, int | float) and isinstance(end, int | float)) or start <= 0 or end < start:
            skipped += 1
            continue
        tres = r.get("tres") or {}
        gres = _gres_parts(tres.get("allocated")) or _gres_parts(tres.get("requested"))
        gpus = _gres_gpus(tres.get("allocated")) or _gres_gpus(tres.get("requested"))
        limit = t.get("limit")
        account = str(r.get("account") or "default")
        jobs.append(TraceJob(id=0, submit_s=float(submit or start), duration_s=float(end - start),
                             gpus=1 if gres else int(math.ceil(gpus)), gres=gres, team=account,
                             user=str(r.get("user") or f"{account}-user"),
                             qos=r.get("qos") or None,
                             time_limit_s=float(limit) * 60 if isinstance(limit, int | float) and limit > 0 else None,
                             name=str(r.get("job_id") or "")))
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    return Trace(renumber(jobs), str(path), "the accounts of the history", skipped)


def _gres_gpus(items: object) -> float:
    """The `gres/gpu` count of a dbv0.0.38 TRES list (`{"type": "gres", "name": "gpu"}`)."""
    if not isinstance(items, list):
        return 0.0
    return sum(float(x.get("count") or 0) for x in items
               if isinstance(x, dict) and x.get("type") == "gres" and x.get("name") == "gpu")


def _gres_parts(items: object) -> str:
    """A dbv0.0.38 TRES list's MIG instances or shards as a trace's `gres` (`gpu:1g.24gb:1`,
    `shard:2`); "" where it holds whole cards only (or several kinds, which one job's
    `--gres` cannot ask for)."""
    from batchd.slurm.gres import is_profile

    if not isinstance(items, list):
        return ""
    parts = [(str(x.get("name")), int(x.get("count") or 0)) for x in items
             if isinstance(x, dict) and x.get("type") == "gres"]
    mine = [f"gpu:{n[4:]}:{c}" for n, c in parts if n.startswith("gpu:") and is_profile(n[4:]) and c > 0]
    mine += [f"shard:{c}" for n, c in parts if n == "shard" and c > 0]
    return mine[0] if len(mine) == 1 else ""


def _weights(spec: str) -> list[tuple[str, float]]:
    out = []
    for part in spec.split(","):
        name, sep, w = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"teams: {part!r}: expected NAME=WEIGHT")
        try:
            out.append((name.strip(), float(w)))
        except ValueError:
            raise ValueError(f"teams: {part!r}: the weight is not a number") from None
    if not out or sum(w for _n, w in out) <= 0:
        raise ValueError("teams: no weights")
    return out


def _hash01(text: str, seed: int) -> float:
    h = hashlib.sha256(f"{seed}:{text}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64


def read_alibaba(path: str | Path, teams: str, seed: int = 1, max_duration_s: float | None = None) -> Trace:
    """The Alibaba v2023 job file, teams assigned by `teams` ("qos:LS=a,BE=b,*=c" or
    "hash:a=6,b=6,c=4")."""
    kind, _, spec = teams.partition(":")
    if kind not in ("qos", "hash") or not spec:
        raise ValueError("teams: \"qos:CLASS=TEAM,...\" or \"hash:TEAM=WEIGHT,...\"")
    by_qos: dict[str, str] = {}
    weights: list[tuple[str, float]] = []
    if kind == "qos":
        for part in spec.split(","):
            cls, sep, team = part.partition("=")
            if not sep or not team.strip():
                raise ValueError(f"teams: {part!r}: expected CLASS=TEAM")
            by_qos[cls.strip()] = team.strip()
    else:
        weights = _weights(spec)
    total = sum(w for _n, w in weights)
    jobs: list[TraceJob] = []
    skipped = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row.get("gpus") or 0)
            if gpus <= 0 or not (row.get("start_time_s") or "").strip() or not (row.get("duration_s") or "").strip():
                skipped += 1
                continue
            duration = float(row["duration_s"])
            if max_duration_s is not None and duration > max_duration_s:
                skipped += 1
                continue
            name = row["job_id"]
            if kind == "qos":
                team = by_qos.get(row.get("qos") or "", by_qos.get("*", ""))
                if not team:
                    skipped += 1
                    continue
            else:
                x = _hash01(name, seed) * total
                team = weights[-1][0]
                for n, w in weights:
                    if x < w:
                        team = n
                        break
                    x -= w
            user = f"{team}-u{int(_hash01('user:' + name, seed) * 4)}"
            milli = _num(row, "gpu_milli", f"{path}: {name}", 1000.0) or 1000.0
            jobs.append(TraceJob(id=0, submit_s=float(row["submit_time_s"]), duration_s=duration, gpus=gpus,
                                 team=team, user=user, name=name,
                                 gpu_fraction=milli / 1000.0 if gpus == 1 and 0 < milli < 1000 else 1.0))
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    rule = f"teams by {'QoS class' if kind == 'qos' else f'a hash of the pod name (seed {seed}) weighted'} {spec}"
    return Trace(renumber(jobs), str(path), rule, skipped)


def renumber(jobs: list[TraceJob]) -> list[TraceJob]:
    return [replace(j, id=i + 1) for i, j in enumerate(jobs)]


def transform(trace: Trace, scale: float = 1.0, load: float = 1.0, seed: int = 1, start_at_zero: bool = True,
              skip_s: float = 0.0) -> Trace:
    """Jobs submitted in the first `skip_s` seconds of the trace left out (counted as
    skipped); times divided by `scale`; arrivals thinned (load < 1, a seeded draw) or repeated
    (load > 1: each job whole times, then the fraction by a draw; a copy arrives half
    way to the next arrival)."""
    if scale <= 0 or load <= 0:
        raise ValueError("scale and load must be > 0")
    if skip_s < 0:
        raise ValueError("skip must be >= 0 seconds")
    jobs = sorted(trace.jobs, key=lambda j: (j.submit_s, j.id))
    skipped = trace.skipped
    if skip_s and jobs:
        first = jobs[0].submit_s
        kept = [j for j in jobs if j.submit_s - first >= skip_s]
        skipped += len(jobs) - len(kept)
        jobs = kept
    t0 = jobs[0].submit_s if jobs and start_at_zero else 0.0
    out: list[TraceJob] = []
    for i, j in enumerate(jobs):
        gap = (jobs[i + 1].submit_s - j.submit_s) if i + 1 < len(jobs) else 0.0
        copies = int(load) + (1 if _hash01(f"load:{j.id}", seed) < load - int(load) else 0)
        for c in range(copies):
            shift = gap * c / max(copies, 1)
            out.append(replace(j, submit_s=(j.submit_s - t0 + shift) / scale, duration_s=j.duration_s / scale,
                               time_limit_s=None if j.time_limit_s is None else j.time_limit_s / scale,
                               checkpoint_s=j.checkpoint_s / scale))
    out.sort(key=lambda j: (j.submit_s, j.id))
    return Trace(renumber(out), trace.source, trace.rule, skipped)
