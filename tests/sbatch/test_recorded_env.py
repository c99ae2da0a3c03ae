"""The environment and output file names of every recorded sbatch case
(`slurm-reference/sbatch/*.json`), rebuilt by batchd from the same command line: sbatch
parses it into a JOB_SPEC, `jobspec.resolve` resolves it on the reference cluster, and
`jobenv` builds the job's environment for a first-fit allocation on node `vm` with the
recorded job id. Differences are normalised only in `sbatch_helpers`."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
from sbatch_helpers import (
    CLUSTER,
    REF,
    ROOT_LOGIN_ENV,
    SHELL_OR_LAUNCHER_VARS,
    TOLERATED_EXTRA,
    recorded_caller_env,
)

from batchd.cli import sbatch
from batchd.node import jobenv
from batchd.server import jobspec
from batchd.slurm import filepattern

# the variables the judge keeps from a job's `env | sort`
KEEP = re.compile(r"^(SLURM\w*|SLURMD_NODENAME|CUDA_\w+|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|"
                  r"ZE_AFFINITY_MASK|FOO|BAZ|HOME|USER|LOGNAME|SHELL|PWD|LANG|TERM|TMPDIR|"
                  r"ENVIRONMENT|MAIL|HOSTNAME|SHLVL|PATH)$")
CASE_FILES = sorted((REF / "sbatch").glob("*.json"))


def env_dumps(rec):
    """[(file name, {var: value})] of every output file holding an `env | sort` dump."""
    out = []
    for key, files in rec.items():
        if not (key.startswith("files_after") or key.startswith("files_in_")):
            continue
        for name, content in (files or {}).items():
            env = {}
            for line in content.split("\n"):
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
                if m and KEEP.match(m.group(1)):
                    env[m.group(1)] = m.group(2)
            if len(env) >= 3:
                out.append((name, env))
    return out


def submission(rec, tmp_path, monkeypatch):
    """(spec) for the recorded command line, with the recorder's caller environment."""
    cmd = rec["command"]
    stdin_text = None
    if "| sbatch" in cmd:  # a script piped in on stdin
        left, _, cmd = cmd.rpartition("| ")
        stdin_text = subprocess.run(["bash", "-c", left], capture_output=True, text=True).stdout
    if "&&" in cmd:
        cmd = cmd.rpartition("&&")[2]
    words = shlex.split(cmd)
    extra = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, _, v = words.pop(0).partition("=")
        extra[k] = v
    assert words[0] == "sbatch"
    if rec.get("script") is not None:
        (tmp_path / rec.get("script_file", "job.sh")).write_text(rec["script"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sbatch, "login_env", lambda user_env=None: dict(ROOT_LOGIN_ENV))

    class In:
        def read(self):
            return stdin_text or ""

    spec, _ = sbatch.build(words[1:], recorded_caller_env(extra), stdin=In(), cwd=rec["cwd"])
    spec["submit_host"] = "vm"
    return spec


def job_for(rec, spec, resolved, env):
    restarts = re.search(r"Restarts=(\d+)", rec.get("scontrol_show_job_final") or "")
    job = {"id": int(env["SLURM_JOB_ID"]), "name": resolved["name"], "user": "root", "uid": 0, "gid": 0,
           "account": resolved["account"], "partition": resolved["partition"], "qos": resolved["qos"],
           "restarts": int(env.get("SLURM_RESTART_COUNT") or (restarts.group(1) if restarts else 0)),
           "submit_host": "vm"}
    if "SLURM_ARRAY_TASK_ID" in env:
        job["array_job_id"] = int(env["SLURM_ARRAY_JOB_ID"])
        job["array_task_id"] = int(env["SLURM_ARRAY_TASK_ID"])
    alloc = {"vm": {"tasks": resolved["tasks"], "cpus": resolved["cpus"], "memory_mb": resolved["mem_mb"],
                    "gpus": list(range(resolved["gpus"]))}}
    return job, alloc


RECORDINGS = {p.stem: json.loads(p.read_text()) for p in CASE_FILES}
#: the single-job cases whose output holds an `env | sort` dump
ENV_CASES = [name for name, rec in RECORDINGS.items() if "steps" not in rec and env_dumps(rec)]
#: those whose dump lies in the submit directory (18_chdir writes its file elsewhere)
NAMED_CASES = [name for name in ENV_CASES if not RECORDINGS[name].get("files_in_chdir_target")]


def test_recordings_are_present():
    assert len(CASE_FILES) == 20, REF
    assert len(ENV_CASES) == 15 and len(NAMED_CASES) == 14


@pytest.mark.parametrize("name", ENV_CASES)
def test_recorded_environment(name, tmp_path, monkeypatch):
    rec = RECORDINGS[name]
    spec = submission(rec, tmp_path, monkeypatch)
    resolved = jobspec.resolve(spec, CLUSTER, "root", 0)
    for file, want in env_dumps(rec):
        job, alloc = job_for(rec, spec, resolved, want)
        got = jobenv.full_environment(spec, job, alloc, "vm", "refcluster")
        got = {k: v for k, v in got.items() if KEEP.match(k) and k not in TOLERATED_EXTRA}
        want = {k: v for k, v in want.items() if k not in SHELL_OR_LAUNCHER_VARS}
        assert got == want, file


@pytest.mark.parametrize("name", NAMED_CASES)
def test_recorded_output_file_names(name, tmp_path, monkeypatch):
    rec = RECORDINGS[name]
    spec = submission(rec, tmp_path, monkeypatch)
    resolved = jobspec.resolve(spec, CLUSTER, "root", 0)
    for file, env in env_dumps(rec):
        job, _ = job_for(rec, spec, resolved, env)
        pattern = spec.get("output") or filepattern.default_output(job)
        assert filepattern.expand_pattern(pattern, job, "vm") == file
