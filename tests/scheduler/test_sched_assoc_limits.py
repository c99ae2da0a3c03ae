"""Association limits in the cycle (issue 15, batchd/scheduler/assoclimits.py): MaxJobs,
MaxTRES per job, each user's GrpTRES, a GrpTRESMins budget and GrpTRESRunMins, with the pending
reasons a real Slurm 22.05 gave for them (../shared/slurm-peer, recorded 2026-12-04:
`sacctmgr modify user root where account=serving set maxjobs=1` -> the second job pends
`AssocMaxJobsLimit`; `... account=training set maxtres=gres/gpu=1` -> `--gres=gpu:2` pends
`AssocMaxGRESPerJob`).

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares) on one node of
8 GPUs: `accounts` (with `policy`), `users` (with `policy`), `jobs` in; `want_started`,
`want_reasons`.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot


def acct(name="a", **policy):
    a = account(name, quota=-1)
    if policy:
        a["policy"] = policy
    return a


def usr(jid, user, acct_="a", **kw):
    d = job(jid, acct_, **kw)
    d["user"] = user
    return d


def case(**kw) -> Scenario:
    return Scenario(nodes=[node("n0", 8)], **kw)


CASES = [
    case(id="max-jobs-per-user", accounts=[acct(max_jobs=1)],
         jobs=[usr("b1", "bob"), usr("b2", "bob"), usr("c1", "carol")],
         want_started={"b1", "c1"}, want_reasons={"b2": "AssocMaxJobsLimit"}),
    case(id="max-jobs-counts-running", accounts=[acct(max_jobs=2)],
         jobs=[usr("r", "bob", running_on={"n0": [0]}), usr("b1", "bob"), usr("b2", "bob")],
         want_started={"b1"}, want_reasons={"b2": "AssocMaxJobsLimit"}),
    case(id="user-policy-overrides-account", accounts=[acct(max_jobs=1)],
         users=[{"name": "bob", "account": "a", "policy": {"max_jobs": 3}}],
         jobs=[usr("b1", "bob"), usr("b2", "bob"), usr("c1", "carol"), usr("c2", "carol")],
         want_started={"b1", "b2", "c1"}, want_reasons={"c2": "AssocMaxJobsLimit"}),
    case(id="max-tres-per-job", accounts=[acct(max_tres_per_job={"gres/gpu": 1, "cpu": 4})],
         jobs=[usr("g2", "bob", gpus=2), usr("g1", "bob", gpus=1),
               usr("c8", "bob", gpus=0, per_task={"cpu": 8, "mem": 1})],
         want_started={"g1"}, want_reasons={"g2": "AssocMaxGRESPerJob", "c8": "AssocMaxCpuPerJobLimit"}),
    case(id="inherited-from-parent", accounts=[acct("p", max_tres_per_job={"gres/gpu": 1}),
                                               dict(account("a", quota=-1), parent="p")],
         jobs=[usr("g2", "bob", gpus=2)], want_started=set(), want_reasons={"g2": "AssocMaxGRESPerJob"}),
    case(id="max-tres-per-user", accounts=[acct(max_tres_per_user={"gres/gpu": 3})],
         jobs=[usr("b1", "bob", gpus=2), usr("b2", "bob", gpus=2), usr("b3", "bob", gpus=1),
               usr("c1", "carol", gpus=2)],
         want_started={"b1", "b3", "c1"}, want_reasons={"b2": "AssocGrpGRES"}),
    case(id="budget-used-up", accounts=[dict(acct(grp_tres_mins={"gres/gpu": 600}), budget_used={"gres/gpu": 600})],
         jobs=[usr("b1", "bob"), usr("c", "carol", gpus=0, per_task={"cpu": 1, "mem": 1})],
         want_started=set(), want_reasons={"b1": "AssocGrpGRESMinutes", "c": "AssocGrpGRESMinutes"}),
    case(id="budget-left", accounts=[dict(acct(grp_tres_mins={"gres/gpu": 600}), budget_used={"gres/gpu": 599})],
         jobs=[usr("b1", "bob")], want_started={"b1"}, want_reasons={}),
    case(id="parent-budget-holds-children", accounts=[dict(acct("p", grp_tres_mins={"gres/gpu": 60}),
                                                           budget_used={"gres/gpu": 61}),
                                                      dict(account("a", quota=-1), parent="p")],
         jobs=[usr("b1", "bob")], want_started=set(), want_reasons={"b1": "AssocGrpGRESMinutes"}),
    # GrpTRESRunMins: 2 GPUs x 60 min left = 120 of 200; a 1-GPU 60-min job fits (180), a second
    # does not (240), nor one without a time limit (unbounded)
    case(id="run-mins", accounts=[acct(grp_tres_run_mins={"gres/gpu": 200})],
         jobs=[usr("r", "bob", gpus=2, running_on={"n0": [0, 1]}, time_limit_s=3700, start_time=2_000_000 - 100),
               usr("b1", "bob", time_limit_s=3600), usr("b2", "bob", time_limit_s=3600),
               usr("u", "bob", time_limit_s=None)],
         want_started={"b1"}, want_reasons={"b2": "AssocGrpGRESRunMinutes", "u": "AssocGrpGRESRunMinutes"}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_assoc_limits(case):
    case.verify()


def test_one_users_limit_does_not_hold_another_users_job_of_the_same_shape():
    # failure signatures are per user where per-user limits apply
    jobs = [usr(f"b{i}", "bob") for i in range(3)] + [usr(f"c{i}", "carol") for i in range(3)]
    out = run(snapshot([node("n0", 8)], [acct(max_jobs=1)], jobs))
    assert out.started == {"b0", "c0"}
