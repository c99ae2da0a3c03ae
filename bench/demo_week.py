"""A simulated week on the 16-GPU example, with MIG and shard jobs, billed by a real dev daemon.

    .venv/bin/python bench/demo_week.py [--days 7] [--seed 14] [--out DIR]

What it does (nothing here is timed; it prints the bill):
1. starts `batchd serve --dev` in a fresh directory on the 16-GPU example, except that gpu01's
   cards 0 and 1 are in MIG mode (four 1g.24gb instances each, a quarter of an RTX PRO 6000)
   and every whole card offers 4 shards (`shard_per_gpu = 4`); applies
   examples/accounts-16gpu.toml (the teams and prices) through `batchd apply`;
2. writes a week of finished runs into the daemon's store, each recorded as the controller
   records a start (the charge of its allocation by batchd.slurm.gres, billed with the config's
   TRESBillingWeights): serving keeps gpu04 and two cards of gpu03 busy; training runs on
   gpu02, the other two cards of gpu03 and, borrowing, gpu01's card 3 at night; notebooks use
   the eight MIG instances and the shards of gpu01's card 2. Per device, runs of random length
   with idle gaps (seeded);
3. prints `batchd report --start WEEK --end now` (the text bill) and writes the HTML bill
   (`--html`) to DIR/week.html, and, where `chromium` exists, a screenshot DIR/week.png.

It shows the rules of docs/gpu-model.md on a realistic mix; the figures depend on the seed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

def _mig(card: str) -> str:
    return ", ".join(f'{{ profile = "1g.24gb", uuid = "MIG-{card}{i}" }}' for i in range(4))


GPU01 = f"""gpus = [
  {{ index = 0, uuid = "GPU-01-0", type = "rtxpro6000", mig = [{_mig("a")}] }},
  {{ index = 1, uuid = "GPU-01-1", type = "rtxpro6000", mig = [{_mig("b")}] }},
  {{ index = 2, uuid = "GPU-01-2", type = "rtxpro6000" }},
  {{ index = 3, uuid = "GPU-01-3", type = "rtxpro6000" }},
]"""


def config_text() -> str:
    text = (ROOT / "examples" / "cluster-16gpu.toml").read_text()
    head, sep, rest = text.partition('name = "gpu01"')
    a, b, c = rest.partition('gpus = [{ type = "rtxpro6000", count = 4 }]')
    return "shard_per_gpu = 4\n" + head + sep + a + GPU01 + c


def devices() -> list[tuple[str, str, dict, float]]:
    """(account, user, allocation on its node, busy fraction) per device slot."""
    out: list[tuple[str, str, dict, float]] = []
    for n in ("gpu04",):
        out += [("serving", "alice", {n: {"gpus": [i], "cpus": 8, "memory_mb": 64000}}, 0.92) for i in range(4)]
    out += [("serving", "alice", {"gpu03": {"gpus": [i], "cpus": 8, "memory_mb": 64000}}, 0.85) for i in (0, 1)]
    out += [("training", "bob", {"gpu02": {"gpus": [i], "cpus": 12, "memory_mb": 96000}}, 0.8) for i in range(4)]
    out += [("training", "root", {"gpu03": {"gpus": [i], "cpus": 12, "memory_mb": 96000}}, 0.6) for i in (2, 3)]
    out += [("training", "bob", {"gpu01": {"gpus": [3], "cpus": 12, "memory_mb": 96000}}, -1.0)]  # nights
    out += [("notebooks", "carol" if k % 2 else "root",
             {"gpu01": {"gpus": [f"{k // 4}:MIG-{'ab'[k // 4]}{k % 4}"], "cpus": 4, "memory_mb": 16000}}, 0.45)
            for k in range(8)]
    out += [("notebooks", "carol", {"gpu01": {"shards": 1, "shard_gpus": [2], "cpus": 2, "memory_mb": 8000}}, 0.5)
            for _ in range(4)]
    return out


def week_records(start: float, end: float, seed: int, cfg_text: str) -> list[dict]:
    import tomllib

    from batchd.slurm.gres import charge_of_allocation, node_inventories
    from batchd.slurm.tres import billing, parse_billing_weights

    cfg = tomllib.loads(cfg_text)
    inv = node_inventories([{"name": n["name"], "gpus": n["gpus"]} for n in cfg["node"]], cfg["shard_per_gpu"])
    weights = parse_billing_weights(cfg["accounting"]["tres_billing_weights"])
    rng = random.Random(seed)
    rows: list[dict] = []
    jid = 1000
    for acct, user, alloc, busy in devices():
        ch = charge_of_allocation(alloc, inv)
        rec = ch.record()
        bill = billing(weights, ch.tres, parts=ch.billing_parts())
        t = start + rng.uniform(0, 3600)
        while t < end:
            if busy < 0:  # borrowed at night: 20:00-06:00
                day0 = t - (t % 86400)
                s, e = day0 + 20 * 3600 + rng.uniform(0, 1800), day0 + 30 * 3600 - rng.uniform(0, 1800)
                t = day0 + 86400
                if s >= end:
                    break
            else:
                dur = rng.expovariate(1 / (4 * 3600)) + 600
                s, e = t, t + dur
                t = e + dur * (1 - busy) / busy * rng.uniform(0.5, 1.5)
            e = min(e, end)
            if e - s < 60:
                continue
            jid += 1
            util = None if rng.random() < 0.1 else round(rng.uniform(20, 95) if acct != "notebooks"
                                                         else rng.uniform(0, 40), 1)
            rows.append(dict(job_id=jid, run=0, name="demo", account=acct, user=user, uid=0, gid=0,
                             partition="gpu", qos="normal", node_list=next(iter(alloc)),
                             tres_alloc="", tres=rec, billing=bill, submit_time=s, start_time=s, end_time=e,
                             elapsed_s=int(e - s), state="COMPLETED", exit_code=0, exit_signal=0,
                             gpu_util_pct=util))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--out", default=None, help="where week.html/week.png go (default: a temp dir)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batchd-week-"))
    out = Path(a.out) if a.out else work
    out.mkdir(parents=True, exist_ok=True)
    cfg_text = config_text()
    (work / "batchd.toml").write_text(cfg_text)
    env = dict(os.environ, BATCHD_SOCKET=str(work / ".batchd" / "batchd.sock"),
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    log = open(work / "daemon.log", "w")
    proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--config", "batchd.toml"], cwd=work,
                            stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        for _ in range(150):
            if subprocess.run([str(BIN / "sinfo")], env=env, cwd=work, capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        subprocess.run([str(BIN / "batchd"), "apply", str(ROOT / "examples" / "accounts-16gpu.toml")],
                       env=env, cwd=work, check=True, capture_output=True)
        now = time.time()
        start = now - a.days * 86400
        start -= start % 3600
        from sqlalchemy import update

        from batchd.store import Store
        from batchd.store.tables import NodeEvent, NodeRow, UsageRecord

        store = Store("sqlite:///" + str(work / ".batchd" / "batchd.db"))
        rows = week_records(start, now, a.seed, cfg_text)
        with store.tx() as s:
            s.execute(UsageRecord.__table__.insert(), rows)
            # the simulated cluster existed the whole week: its nodes registered at its start
            # (capacity and quotas count from a node's registration)
            s.execute(update(NodeRow).values(registered=start))
            s.execute(update(NodeEvent).where(NodeEvent.time > start).values(time=start))
        store.close()
        day = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(start))
        rep = subprocess.run([str(BIN / "batchd"), "report", "--start", day, "--end", "now"], env=env, cwd=work,
                             capture_output=True, text=True)
        print(f"$ batchd report --start {day} --end now    # {len(rows)} runs of a simulated week")
        print(rep.stdout + rep.stderr, end="")
        html = out / "week.html"
        subprocess.run([str(BIN / "batchd"), "report", "--start", day, "--end", "now", "--html", "-o", str(html)],
                       env=env, cwd=work, check=False)
        print(f"HTML bill: {html}")
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium:
            png = out / "week.png"
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
                            "--window-size=1100,3000", f"file://{html}"], capture_output=True, timeout=120)
            print(f"screenshot: {png}")
        return 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if not a.out:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
