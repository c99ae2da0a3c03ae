"""The slurmrestd replies (batchd.server.slurmrest) built from an in-process world: each
one valid against Slurm's published OpenAPI document, and its items carrying the keys the
recorded slurmrestd 22.05.8 sends (tests/fixtures/slurmrestd/real-*.json), but for those
named here, which batchd leaves out where Slurm sends null."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from endpoint_cases import ADMIN, OWNER, make_world

from batchd.server.slurmrest import SlurmRest, submission_spec
from tests import openapi_check as oc

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurmrestd"
API, DB = "/slurm/v0.0.38", "/slurmdb/v0.0.38"

#: keys Slurm sends as null (so not valid against its own document) that batchd leaves
#: out when the value is unset
NULLABLE_JOB_KEYS = {"core_spec", "thread_spec", "cores_per_socket", "billable_tres", "cpus_per_task",
                     "cpu_frequency_minimum", "cpu_frequency_maximum", "cpu_frequency_governor",
                     "memory_per_cpu", "memory_per_node", "max_cpus", "max_nodes", "minimum_cpus_per_node",
                     "minimum_tmp_disk_per_node", "sockets_per_board", "sockets_per_node", "tasks_per_board",
                     "tasks_per_core", "tasks_per_node", "tasks_per_socket", "threads_per_core", "time_minimum",
                     "array_task_id", "shared", "prefer", "job_resources", "time_limit",
                     "association_id"}  # batchd numbers no associations


def _real(name: str) -> dict:
    return json.loads((FIX / f"real-{name}.json").read_text())


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    yield w
    w.close()


def _get(rest: SlurmRest, handler, caller=ADMIN, query=None, **kw) -> dict:
    reply = handler(caller, query or {}, b"", **kw)
    assert reply.status == 200, reply.body
    return json.loads(reply.body)


def test_every_reply_is_valid_against_the_document(world):
    r = SlurmRest(world.svc)
    cases = [(r.ping, f"{API}/ping", {}), (r.diag, f"{API}/diag", {}), (r.jobs, f"{API}/jobs", {}),
             (r.job, f"{API}/job/{{job_id}}", {"ident": str(world.jobs["running"])}),
             (r.nodes, f"{API}/nodes", {}), (r.partitions, f"{API}/partitions", {}),
             (r.accounts, f"{DB}/accounts", {}), (r.associations, f"{DB}/associations", {}),
             (r.db_jobs, f"{DB}/jobs", {}), (r.db_jobs, f"{DB}/job/{{job_id}}", {"ident": str(world.jobs["ended"])})]
    for handler, path, kw in cases:
        reply = _get(r, handler, **kw)
        assert oc.errors(reply, oc.response_schema(path, "get")) == [], path
        assert reply["meta"]["plugin"]["type"] == "openapi/v0.0.38"


def test_job_items_carry_the_keys_slurmrestd_sends(world):
    r = SlurmRest(world.svc)
    real = set(_real("jobs")["jobs"][0])
    ours = _get(r, r.jobs)["jobs"]
    assert len(ours) >= 4
    for j in ours:
        assert real - set(j) <= NULLABLE_JOB_KEYS, sorted(real - set(j))
        assert set(j) - real <= {"job_resources"}, sorted(set(j) - real)
    running = next(j for j in ours if j["job_id"] == world.jobs["running"])
    assert running["job_state"] == "RUNNING" and running["job_resources"]["nodes"]


@pytest.mark.parametrize("name, handler, key", [("nodes", "nodes", "nodes"), ("partitions", "partitions", "partitions"),
                                                ("db-accounts", "accounts", "accounts"), ("db-jobs", "db_jobs", "jobs"),
                                                ("db-associations", "associations", "associations")])
def test_other_items_carry_the_keys_slurmrestd_sends(world, name, handler, key):
    r = SlurmRest(world.svc)
    real = set(_real(name)[key][0])
    ours = _get(r, getattr(r, handler))[key]
    assert ours
    optional = {"free_memory", "cpu_load", "reason_set_by_user", "owner", "default_time_limit",
                "default_memory_per_cpu", "default_memory_per_node", "maximum_memory_per_cpu",
                "maximum_memory_per_node", "over_time_limit", "min nodes per job", "container", "comment",
                "usage", "parent_account", "partition", "user", "priority", "is_default",
                "tres_weighted",  # no TRES weights per node in batchd
                "qos"}  # Slurm sends an association's QOS list as "qos"; the document names it "QOS"
    for item in ours:
        assert real - set(item) <= optional, sorted(real - set(item))


def test_errors_are_slurmrestds_shape(world):
    from batchd.server.slurmrest import RestError, error_reply

    r = SlurmRest(world.svc)
    with pytest.raises(RestError) as e:
        r.jobs(ADMIN, {}, b"", ident="999999")
    reply = error_reply(e.value, jobs=[])
    assert reply.status == 500
    body = json.loads(reply.body)
    real = _real("job_999")
    assert set(body) == set(real) and set(body["errors"][0]) == set(real["errors"][0])
    assert body["errors"][0]["error_number"] == real["errors"][0]["error_number"] == 2017


def test_a_submission_reads_the_options_as_sbatch_does(world, tmp_path):
    from batchd.cli import sbatch_opts

    props = {"environment": {"A": "1"}, "time_limit": 90, "gres": "gpu:h200:2", "memory_per_gpu": 4096,
             "cpus_per_gpu": "4", "nodes": [1, 2], "signal": "B:USR1@30", "nice": 5, "requeue": False,
             "current_working_directory": str(tmp_path), "array": "0-3%2", "dependency": "afterok:1"}
    spec = submission_spec({"script": "#!/bin/sh\n", "job": props}, OWNER, world.svc.cfg)
    want = sbatch_opts.build_spec({"time": "90", "gres": "gpu:h200:2", "mem_per_gpu": "4096", "cpus_per_gpu": "4",
                                   "nodes": "1-2", "signal": "B:USR1@30", "nice": "5", "array": "0-3%2",
                                   "dependency": "afterok:1"})
    want["requeue"] = False
    assert {k: spec[k] for k in want} == want
    assert spec["environment"] == {"A": "1"} and spec["workdir"] == str(tmp_path)
