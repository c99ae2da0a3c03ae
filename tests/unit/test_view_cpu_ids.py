"""JOB_VIEW `cpu_ids`: {node: Slurm range form} of the allocation's CPU ids; allocations made
before CPU ids existed give no entry."""

from batchd.server.views import cpu_id_ranges


def test_ranges_per_node():
    alloc = {"n1": {"cpus": 5, "cpu_ids": [0, 1, 2, 5, 7]}, "n2": {"cpus": 1, "cpu_ids": [3]}}
    assert cpu_id_ranges(alloc) == {"n1": "0-2,5,7", "n2": "3"}


def test_old_allocation_without_ids():
    assert cpu_id_ranges({"n1": {"cpus": 4, "gpus": [0]}}) == {}
    assert cpu_id_ranges(None) == {}
