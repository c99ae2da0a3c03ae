"""`batchd node`: what this node has (GPUs found by NVML or listed in the config) and which
job isolation it offers. Runs locally, without the daemon."""

from __future__ import annotations

import json
import logging
import socket
import sys
from typing import Any

import click

from batchd.cli.helpfmt import SummaryGroup

PCIE_NAMES = {0: "BRD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"; none -> "-"."""
    from batchd.slurm.hostlist import ranges

    return ranges(ids) or "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _live(aliases: dict[str, str] | None) -> dict[str, Any]:
    from batchd.node import nvml
    inv = nvml.discover(aliases)
    d = inv.to_dict()
    d["snapshot_gpus"] = inv.to_snapshot_gpus()
    return d


def _print_nvml_node(name: str, d: dict[str, Any]) -> None:
    gpus = d["gpus"]
    head = f"node {name}: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} (nvml"
    head += f", driver {d['driver']})" if d.get("driver") else ")"
    click.echo(head)
    if d.get("reason"):
        click.echo(f"  note: {d['reason']}")
    for e in d.get("errors", []):
        click.echo(f"  error: {e}")
    if not gpus:
        return
    rows = [["IDX", "TYPE", "NAME", "MEMORY_MB", "PCI_BUS_ID", "NUMA", "CPUS", "MIG", "UUID"]]
    for g in gpus:
        mig = "n/a" if g["mig_mode"] is None else ("on" if g["mig_mode"] else "off")
        if g["mig_pending"] is not None and g["mig_pending"] != g["mig_mode"]:
            mig += "*"
        rows.append([str(g["index"]), g["type"], g["name"], str(g["memory_mb"]), g["pci_bus_id"],
                     "-" if g["numa"] is None else str(g["numa"]), _ranges(g["cpus"]), mig, g["uuid"]])
    for line in _table(rows):
        click.echo("  " + line)
    for g in gpus:
        if g["mig_mode"] and not g["mig"]:
            click.echo(f"  GPU {g['index']}: MIG mode on but no MIG device: not schedulable")
        for m in g["mig"]:
            click.echo(f"  GPU {g['index']} MIG {m['profile']:<10} {m['uuid']}  {m['memory_mb']} MiB  "
                       f"{m['slices']}/{m['parent_slices']} of the GPU")
    if any(g["mig_pending"] is not None and g["mig_pending"] != g["mig_mode"] for g in gpus):
        click.echo("  * MIG mode changes at the next GPU reset")
    idx = [g["index"] for g in gpus]
    if len(idx) > 1:
        click.echo("  topology (NV<n>: n NVLinks, NVS: NVLink through NVSwitch, else the closest PCIe "
                   "common ancestor: PIX one switch, PXB several, PHB host bridge, NODE same NUMA, SYS):")
        rows = [[""] + [f"GPU{j}" for j in idx]]
        for i in idx:
            row = [f"GPU{i}"]
            for j in idx:
                n, p2p, lvl = d["nvlink"][i][j], d["nvlink_p2p"][i][j], d["pcie"][i][j]
                if i == j:
                    row.append("X")
                elif n:
                    row.append(f"NV{n}")
                elif p2p:
                    row.append("NVS")
                else:
                    row.append(PCIE_NAMES.get(lvl, "?") if lvl is not None else "?")
            rows.append(row)
        for line in _table(rows):
            click.echo("    " + line)


def _print_static_node(name: str, gpus: list[dict[str, Any]]) -> None:
    click.echo(f"node {name}: static inventory from the config")
    if not gpus:
        click.echo("  no GPUs")
        return
    for g in gpus:
        if "count" in g:
            click.echo(f"  gpu:{g.get('type')}:{g['count']}")
        else:
            migs = ", ".join(f"{m.get('profile')} {m.get('uuid')}" for m in g.get("mig", []))
            click.echo(f"  GPU {g.get('index')}  {g.get('type')}  {g.get('uuid', '')}"
                       + (f"  MIG: {migs}" if migs else ""))


@click.group(cls=SummaryGroup, help="Inspect this node: its GPUs and the job isolation it offers.")
def command() -> None:
    pass


@command.command("inventory", short_help="What GPUs this node has: NVML discovery (devices, MIG, topology) or "
                 "the config's static inventory.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Show the nodes of this batchd.toml: static GPU lists as written, "
                   "'nvml' nodes discovered live when they are this host (or the only node). "
                   "Without it: live NVML discovery of this host.")
def inventory(as_json: bool, config_path: str | None) -> None:
    """What GPUs this node has: NVML discovery (index, UUID, type, memory, PCI bus id, NUMA,
    CPU affinity, MIG devices, NVLink/PCIe topology) or the config's static inventory.
    A node without driver or GPUs shows zero GPUs and the reason; it is not an error."""
    logging.basicConfig(level=logging.WARNING, format="batchd: %(message)s", stream=sys.stderr)
    host = socket.gethostname().split(".")[0]
    nodes: list[dict[str, Any]] = []
    if config_path is None:
        nodes.append({"name": host, "source": "nvml", **_live(None)})
    else:
        from batchd.config import load_config
        from batchd.errors import ConfigError
        try:
            cfg = load_config(config_path)
        except ConfigError as e:
            click.echo(f"batchd: error: {e.message}", err=True)
            sys.exit(1)
        live = None
        for n in cfg.nodes:
            if n.gpus == "nvml":
                if n.name.split(".")[0] == host or len(cfg.nodes) == 1:
                    live = live or _live(cfg.gpu_aliases)
                    nodes.append({"name": n.name, "source": "nvml", **live})
                else:
                    nodes.append({"name": n.name, "source": "nvml-remote", "gpus": None,
                                  "reason": "discovered by that node's own daemon"})
            else:
                nodes.append({"name": n.name, "source": "config", "gpus": list(n.gpus)})
    if as_json:
        click.echo(json.dumps({"nodes": nodes}, indent=2))
        return
    for i, n in enumerate(nodes):
        if i:
            click.echo("")
        if n["source"] == "nvml":
            _print_nvml_node(n["name"], n)
        elif n["source"] == "config":
            _print_static_node(n["name"], n["gpus"])
        else:
            click.echo(f"node {n['name']}: gpus = \"nvml\", {n['reason']}")


@command.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--probe", is_flag=True,
              help="Also start one short transient scope with systemd-run (as root) to prove that "
                   "MemoryMax, AllowedCPUs and DevicePolicy work here.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Also say which mode the daemon would use with this batchd.toml's "
                   "`isolation` setting (auto, systemd or plain).")
def check(as_json: bool, probe: bool, config_path: str | None) -> None:
    """Which job isolation this node offers (systemd transient units or the plain
    supervisor) and why. Changes nothing unless --probe is given."""
    from batchd.node import isolation
    r = isolation.detect(probe=probe)
    active: dict[str, Any] = {}
    if config_path is not None:
        from batchd.config import load_config
        from batchd.errors import ConfigError
        try:
            setting = load_config(config_path).isolation
        except ConfigError as e:
            click.echo(f"batchd: error: {e.message}", err=True)
            sys.exit(1)
        active = {"setting": setting}
        try:
            active["active"] = isolation.choose_mode(setting, r)
        except ValueError as e:
            active["active"] = None
            active["error"] = str(e)
    if as_json:
        click.echo(json.dumps({**r.to_dict(), **active}, indent=2))
        return
    for line in r.lines():
        click.echo(line)
    if active:
        what = active["active"] or f"none: the daemon refuses to start ({active['error']})"
        click.echo(f"config: isolation = {active['setting']!r} -> jobs run in: {what}")


def _set_state(action: str, name: str, reason: str | None) -> None:
    from batchd.cli.admin import call

    res = call("POST", "/v1/nodes/state", {"node": name, "action": action, "reason": reason})
    click.echo(f"node {res['node']}: {res['state']}" + (f" ({reason})" if reason and action != "resume" else ""))


@command.command("drain")
@click.argument("name")
@click.option("--reason", required=True, help="Why (shown by sinfo -R and scontrol show node).")
def drain(name: str, reason: str) -> None:
    """Take no new jobs on NAME; the running ones finish."""
    _set_state("drain", name, reason)


@command.command("resume")
@click.argument("name")
def resume(name: str) -> None:
    """Make a drained or down node schedulable again."""
    _set_state("resume", name, None)


@command.command("down")
@click.argument("name")
@click.option("--reason", required=True, help="Why the node is down.")
def down(name: str, reason: str) -> None:
    """Mark NAME DOWN (no new jobs; the controller treats it as failed)."""
    _set_state("down", name, reason)
