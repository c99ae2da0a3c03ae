"""`batchd eff JOBID`: a job's efficiency, like Slurm's `seff`: CPU and memory use against
what was allocated, and (where NVML measured it) GPU utilisation and memory, with a
warning when the job held its GPUs at 0 % for longer than the configured time."""

from __future__ import annotations

import json
import sys

import click

from batchd.cli import client


def _hms(s: float) -> str:
    s = int(round(s))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{sec:02d}"


def _size(mb: float) -> str:
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.2f} MB"


def render_eff(r: dict) -> str:
    """The seff-like text of a `/v1/eff` reply."""
    job, runs, e = r["job"], r["runs"], r.get("efficiency")
    last = runs[-1] if runs else None
    lines = [f"Job ID: {job['id']}", f"Cluster: {r.get('cluster', '')}"]
    if "user" in job:
        lines.append(f"User/Account: {job['user']}/{job['account']}")
        state = job["state"]
        if last and state not in ("RUNNING", "PENDING"):
            state = f"{last['state']} (exit code {last['exit_code']})"
        lines.append(f"State: {state}")
    tres = last["tres"] if last else {}
    if not tres and job.get("tres_alloc"):
        tres = dict(kv.split("=", 1) for kv in job["tres_alloc"].split(",") if "=" in kv)
    cores = float(tres.get("cpu", 0) or 0)
    if last:
        wall = float(last["elapsed_s"])
    elif job.get("start_time"):
        wall = max(0.0, r["now"] - job["start_time"])
    else:
        wall = 0.0
    lines.append(f"Cores: {cores:g}")
    if len(runs) > 1:
        lines.append(f"Runs: {len(runs)} (requeued); figures below are of the last run")
    cpu_s = last.get("cpu_time_s") if last else None
    if cpu_s is None and e:
        cpu_s = e["cpu_pct_sum"] / e["samples"] / 100.0 * wall
    if cpu_s is not None and cores and wall:
        lines.append(f"CPU Utilized: {_hms(cpu_s)}")
        lines.append(f"CPU Efficiency: {100.0 * cpu_s / (cores * wall):.2f}% of {_hms(cores * wall)} core-walltime")
    lines.append(f"Job Wall-clock time: {_hms(wall)}")
    rss = (last.get("max_rss_mb") if last else None) or (e["rss_mb_max"] if e else None)
    mem_alloc = tres.get("mem")
    if rss is not None:
        lines.append(f"Memory Utilized: {_size(float(rss))}")
        if mem_alloc:
            mem_mb = float(mem_alloc) if not isinstance(mem_alloc, str) else _parse_mem(mem_alloc)
            lines.append(f"Memory Efficiency: {100.0 * float(rss) / mem_mb:.2f}% of {_size(mem_mb)}")
    gpus = float(tres.get("gres/gpu", 0) or 0)
    if gpus:
        types = [k.split(":", 1)[1] for k in tres if str(k).startswith("gres/gpu:")]
        lines.append(f"GPUs: {gpus:g}" + (f" ({', '.join(sorted(types))})" if types else ""))
        util = (last.get("gpu_util_pct") if last else None)
        if util is None and e and e["gpu_samples"]:
            util = e["gpu_util_sum"] / e["gpu_samples"]
        if util is None:
            lines.append("GPU Utilization: not measured (no NVML on the node)")
        else:
            peak = f", {e['gpu_util_max']:.1f}% peak ({e['gpu_samples']} samples)" if e and e["gpu_samples"] else ""
            lines.append(f"GPU Utilization: {float(util):.1f}% average{peak}")
            gmem = (last.get("gpu_mem_mb") if last else None) or (e["gpu_mem_max_mb"] if e else None)
            if gmem:
                lines.append(f"GPU Memory Utilized: {_size(float(gmem))} peak")
        if e and e["gpu_zero_max_s"] >= r.get("zero_gpu_flag_s", 3600):
            lines.append(f"WARNING: the job held its GPUs at 0% for {_hms(e['gpu_zero_max_s'])} in one stretch")
    return "\n".join(lines) + "\n"


def _parse_mem(s: str) -> float:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    s = s.strip()
    if s and s[-1].upper() in units:
        return float(s[:-1]) * units[s[-1].upper()]
    return float(s)


@click.command(help="Print a job's CPU, memory and GPU efficiency (like seff).")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the daemon's reply).")
def command(job_id, as_json):
    head, sep, task = job_id.partition("_")
    if not all(p.isascii() and p.isdigit() for p in ((head, task) if sep else (head,))):
        click.echo(f"batchd eff: error: Invalid job id: {job_id}", err=True)
        sys.exit(1)
    r = client.call("batchd eff", "GET", "/v1/eff", query={"job": job_id})
    if as_json:
        click.echo(json.dumps(r, indent=2, sort_keys=True))
    else:
        click.echo(render_eff(r), nl=False)
