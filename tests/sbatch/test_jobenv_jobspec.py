"""jobenv (filename patterns, multi-node, MIG, arrays) and jobspec.resolve semantics
beyond the recorded cases."""

from __future__ import annotations

import copy

import pytest
from sbatch_helpers import CLUSTER

from batchd.errors import SubmitError
from batchd.node import jobenv
from batchd.server import jobspec
from batchd.slurm import filepattern

JOB = {"id": 128, "name": "train", "user": "alice", "uid": 1001, "gid": 100, "account": "a",
       "partition": "gpu", "qos": "normal", "restarts": 2}
ARRAY_TASK = dict(JOB, id=131, array_job_id=128, array_task_id=7)


@pytest.mark.parametrize("pattern, job, want", [
    ("slurm-%j.out", JOB, "slurm-128.out"),
    ("job%4j.out", JOB, "job0128.out"),
    ("%x-%u-%N-%n-%t-%s.log", JOB, "train-alice-gpu1-0-0-batch.log"),
    ("%J", JOB, "128"),
    ("100%%-%r", JOB, "100%-2"),
    ("slurm-%A_%a.out", ARRAY_TASK, "slurm-128_7.out"),
    ("t%3a-%b-%j", ARRAY_TASK, "t007-7-131"),
    ("x%12j", JOB, "x0000000128"),
    ("keep%y%", JOB, "keep%y%"),
    ("lit\\%j", JOB, "lit%j"),
    ("%A_%a", JOB, "128_4294967294"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_expand_pattern(pattern, job, want):
    assert filepattern.expand_pattern(pattern, job, "gpu1.cluster") == want


def test_default_output():
    assert filepattern.default_output(JOB) == "slurm-%j.out"
    assert filepattern.default_output(ARRAY_TASK) == "slurm-%A_%a.out"


def test_hostlist_and_counts():
    assert jobenv.compress_hostlist(["gpu1", "gpu2", "gpu3", "gpu5", "login"]) == "gpu[1-3,5],login"
    assert jobenv.compress_hostlist(["n01", "n02"]) == "n[01-02]"
    assert jobenv.compress_hostlist(["vm"]) == "vm"
    assert jobenv.compress_counts([2, 2, 2, 1]) == "2(x3),1"


def test_multi_node_environment():
    spec = {"name": "g", "submit_dir": "/s", "ntasks_per_node": 4, "nodes_min": 2,
            "gres": [{"name": "gpu", "type": None, "count": 4}]}
    alloc = {"node1": {"tasks": 4, "cpus": 8, "gpus": [0, 1, 2, 3]},
             "node2": {"tasks": 4, "cpus": 8, "gpus": [4, 5, 6, 7]}, "gpu_type": "rtxpro6000"}
    env = jobenv.job_environment(spec, JOB, alloc, "node1", "c")
    assert env["SLURM_JOB_NODELIST"] == "node[1-2]" and env["SLURM_NNODES"] == "2"
    assert env["SLURM_TASKS_PER_NODE"] == "4(x2)" and env["SLURM_JOB_CPUS_PER_NODE"] == "8(x2)"
    assert env["SLURM_NTASKS"] == "8" and env["SLURM_NTASKS_PER_NODE"] == "4"
    assert env["SLURM_JOB_GPUS"] == "0,1,2,3" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["SLURM_RESTART_COUNT"] == "2" and env["SLURM_NODEID"] == "0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "SLURM_CPUS_PER_TASK" not in env and env["SLURM_MEM_PER_CPU"] == "1024"


def test_mig_and_uuid_devices():
    spec = {"name": "m", "submit_dir": "/s", "gres": [{"name": "gpu", "type": "1g.24gb", "count": 2}]}
    alloc = {"n": {"tasks": 1, "cpus": 1, "gpus": ["0:MIG-aaaa", "0:MIG-bbbb"]}}
    env = jobenv.job_environment(spec, JOB, alloc, "n", "c")
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-aaaa,MIG-bbbb" and env["SLURM_JOB_GPUS"] == "0,0"
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    alloc = {"n": {"tasks": 1, "cpus": 1, "gpus": [2, 3], "gpu_uuids": ["GPU-2", "GPU-3"]}}
    env = jobenv.job_environment(spec, dict(JOB, gpu_env="uuid"), alloc, "n", "c")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-2,GPU-3" and env["SLURM_JOB_GPUS"] == "2,3"


def test_array_variables_from_spec():
    spec = {"name": "a", "submit_dir": "/s", "array": "0-15:4%2"}
    env = jobenv.job_environment(spec, ARRAY_TASK, {"n": {"tasks": 1, "cpus": 1}}, "n", "c")
    assert (env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]) == ("128", "7")
    assert (env["SLURM_ARRAY_TASK_MIN"], env["SLURM_ARRAY_TASK_MAX"]) == ("0", "12")
    assert (env["SLURM_ARRAY_TASK_STEP"], env["SLURM_ARRAY_TASK_COUNT"]) == ("4", "4")


def test_no_gpu_vars_without_gpus_and_memory_vars():
    env = jobenv.job_environment({"submit_dir": "/s", "mem_per_gpu_mb": 8192, "gpus": {"type": None, "count": 1},
                                  "cpus_per_gpu": 4},
                                 JOB, {"n": {"tasks": 1, "cpus": 4, "gpus": [1]}}, "n", "c")
    assert env["SLURM_MEM_PER_GPU"] == "8192" and "SLURM_MEM_PER_CPU" not in env
    assert env["SLURM_GPUS"] == "1" and env["SLURM_CPUS_PER_GPU"] == "4"
    env = jobenv.job_environment({"submit_dir": "/s"}, JOB, {"n": {"tasks": 1, "cpus": 1}}, "n", "c")
    assert not any(k in env for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"))


def base_spec(**kw):
    s = {"name": "t", "gres": []}
    s.update(kw)
    return s


def mig_cluster():
    c = copy.deepcopy(CLUSTER)
    c["nodes"] = [{"name": "m", "cpus": 64, "memory_mb": 512000, "state": "IDLE", "partitions": ["gpu"],
                   "gpus": [{"index": 0, "uuid": "GPU-0", "type": "h200",
                             "mig": [{"profile": "1g.24gb", "uuid": f"MIG-{i}"} for i in range(4)]},
                            {"index": 1, "uuid": "GPU-1", "type": "h200", "mig": []}]}]
    c["partitions"] = [{"name": "gpu", "default": True, "nodes": ["m"], "max_time_s": -1, "default_time_s": None}]
    return c


def test_mig_profile_request():
    r = jobspec.resolve(base_spec(gres=[{"name": "gpu", "type": "1g.24gb", "count": 3}]), mig_cluster(), "u", 1)
    assert r["per_task"]["gres/gpu:1g.24gb"] == 3 and r["gpu_type"] == "1g.24gb"
    assert "gres/gpu:1g.24gb=3" in r["tres_req"]
    with pytest.raises(SubmitError, match="Requested node configuration is not available"):
        jobspec.resolve(base_spec(gres=[{"name": "gpu", "type": "1g.24gb", "count": 5}]), mig_cluster(), "u", 1)
    with pytest.raises(SubmitError, match="Requested node configuration is not available"):
        jobspec.resolve(base_spec(gres=[{"name": "gpu", "type": "h200", "count": 2}]), mig_cluster(), "u", 1)


@pytest.mark.parametrize("kw, per_task, tasks, cpus, mem", [
    ({}, {"cpu": 1, "mem": 1024}, 1, 1, 1024),
    ({"ntasks": 4, "cpus_per_task": 2}, {"cpu": 2, "mem": 2048}, 4, 8, 8192),
    ({"gpus": {"type": None, "count": 2}, "cpus_per_gpu": 3}, {"gres/gpu": 2, "cpu": 6, "mem": 6144}, 1, 6, 6144),
    ({"ntasks": 2, "gpus_per_task": {"type": "h200", "count": 1}, "mem_per_gpu_mb": 4096},
     {"gres/gpu:h200": 1, "cpu": 1, "mem": 4096}, 2, 2, 8192),
    ({"ntasks": 4, "mem_mb": 4000}, {"cpu": 1, "mem": 1000}, 4, 4, 4000),
    ({"mem_mb": 0}, {"cpu": 1, "mem": 23081}, 1, 1, 23081),
    ({"ntasks": 3, "gres": [{"name": "gpu", "type": None, "count": 3}]}, {"gres/gpu": 1, "cpu": 1, "mem": 1024}, 3, 3, 3072),
], ids=["default", "ntasks-c", "cpus-per-gpu", "gpus-per-task-mem-per-gpu", "mem-per-node", "mem0", "gres-per-node"])
def test_resource_semantics(kw, per_task, tasks, cpus, mem):
    r = jobspec.resolve(base_spec(**kw), CLUSTER, "root", 0)
    assert r["per_task"] == per_task and r["tasks"] == tasks and r["cpus"] == cpus and r["mem_mb"] == mem


def test_defaults_and_passthrough():
    r = jobspec.resolve(base_spec(partition="debug", hold=True, nice=5, begin_time=123.0, array="0-3%2",
                                  dependency="afterok:9"), CLUSTER, "root", 0)
    assert (r["partition"], r["account"], r["qos"], r["time_limit_s"]) == ("debug", "training", "normal", 600)
    assert (r["hold"], r["nice"], r["begin_time"], r["requeue"]) == (True, 5, 123.0, True)
    assert r["array_task_ids"] == [0, 1, 2, 3] and r["array_max_running"] == 2
    assert r["dependency"]["items"][0]["job_id"] == 9
    # over the partition's MaxTime: accepted, the scheduler keeps it pending (EnforcePartLimits=NO)
    assert jobspec.resolve(base_spec(partition="debug", time_limit_s=7200), CLUSTER, "root", 0)["time_limit_s"] == 7200


def test_account_must_be_users():
    c = dict(CLUSTER, user_accounts=["training"])
    with pytest.raises(SubmitError) as e:
        jobspec.resolve(base_spec(account="serving"), c, "bob", 1002)
    assert e.value.message == "Invalid account or account/partition combination specified" and e.value.exit_code == 1


def test_unknown_dependency_job_refused_when_lookup_given():
    with pytest.raises(SubmitError, match="^Job dependency problem$"):
        jobspec.resolve(base_spec(dependency="afterok:12345"), CLUSTER, "root", 0, lookup_state=lambda j, t: None)


def test_shards():
    c = dict(CLUSTER, shard_per_gpu=16)
    r = jobspec.resolve(base_spec(gres=[{"name": "shard", "type": None, "count": 8}]), c, "root", 0)
    assert r["per_task"]["gres/shard"] == 8 and "gres/shard=8" in r["tres_req"]
    with pytest.raises(SubmitError):
        jobspec.resolve(base_spec(gres=[{"name": "shard", "type": None, "count": 32}]), c, "root", 0)


def test_time_min_over_limit_and_qos_wall():
    with pytest.raises(SubmitError, match="Requested time limit is invalid"):
        jobspec.resolve(base_spec(time_limit_s=600, time_min_s=1200), CLUSTER, "root", 0)
    c = dict(CLUSTER, qos={"normal": {"max_wall_s": 3600}})
    with pytest.raises(SubmitError, match="Requested time limit is invalid"):
        jobspec.resolve(base_spec(time_limit_s=7200), c, "root", 0)
    # within MaxWall: kept; no -t at all: the QOS's MaxWall is the job's limit
    assert jobspec.resolve(base_spec(time_limit_s=1800), c, "root", 0)["time_limit_s"] == 1800
    assert jobspec.resolve(base_spec(), c, "root", 0)["time_limit_s"] == 3600


def test_output_none_is_dev_null():
    assert filepattern.expand_pattern("none", JOB, "n") == "/dev/null"


def test_negative_nice_needs_operator():
    with pytest.raises(SubmitError, match="^Invalid nice value$"):
        jobspec.resolve(base_spec(nice=-5), CLUSTER, "bob", 1002)
    assert jobspec.resolve(base_spec(nice=-5), CLUSTER, "root", 0)["nice"] == -5


@pytest.mark.parametrize("card_key", [{"shard_gpus": [2]}, {"shard_gpu": 2}], ids=["shard_gpus", "older_shard_gpu"])
def test_shard_job_sees_its_card(card_key):
    alloc = {"n": {"tasks": 1, "cpus": 1, "gpus": [], "shards": 3, **card_key}}
    env = jobenv.job_environment({"submit_dir": "/s"}, JOB, alloc, "n", "c")
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["SLURM_SHARDS_ON_NODE"] == "3"


@pytest.mark.parametrize("bad", [0, -5, "60", 1.5, True])
def test_time_limit_is_positive_unlimited_or_the_partitions(bad):
    """A given time limit (or time min) is > 0 or -1 (UNLIMITED); None takes the partition's."""
    for key in ("time_limit_s", "time_min_s"):
        with pytest.raises(SubmitError, match="Requested time limit is invalid"):
            jobspec.resolve(base_spec(**{key: bad}), CLUSTER, "root", 0)
    assert jobspec.resolve(base_spec(time_limit_s=-1), CLUSTER, "root", 0)["time_limit_s"] == -1
    assert jobspec.resolve(base_spec(partition="debug", time_limit_s=None), CLUSTER, "root", 0)["time_limit_s"] == 600


def test_pattern_width_reads_ascii_digits_only():
    """`%²j` / `%٣j`: not a width (Slurm's pattern code knows ASCII digits only), the literal text."""
    job = {"id": 42}
    assert filepattern.expand_pattern("x-%²j.out", job, "n1") == "x-%²j.out"
    assert filepattern.expand_pattern("x-%٣j.out", job, "n1") == "x-%٣j.out"
    assert filepattern.expand_pattern("x-%4j-%99999999999999999999j.out", job, "n1") == "x-0042-0000000042.out"
