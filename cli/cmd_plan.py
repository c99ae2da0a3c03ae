"""`batchd plan`: run one scheduling cycle on a snapshot file and print the decisions.

    batchd plan SNAPSHOT.json          readable tables
    batchd plan --json SNAPSHOT.json   the decisions JSON of docs/snapshot.md
    batchd plan -                      read the snapshot from stdin
    batchd plan --dump                 print the live cluster's snapshot (GET /v1/snapshot)

A bad file gives one line `batchd plan: error: <path of the bad key>: <problem>` and exit 1.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def _fmt_alloc(alloc: dict[str, Any]) -> str:
    parts = []
    for node, a in alloc.items():
        gpus = ",".join(str(g) for g in a.get("gpus", []))
        parts.append(f"{node}[tasks={a.get('tasks', 1)} gpus={gpus or '-'} cpus={a.get('cpus', 0)} "
                     f"mem={a.get('memory_mb', 0)}M]")
    return " ".join(parts)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(header)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(lines)


def render(dec: dict) -> str:
    """The decisions as readable text: starts, preemptions, pending reasons, fair shares."""
    out = []
    planned = dec.get("planned_start", {})
    out.append(f"START ({len(dec['start'])})")
    if dec["start"]:
        out.append(_table([[str(s["job"]), _fmt_alloc(s["allocation"]),
                            ",".join(str(a) for a in s.get("after", [])) or "-"] for s in dec["start"]],
                          ["JOBID", "ALLOCATION", "AFTER"]))
    out.append("")
    out.append(f"PREEMPT ({len(dec['preempt'])})")
    if dec["preempt"]:
        # POLICY: the preemptor account's rule that allowed it (issue 16); decisions of an
        # older scheduler have none, and then no such column
        header = ["JOBID", "REASON", "FOR"]
        rows = [[str(p["job"]), p["reason"], str(p["for"])] for p in dec["preempt"]]
        if any(p.get("policy") for p in dec["preempt"]):
            header.append("POLICY")
            for row, p in zip(rows, dec["preempt"], strict=True):
                row.append(p.get("policy") or "")
        out.append(_table(rows, header))
    out.append("")
    out.append(f"PENDING ({len(dec['pending'])})")
    if dec["pending"]:
        out.append(_table([[str(p["job"]), p["reason"], str(planned.get(str(p["job"]), "-"))]
                           for p in dec["pending"]], ["JOBID", "REASON", "PLANNED_START"]))
    out.append("")
    out.append("FAIR SHARE")
    keys: list[str] = []
    for v in dec["fair_share"].values():
        for k in v:
            if k not in keys:
                keys.append(k)
    rows = [[a] + [_num(v.get(k)) for k in keys] for a, v in dec["fair_share"].items()]
    out.append(_table(rows, ["ACCOUNT"] + [k.upper() for k in keys]))
    return "\n".join(out)


def _num(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if isinstance(x, float) else str(x)


def _fail(msg: str) -> None:
    click.echo(f"batchd plan: error: {msg}", err=True)
    sys.exit(1)


@click.command(help="Run one scheduling cycle on a snapshot (docs/snapshot.md) and print the decisions. "
                    "SNAPSHOT is a JSON file, or - for stdin. --dump prints the live cluster's snapshot instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the decisions as JSON.")
@click.option("--dump", is_flag=True, help="Fetch the live cluster's snapshot from the daemon and print it as JSON.")
@click.argument("snapshot", required=False)
def command(as_json: bool, dump: bool, snapshot: str | None) -> None:
    if dump:
        from batchd.cli.client import DaemonError, Unreachable, request
        try:
            snap = request("GET", "/v1/snapshot")
        except (Unreachable, DaemonError) as e:
            _fail(str(e))
        click.echo(json.dumps(snap, indent=2, sort_keys=False))
        return
    if not snapshot:
        raise click.UsageError("give a SNAPSHOT file (or - for stdin), or --dump")
    try:
        text = sys.stdin.read() if snapshot == "-" else open(snapshot, encoding="utf-8").read()
    except OSError as e:
        _fail(f"{snapshot}: {e.strerror or e}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        _fail(f"{snapshot}: not valid JSON: {e}")
    from batchd.scheduler import decide, load_snapshot
    try:
        dec = decide(load_snapshot(data)).to_dict()
    except ValueError as e:
        _fail(f"{snapshot}: {e}")
    if as_json:
        click.echo(json.dumps(dec))
    else:
        click.echo(render(dec))
