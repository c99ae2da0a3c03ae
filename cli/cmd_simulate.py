"""`batchd simulate`: replay a job trace through the scheduler in virtual time (batchd.sim).

    batchd simulate --config CLUSTER.toml --accounts ACCOUNTS.toml --trace FILE
                    [--format batchd|alibaba] [--teams RULE] [--scale F] [--load X]
                    [--until SECONDS] [--checkpoint SECONDS] [--qos-checkpoint QOS=SECONDS,...]
                    [--price PER_GPU_HOUR]
                    [--policy batchd|static|fifo|kueue | --compare] [--speedup] [--json]

See docs/simulate.md for the trace formats, the team rules and the measures.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import click


def _s(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 120:
        return f"{v:.0f}s"
    if v < 7200:
        return f"{v / 60:.1f}m"
    return f"{v / 3600:.1f}h"


def _qos_intervals(text: str | None) -> dict[str, float]:
    """`normal=1800,interactive=0` -> {QOS: seconds}; ValueError on anything else."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, val = part.partition("=")
        try:
            secs = float(val) if sep and name.strip() else -1.0
        except ValueError:
            secs = -1.0
        if not (secs >= 0 and math.isfinite(secs)):
            raise ValueError(f"--qos-checkpoint: {part.strip()!r}: expected QOS=SECONDS, SECONDS >= 0")
        out[name.strip()] = secs
    return out


def _per_qos_text(per_qos: dict[str, float]) -> str:
    return ("; per QOS " + ", ".join(f"{q} {v:g}s" for q, v in sorted(per_qos.items()))) if per_qos else ""




