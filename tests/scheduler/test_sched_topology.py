"""Topology-aware GPU choice on recorded-style topologies: an 8-GPU NVLink node (two
fully connected quads, cross links i<->i+4, as a DGX-1 hybrid cube mesh) and a 4-GPU
PCIe node with two switches. want_gpus: the devices the job gets on the node."""

import pytest

from .sched_builders import account, job, node, run, snapshot

NVL8 = {i: {j for j in range(8) if j != i and (j // 4 == i // 4 or j == (i + 4) % 8)} for i in range(8)}


def nvlink8_devices():
    devs = []
    for i in range(8):
        devs.append({"index": i, "uuid": f"GPU-{i}", "type": "h100", "mig": [], "numa": i // 4,
                     "links": {"nvlink": [(-1 if j == i else (2 if j in NVL8[i] else 0)) for j in range(8)],
                               "pcie": [(0 if j == i else (10 if j // 2 == i // 2 else (40 if j // 4 == i // 4
                                                                                    else 50))) for j in range(8)]}})
    return devs


def pcie4_devices():
    # GPUs 0,1 under switch A, 2,3 under switch B, both switches on one host bridge
    return [{"index": i, "uuid": f"GPU-{i}", "type": "l40s", "mig": [], "numa": 0,
             "links": {"nvlink": [(-1 if j == i else 0) for j in range(4)],
                       "pcie": [(0 if j == i else (10 if j // 2 == i // 2 else 30)) for j in range(4)]}}
            for i in range(4)]


CASES = [
    # 8-GPU NVLink node, GPU 1 busy: a 4-GPU job takes the intact quad 4-7, all pairs NVLink
    ("nvlink_quad", nvlink8_devices, {"n": [1]}, 4, [4, 5, 6, 7]),
    # GPUs 1 and 5 busy: a 2-GPU job takes an NVLink pair on one PCIe switch (2,3), not 0,2
    ("nvlink_pair_same_switch", nvlink8_devices, {"n": [1, 5]}, 2, [2, 3]),
    # 4-GPU PCIe node, GPU 0 busy: a 2-GPU job takes 2,3 behind one switch, not 1,2
    ("pcie_same_switch", pcie4_devices, {"n": [0]}, 2, [2, 3]),
    # nothing to choose: all free GPUs
    ("pcie_all", pcie4_devices, None, 4, [0, 1, 2, 3]),
]


@pytest.mark.parametrize("name, devices, busy, want, want_gpus", CASES, ids=[c[0] for c in CASES])
def test_best_connected_gpus(name, devices, busy, want, want_gpus):
    jobs = [job("new", "a", gpus=want)]
    if busy:
        jobs.insert(0, job("busy", "a", gpus=len(busy["n"]), running_on=busy))
    out = run(snapshot([node("n", devices=devices())], [account("a", quota=-1)], jobs))
    assert out.started == {"new"}
    (st,) = [s for s in out.decisions["start"] if s["job"] == "new"]
    assert sorted(st["allocation"]["n"]["gpus"]) == want_gpus


def test_without_link_data_lowest_index_first():
    devs = [{"index": i, "uuid": f"GPU-{i}", "type": "h100", "mig": []} for i in range(4)]
    out = run(snapshot([node("n", devices=devs)], [account("a", quota=-1)],
                       [job("busy", "a", gpus=1, running_on={"n": [0]}), job("new", "a", gpus=2)]))
    (st,) = [s for s in out.decisions["start"] if s["job"] == "new"]
    assert st["allocation"]["n"]["gpus"] == [1, 2]
