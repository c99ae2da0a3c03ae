"""`sinfo -R` shows who gave a node's reason and when (issue 15: USER and TIMESTAMP were
Unknown), set through Slurm's `scontrol update NodeName=... State=DRAIN Reason=...`; the
layout as Slurm 22.05 printed it on the peer:

    REASON               USER      TIMESTAMP           NODELIST
    fan broken           root      2026-12-04T17:36:20 vm
"""

import re
import time


def test_sinfo_R_names_the_user_and_the_time(cluster):
    t0 = time.time()
    cluster.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fan broken")
    out = cluster.run("sinfo", "-R").stdout.splitlines()
    assert out[0] == "REASON               USER      TIMESTAMP           NODELIST"
    m = re.fullmatch(r"fan broken {11}root {6}(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) node1", out[1])
    assert m, out
    stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    assert t0 - 2 <= stamp <= time.time() + 1
    assert "[root@" in cluster.run("scontrol", "show", "node", "node1").stdout
    cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
    assert cluster.run("sinfo", "-R", "-h").stdout == ""