def render(m: dict[str, Any], header: list[str]) -> str:
    rows = [["TEAM", "JOBS", "NEVER", "WAIT p50", "p90", "p99", "JCT p50", "GPU-h", "BORROWED", "LENT", "PREEMPT",
             "LOST GPU-h", "RECLAIM p50", "QUOTA SERVED"]]
    bill = m["cluster"].get("bill")
    if bill:
        rows[0].append(f"BILL {bill['currency']}".rstrip())
    for t, r in m["teams"].items():
        rows.append([t, str(r["jobs"]), str(r["never_runnable"]), _s(r["wait_s"]["median"]), _s(r["wait_s"]["p90"]), _s(r["wait_s"]["p99"]),
                     _s(r["completion_s"]["median"]), f"{r['gpu_hours']:.1f}", f"{r['borrowed_gpu_hours']:.1f}",
                     f"{r['lent_gpu_hours']:.1f}", str(r["preemptions"]), f"{r['lost_gpu_hours']:.1f}",
                     _s(r["reclaim_latency_s"]["median"]),
                     "-" if r["quota_served"] is None else f"{100 * r['quota_served']:.1f}%"])
        if bill:
            rows[-1].append(r.get("bill", "0.00"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [*header, ""]
    lines += ["  ".join(c.rjust(widths[i]) if i else c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    c = m["cluster"]
    util = "-" if c["utilisation"] is None else f"{100 * c['utilisation']:.1f}%"
    lines += ["", f"cluster: {c['jobs']} jobs on {c['gpus']:g} GPUs over {_s(c['span_s'])}; utilisation "
              f"{util}; wait p50 "
              f"{_s(c['wait_s']['median'])} p90 {_s(c['wait_s']['p90'])}; {c['preemptions']} preemptions, "
              f"{c['lost_gpu_hours']:.1f} GPU-h lost; Jain's index {c['jain_index']}; {c['cycles']} cycles"]
    return "\n".join(lines) + "\n"


@click.command(help="Replay a job trace through the scheduler in virtual time and measure waits, GPU-hours, "
                    "borrowing, reclaim and fairness per team (docs/simulate.md).")
@click.option("--config", "config_path", required=True, help="The cluster's batchd.toml (nodes, QOS, scheduler).")
@click.option("--accounts", "accounts_path", help="The accounts file (`batchd apply`'s) to try.")
@click.option("--trace", "trace_path", required=True, help="The trace file.")
@click.option("--format", "fmt", type=click.Choice(["batchd", "alibaba", "sacct-json"]), default="batchd",
              show_default=True, help="batchd's CSV, the Alibaba v2023 job file, or `sacct --json` output "
              "(last month replayed under another design).")
@click.option("--teams", default=None, help='Alibaba: "qos:LS=serving,BE=training,*=notebooks" or '
              '"hash:serving=6,training=6,notebooks=4".')
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the hash team rule and of --load.")
@click.option("--max-duration", type=float, default=None, help="Leave out jobs longer than this (seconds, as traced).")
@click.option("--skip", "skip_s", type=float, default=0.0, show_default=True,
              help="Leave out the jobs submitted in the first SECONDS of the trace (as traced).")
@click.option("--scale", type=float, default=1.0, show_default=True, help="Divide every time by this.")
@click.option("--load", type=float, default=1.0, show_default=True, help="Thin (< 1) or repeat (> 1) arrivals.")
@click.option("--until", type=float, default=None, help="Stop at this virtual second (after scaling).")
@click.option("--checkpoint", type=float, default=0.0, show_default=True,
              help="Seconds between checkpoints of jobs whose trace names none (0: a preempted job starts over).")
@click.option("--qos-checkpoint", "qos_checkpoint", default=None, metavar="QOS=SECONDS[,...]",
              help="Seconds between checkpoints of the jobs of a QOS whose trace names none (before "
                   "--checkpoint; 0: they start over).")
@click.option("--term-exit", type=float, default=None,
              help="Seconds a preempted job takes to exit after SIGTERM (default: all of its grace time).")
@click.option("--price", type=float, default=None,
              help="One price per GPU-hour, for a rough cost per team (the bill itself prices by the accounts "
                   "file's [[price]] rate card).")
@click.option("--start", "start_at", default=None,
              help="The date (UTC) virtual second 0 is, for the rate card's prices; default the latest "
                   "valid_from of the prices.")
@click.option("--policy", "policy_name", type=click.Choice(["batchd", "static", "fifo", "kueue"]), default="batchd",
              show_default=True, help="The queue design to run (docs/simulate.md, \"Policies\").")
@click.option("--compare", is_flag=True, help="Run every policy on the same trace and cluster, side by side.")
@click.option("--lending", type=float, default=0.5, show_default=True,
              help="kueue: the share of a team's quota it may lend where the accounts file sets no lending_limit.")
@click.option("--speedup", is_flag=True,
              help="Also say how fast virtual time ran: virtual seconds per wall-clock second, per policy (on "
                   "standard error; with --json, also in each policy's settings).")
@click.option("--json", "as_json", is_flag=True, help="Print the measures as JSON.")
@click.option("--html", "as_html", is_flag=True, help="Write one self-contained HTML page with plots (needs -o).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="The file --html writes.")
def command(config_path: str, accounts_path: str | None, trace_path: str, fmt: str, teams: str | None, seed: int,
            max_duration: float | None, skip_s: float, scale: float, load: float, until: float | None, checkpoint: float,
            qos_checkpoint: str | None, term_exit: float | None, price: float | None, start_at: str | None, policy_name: str, compare: bool, lending: float,
            speedup: bool, as_json: bool, as_html: bool, output: str | None) -> None:
    from batchd.sim import trace as tr
    from batchd.sim.engine import from_files
    from batchd.sim.measures import measure, utilisation_series
    from batchd.sim.policies import POLICIES, describe

    start_epoch = None
    if start_at is not None:
        from batchd.accounting.prices import PriceError, parse_when

        try:
            start_epoch = parse_when(start_at, field="--start")
        except PriceError:
            click.echo(f"batchd simulate: error: --start: {start_at!r} is not a date (YYYY-MM-DD) or a datetime "
                       "on a whole hour (UTC)", err=True)
            sys.exit(1)
    if as_html and not output:
        click.echo("batchd simulate: error: --html needs -o FILE", err=True)
        sys.exit(1)
    try:
        if fmt == "alibaba":
            if not teams:
                raise ValueError("--format alibaba needs --teams (the trace has no user or team)")
            t = tr.read_alibaba(trace_path, teams, seed=seed, max_duration_s=max_duration)
        elif fmt == "sacct-json":
            t = tr.read_sacct_json(trace_path)
        else:
            t = tr.read_csv(trace_path)
        t = tr.transform(t, scale=scale, load=load, seed=seed, skip_s=skip_s)
        if not t.jobs:
            raise ValueError("the trace has no job to replay")
        names = list(POLICIES) if compare else [policy_name]
        per_qos = _qos_intervals(qos_checkpoint)
        sims = {n: from_files(config_path, accounts_path, t.jobs, checkpoint_s=checkpoint, design=n,
                              lending_fraction=lending, term_exit_s=term_exit, qos_checkpoint_s=per_qos)
                for n in names}
    except (OSError, ValueError) as e:
        click.echo(f"batchd simulate: error: {e}", err=True)
        sys.exit(1)
    except Exception as e:  # an accounts file or config batchd refuses: its own words
        click.echo(f"batchd simulate: error: {getattr(e, 'message', e)}", err=True)
        sys.exit(1)
    results: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for n, sim in sims.items():
        t0 = time.perf_counter()
        res = sim.run(t.jobs, until=until)
        wall = time.perf_counter() - t0
        m = measure(res, price, start_epoch)
        m["policy"] = {"name": n, "settings": describe(n, lending)}
        m["settings"] = {"config": config_path, "accounts": accounts_path, "trace": trace_path, "format": fmt,
                         "teams": t.rule, "skipped_rows": t.skipped, "skip_s": skip_s, "scale": scale, "load": load, "seed": seed,
                         "checkpoint_s": checkpoint, "qos_checkpoint_s": per_qos, "until": until,
                         "wall_s": round(wall, 3)}
        if speedup:
            span = m["cluster"]["span_s"] or 0.0
            ratio = span / wall if wall > 0 else None
            m["settings"]["speedup"] = None if ratio is None else round(ratio, 1)
            said = "speed-up not measurable (no wall time)" if ratio is None else f"speed-up {ratio:,.0f}x real time"
            click.echo(f"batchd simulate: policy {n}: {span / 86400:.2f} virtual days in {wall:.2f} s "
                       f"({res.cycles} cycles): {said}", err=True)
        results[n] = m
        if as_html:
            waits: dict[str, list[float]] = {}
            for j in res.jobs:
                if j.first_start is not None:
                    waits.setdefault(j.team, []).append(j.first_start - j.t.submit_s)
            extras[n] = {"series": utilisation_series(res), "waits": waits, "capacity": res.capacity_gpus}
    if as_html:
        from batchd.sim.html import render_html

        head = (f"trace {trace_path} ({fmt}; {t.rule}; {len(t.jobs)} jobs, {t.skipped} rows left out; scale "
                f"{scale:g}, load {load:g}); cluster {config_path}; accounts {accounts_path or '(none)'}; "
                f"checkpoint {checkpoint:g} s{_per_qos_text(per_qos)}")
        with open(output or "", "w") as f:
            f.write(render_html(results, extras, head))
        click.echo(f"batchd simulate: wrote {output}", err=True)
        return
    if as_json:
        click.echo(json.dumps(results if compare else results[policy_name], indent=1, sort_keys=True))
        return
    head = (f"trace {trace_path} ({fmt}; {t.rule}; {len(t.jobs)} jobs, {t.skipped} rows left out; "
            f"scale {scale:g}, load {load:g}); cluster {config_path}; accounts {accounts_path or '(none)'}; "
            f"checkpoint {checkpoint:g}s{_per_qos_text(per_qos)}")
    out = [head, ""]
    for n, m in results.items():
        out.append(render(m, [f"policy {n}: {m['policy']['settings']} (simulated in {m['settings']['wall_s']:.1f}s)"]))
    if compare:
        out.append(summary(results))
    click.echo("\n".join(out), nl=False)


def summary(results: dict[str, Any]) -> str:
    """One line per policy and team: the figures to compare designs by."""
    rows = [["POLICY", "TEAM", "WAIT p50", "p90", "GPU-h", "PREEMPT", "LOST GPU-h", "RECLAIM p50", "QUOTA SERVED",
             "UTIL", "JAIN"]]
    billed = all(m["cluster"].get("bill") for m in results.values())
    if billed:
        rows[0].append("BILL")
    for n, m in results.items():
        c = m["cluster"]
        for t, r in m["teams"].items():
            rows.append([n, t, _s(r["wait_s"]["median"]), _s(r["wait_s"]["p90"]), f"{r['gpu_hours']:.1f}",
                         str(r["preemptions"]), f"{r['lost_gpu_hours']:.1f}", _s(r["reclaim_latency_s"]["median"]),
                         "-" if r["quota_served"] is None else f"{100 * r['quota_served']:.1f}%",
                         "-" if c["utilisation"] is None else f"{100 * c['utilisation']:.1f}%",
                         "-" if c["jain_index"] is None else f"{c['jain_index']:.3f}"])
            if billed:
                rows[-1].append(r.get("bill", "0.00"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "side by side\n" + "\n".join("  ".join(c.rjust(widths[i]) if i > 1 else c.ljust(widths[i])
                                                  for i, c in enumerate(r)) for r in rows) + "\n"
