"""CPU ids end to end: the scheduler gives each job concrete CPU ids per node, stored in its
allocation and shown by `scontrol -d show job` as `CPU_IDs=`."""

import re


def _cpu_ids(cluster, jid: int) -> str:
    out = cluster.run("scontrol", "-d", "show", "job", str(jid)).stdout
    m = re.search(r"Nodes=(\S+) CPU_IDs=(\S*) ", out)
    assert m, out
    return f"{m.group(1)}:{m.group(2)}"


def test_running_jobs_get_disjoint_cpu_ids(cluster):
    a = cluster.submit("-w", "node1", "-c", "2", "--wrap", "sleep 5")
    cluster.wait(a, ("RUNNING",))
    b = cluster.submit("-w", "node1", "-c", "3", "--wrap", "sleep 5")
    cluster.wait(b, ("RUNNING",))
    assert _cpu_ids(cluster, a) == "node1:0-1"
    assert _cpu_ids(cluster, b) == "node1:2-4"
    cluster.run("scancel", str(a), str(b))
