"""MIG instances and shards through a real dev daemon (issue 14, point 7): a node with an RTX PRO
6000 split into four 1g.24gb instances and an H200 split 3g+3g+1g, and a node of two whole
H200s with 4 shards each. One job of each kind runs; `sacct` shows each one's AllocTRES and
billing by the GPU model (its card share, weighted by its card type), and `batchd report`
gives each one's GPU-hours and cost as its share of its card's price, with capacity = the
jobs' GPU-hours + idle."""

import json
import time

import pytest
from conftest import own_cluster

CONFIG = """
cluster_name = "gresbill"
shard_per_gpu = 4
[scheduler]
interval_s = 1
[accounting]
tres_billing_weights = "CPU=0,GRES/gpu=1.0,GRES/gpu:h200=8.0,GRES/gpu:rtxpro6000=4.0"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[node]]
name = "mig01"
cpus = 8
memory_mb = 32000
gpus = [
  { index = 0, uuid = "GPU-r0", type = "rtxpro6000", mig = [
      { profile = "1g.24gb", uuid = "MIG-r0" }, { profile = "1g.24gb", uuid = "MIG-r1" },
      { profile = "1g.24gb", uuid = "MIG-r2" }, { profile = "1g.24gb", uuid = "MIG-r3" } ] },
  { index = 1, uuid = "GPU-h1", type = "h200", mig = [
      { profile = "3g.71gb", uuid = "MIG-h3a" }, { profile = "3g.71gb", uuid = "MIG-h3b" },
      { profile = "1g.18gb", uuid = "MIG-h1" } ] },
]
[[node]]
name = "shard01"
cpus = 8
memory_mb = 32000
gpus = [{ type = "h200", count = 2 }]
"""

# (gres, card share, billing weight of the card type, price of the card per hour)
KINDS = {"1g.24gb": ("gpu:1g.24gb:1", 0.25, 4.0, 3600.0),
         "3g.71gb": ("gpu:3g.71gb:1", 3 / 7, 8.0, 7200.0),
         "shard": ("shard:2", 0.5, 8.0, 7200.0),
         "h200": ("gpu:h200:1", 1.0, 8.0, 7200.0)}


@pytest.fixture
def gres_cluster():
    with own_cluster(CONFIG, "batchd-e2e-gres-") as c:
        yield c


def test_mig_and_shard_jobs_are_billed_their_card_share(gres_cluster):
    c = gres_cluster
    # prices per card-hour high enough that seconds show in cents: 1 or 2 EUR a card-second
    c.run("batchd", "price", "set", "gres/gpu:rtxpro6000", "3600.00", "--currency", "EUR", "--from", "2020-01-01")
    c.run("batchd", "price", "set", "gres/gpu:h200", "7200.00", "--currency", "EUR", "--from", "2020-01-01")
    t0 = int(time.time())
    ids = {kind: c.submit(f"--gres={g}", "-c", "1", "--mem=100M", "--wrap", "sleep 2")
           for kind, (g, *_rest) in KINDS.items()}
    for jid in ids.values():
        c.wait(jid, ("COMPLETED",), timeout=60)

    sacct = c.run("sacct", "-X", "-n", "-P", "-j", ",".join(map(str, ids.values())),
                  "-o", "JobID,NodeList,AllocTRES").stdout
    alloc = {line.split("|")[0]: line.split("|") for line in sacct.splitlines() if line}
    for kind, (_g, share, weight, _price) in KINDS.items():
        _jid, nodes, tres = alloc[str(ids[kind])]
        items = dict(x.split("=", 1) for x in tres.split(","))
        assert items["billing"] == str(int(share * weight)), (kind, tres)
        assert float(items["gres/gpu"]) == pytest.approx(share, abs=1e-4), (kind, tres)
        assert "@" not in tres
        if kind == "shard":
            assert nodes == "shard01" and items["gres/shard"] == "2"
        elif kind != "h200":
            assert nodes == "mig01" and items[f"gres/gpu:{kind}"] == "1"

    rep = json.loads(c.run("batchd", "report", "--start", time.strftime("%Y-%m-%dT%H:00", time.gmtime(t0)),
                           "--end", "now", "--by", "gpu-type", "--json").stdout)
    rows = {r["gpu_type"]: r for r in rep["rows"]}
    runs = {j["id"]: j for j in (c.job(i) for i in ids.values())}
    for kind, (_g, share, _w, price) in KINDS.items():
        j = runs[ids[kind]]
        secs = int(j["end_time"]) - int(j["start_time"])
        row = rows[kind]
        assert row["gpu_hours"] == pytest.approx(share * secs / 3600, abs=1e-5), (kind, row, secs)
        assert float(row["cost"]) == pytest.approx(share * price * secs / 3600, abs=0.011), (kind, row, secs)
    assert rep["reconciled"]
    # capacity (4 cards) = what the jobs used + idle
    used = sum(r["gpu_hours"] for r in rep["rows"])
    assert used + rep["idle_gpu_hours"] == pytest.approx(rep["capacity_gpu_hours"], abs=1e-4)
