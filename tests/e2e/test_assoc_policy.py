"""Team policy per account with a real dev daemon (issue 15.2): the example accounts file keeps
the `inference` QOS to serving (others get Slurm's 'Invalid qos specification'; serving's jobs
get it by default), MaxSubmitJobs refuses with Slurm's two lines, MaxJobs holds a second job
AssocMaxJobsLimit, and a used-up GPU-hour budget holds new GPU jobs AssocGrpGRESMinutes."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

POLICY = """
[[account]]
name = "lab"
users = ["root"]
[account.policy]
max_submit_jobs = 2
max_jobs = 1

[[account]]
name = "tight"
users = ["root"]
[account.policy]
grp_tres_mins = { "gres/gpu" = 0.02 }

[[account]]
name = "big"
users = ["root"]
[account.policy]
grp_tres_mins = { "gres/gpu" = 120000 }
"""


def test_inference_qos_is_servings_only(cluster):
    cluster.run("batchd", "apply", str(ROOT / "examples" / "accounts-16gpu.toml"))
    bad = cluster.run("sbatch", "-A", "training", "--qos=inference", "--hold", "--wrap", "true", check=False)
    assert bad.returncode == 1
    assert bad.stderr == "sbatch: error: Batch job submission failed: Invalid qos specification\n"
    jid = cluster.submit("-A", "serving", "--hold", "--wrap", "true")
    assert cluster.job(jid)["qos"] == "inference"  # serving's default QOS
    other = cluster.submit("-A", "training", "--hold", "--wrap", "true")
    upd = cluster.run("scontrol", "update", f"JobId={other}", "QOS=inference", check=False)
    assert upd.returncode == 1 and "Invalid qos specification" in upd.stderr
    assert cluster.job(other)["qos"] == "normal"


@pytest.mark.config_extra("[scheduler]\nbudget_recount_s = 0\n")
def test_submit_limit_job_limit_and_budget(cluster, tmp_path):
    f = tmp_path / "acc.toml"
    f.write_text(POLICY)
    cluster.run("batchd", "apply", str(f))
    a = cluster.submit("-A", "lab", "--wrap", "sleep 5")
    b = cluster.submit("-A", "lab", "--wrap", "sleep 5")
    third = cluster.run("sbatch", "-A", "lab", "--wrap", "true", check=False)
    # Slurm 22.05's answer (recorded from the peer with MaxSubmitJobs=2)
    assert third.returncode == 1 and third.stderr == (
        "sbatch: error: AssocMaxSubmitJobLimit\n"
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)\n")
    cluster.wait(a, ("RUNNING",))
    assert cluster.wait(b, ("PENDING",))["reason"] in ("AssocMaxJobsLimit", "None")
    import time
    deadline = time.time() + 10
    while cluster.job(b)["reason"] != "AssocMaxJobsLimit" and time.time() < deadline:
        time.sleep(0.1)
    assert cluster.job(b)["reason"] == "AssocMaxJobsLimit"
    # the budget: 0.02 GPU-minutes = 1.2 GPU-seconds; a 2-second 1-GPU job uses it up
    t1 = cluster.submit("-A", "tight", "--gres=gpu:1", "--wrap", "sleep 2")
    cluster.wait(t1, ("COMPLETED",))
    t2 = cluster.submit("-A", "tight", "--gres=gpu:1", "--wrap", "true")
    deadline = time.time() + 10
    while cluster.job(t2)["reason"] != "AssocGrpGRESMinutes" and time.time() < deadline:
        time.sleep(0.1)
    j = cluster.job(t2)
    assert (j["state"], j["reason"]) == ("PENDING", "AssocGrpGRESMinutes")
    why = cluster.run("batchd", "why", str(t2)).stdout
    assert "AssocGrpGRESMinutes" in why and "budget gres/gpu" in why and "(used up)" in why, why
    # batchd report says so: the budget's use in its period, in JSON and in the table's footer
    import json
    rep = json.loads(cluster.run("batchd", "report", "--json").stdout)
    tight = [b for b in rep["budgets"] if b["account"] == "tight"]
    assert len(tight) == 1 and tight[0]["exhausted"] and tight[0]["tres"] == "gres/gpu", rep["budgets"]
    assert tight[0]["used_minutes"] >= 0.02 and tight[0]["period"] == "month"
    table = cluster.run("batchd", "report").stdout
    assert "Budget tight gres/gpu:" in table and "used up" in table, table
    assert "Budget big gres/gpu: 0.0 of 2,000.0 GPU-hours used this month (0.0%)" in table, table
    # sshare's GrpTRESMins column shows an account's budget (Slurm's layout)
    out = cluster.run("sshare", "-A", "big", "-l", "-P", "-o", "Account,User,GrpTRESMins").stdout.splitlines()
    assert out[0] == "Account|User|GrpTRESMins" and out[1] == "big||gres/gpu=120000", out


def test_batchd_account_sets_a_policy(cluster):
    # the third way to set a policy (beside the accounts file and sacctmgr): batchd account
    cluster.run("batchd", "account", "add", "teamx", "--policy", "max_jobs=1", "--policy", 'qos=["normal"]',
                "--policy", 'grp_tres_mins={"gres/gpu": 600}')
    import json
    doc = json.loads(cluster.run("batchd", "account", "show", "teamx").stdout)
    assert doc["account"][0]["policy"] == {"max_jobs": 1, "qos": ["normal"], "grp_tres_mins": {"gres/gpu": 600}}
    cluster.run("batchd", "account", "modify", "teamx", "--policy", "max_jobs=-1")
    doc = json.loads(cluster.run("batchd", "account", "show", "teamx").stdout)
    assert doc["account"][0]["policy"] == {"qos": ["normal"], "grp_tres_mins": {"gres/gpu": 600}}
    bad = cluster.run("batchd", "account", "modify", "teamx", "--policy", "max_jobz=1", check=False)
    assert bad.returncode != 0 and "max_jobz" in bad.stderr
    # the preemption keys of issue 16 (docs/preemption.md) take the same way
    cluster.run("batchd", "account", "modify", "teamx", "--policy", "borrow_within_cohort=lower_priority:100",
                "--policy", "min_runtime_reclaim_s=30:00", "--policy", "within_account=never")
    doc = json.loads(cluster.run("batchd", "account", "show", "teamx").stdout)
    assert doc["account"][0]["policy"]["borrow_within_cohort"] == {"policy": "lower_priority",
                                                                   "max_priority_threshold": 100}
    assert doc["account"][0]["policy"]["min_runtime_reclaim_s"] == 1800
    bad = cluster.run("batchd", "account", "modify", "teamx", "--policy", "within_account=always", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith(
        "batchd: error: account teamx.policy.within_account: must be one of never, lower_priority, "
        "lower_or_newer_equal_priority"), bad.stderr
