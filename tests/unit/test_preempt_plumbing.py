"""Issue 16's plumbing around the scheduler: the controller's snapshot carries each QOS's
min_runtime_* and each account's preemption keys to `decide`, and the controller logs the
policy of every preemption it applies."""

from __future__ import annotations

from pathlib import Path

from batchd.config import parse_config
from batchd.control.controller import Controller
from batchd.model import Node
from batchd.server.accounts import parse_accounts
from batchd.store import Store
from batchd.store.migrate import upgrade

T = 1_700_000_000.0
CFG = {"node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}],
       "qos": [{"name": "low", "priority": 1, "min_runtime_reclaim_s": 600, "min_runtime_preempt_s": 60},
               {"name": "high", "priority": 100, "preemptible": False}]}


def _controller(tmp_path: Path) -> Controller:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=4, memory_mb=1000, gpus=[], heartbeat=T))
    doc = parse_accounts({"account": [{"name": "team", "policy": {
        "within_account": "never", "borrow_within_cohort": "lower_priority:50", "min_runtime_reclaim_s": "10:00"}}]})
    store.replace_accounts(doc.accounts, doc.associations, 0, [])
    return Controller(parse_config({**CFG, "state_dir": str(tmp_path)}), store)


def test_snapshot_carries_the_min_runtimes_and_the_account_keys(tmp_path):
    snap = _controller(tmp_path).snapshot(T)
    qos = {q["name"]: (q["min_runtime_reclaim_s"], q["min_runtime_preempt_s"]) for q in snap["qos"]}
    assert qos == {"normal": (0, 0), "low": (600, 60), "high": (0, 0)}
    team = next(a for a in snap["accounts"] if a["name"] == "team")
    assert team["policy"] == {"within_account": "never", "min_runtime_reclaim_s": 600,
                              "borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 50}}
    from batchd.scheduler import load_snapshot
    load_snapshot(snap)  # the scheduler's reader takes it


def _jobs(store: Store) -> None:
    """1: a running `low` job being preempted for 2; 2: the pending preemptor; 3: a pending
    job whose victims are protected."""
    from batchd.model import Job

    base = dict(user="root", uid=0, gid=0, account="team", partition="batch", qos="low",
                spec={"script": "true", "workdir": "/"}, request={"tasks": 1, "per_task": {"cpu": 1, "mem": 100}})
    store.insert_jobs([
        Job(id=1, name="v", state="RUNNING", submit_time=T - 900, start_time=T - 800, action="preempt", action_by=2,
            allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}}, node_list="n1", **base),
        Job(id=2, name="p", state="PENDING", submit_time=T - 10, action="preemptor", **base),
        Job(id=3, name="w", state="PENDING", submit_time=T - 5, reason="Reclaim pending: protected for 7 more minutes",
            **base),
    ])


def _service(tmp_path: Path, decisions: dict):
    from batchd.server.service import Service

    ctl = _controller(tmp_path)
    _jobs(ctl.store)
    holder = {"decisions": decisions}  # the controller's last decisions, as the daemon hands them over
    svc = Service(ctl.cfg, ctl.store, snapshot=lambda: ctl.snapshot(T), decisions=lambda: holder["decisions"])
    svc.holder = holder  # type: ignore[attr-defined]
    return svc


def test_why_shows_a_protected_reclaim_in_one_line(tmp_path):
    from batchd.server.explain import explain

    lines = explain(_service(tmp_path, {}), "3")["lines"]
    assert lines[0].endswith("is PENDING: Reclaim pending: protected for 7 more minutes")
    assert lines[1] == ("  why: Reclaim pending: protected for 7 more minutes (the jobs of other accounts it "
                        "would reclaim have not run their minimum runtime yet)")


def test_why_shows_the_policy_of_the_last_cycles_preemption_else_the_stored_marks(tmp_path):
    from batchd.server.explain import explain

    dec = {"preempt": [{"job": "1", "for": "2", "reason": "preempt", "policy": "within_account=lower_priority"}]}
    svc = _service(tmp_path, dec)
    assert "  preempted for job 2 (preempt, policy within_account=lower_priority)" in explain(svc, "1")["lines"]
    assert "  preempts job 1 (preempt, policy within_account=lower_priority)" in explain(svc, "2")["lines"]
    svc.holder["decisions"] = {}  # a later cycle: only the stored job says it
    assert "  preempted for job 2: it is being stopped" in explain(svc, "1")["lines"]
    assert "  jobs were preempted for it: it starts when their devices are free" in explain(svc, "2")["lines"]
    assert not any("preempt" in x for x in explain(svc, "3")["lines"][2:])


def test_the_controller_logs_each_preemptions_policy(tmp_path, caplog, monkeypatch):
    import logging

    import batchd.scheduler

    ctl = _controller(tmp_path)
    _jobs(ctl.store)

    class Dec:
        def to_dict(self):
            return {"start": [], "pending": [], "fair_share": {}, "planned_start": {},
                    "preempt": [{"job": "1", "for": "3", "reason": "reclaim", "policy": "reclaim_within_cohort=any"},
                                {"job": "1", "for": "2", "reason": "preempt"}]}

    monkeypatch.setattr(batchd.scheduler, "decide", lambda snap: Dec())
    with caplog.at_level(logging.INFO, logger="batchd.control.controller"):
        ctl.cycle(T)
    msgs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job preempted")]
    assert msgs == ["job preempted job_id=1 reason=reclaim for=3 policy=reclaim_within_cohort=any",
                    "job preempted job_id=1 reason=preempt for=2 policy=-"]


def test_plan_prints_the_policy_column_only_when_the_scheduler_names_one():
    from batchd.cli.cmd_plan import render

    dec = {"start": [], "pending": [], "fair_share": {},
           "preempt": [{"job": "7", "reason": "reclaim", "for": "9", "policy": "borrow_within_cohort=lower_priority"},
                       {"job": "8", "reason": "preempt", "for": "9"}]}
    text = render(dec)
    assert ("PREEMPT (2)\nJOBID  REASON   FOR  POLICY\n7      reclaim  9    borrow_within_cohort=lower_priority\n"
            "8      preempt  9\n") in text
    old = render({**dec, "preempt": [{"job": "7", "reason": "reclaim", "for": "9"}]})
    assert "PREEMPT (1)\nJOBID  REASON   FOR\n7      reclaim  9\n" in old


def test_sshare_from_the_running_jobs_alone_prints_what_the_whole_snapshot_prints(tmp_path):
    """`GET /v1/snapshot?jobs=running` (sshare) leaves the pending jobs out but keeps the
    associations their owners imply: a user with only a pending job in an account they
    have no association in (the open `default` account) is still a row."""
    from batchd.cli import sshare_table as table
    from batchd.model import Job
    from batchd.priority import merge_policy, share_rows

    ctl = _controller(tmp_path)
    _jobs(ctl.store)
    ctl.store.insert_jobs([Job(id=9, name="d", user="carol", uid=1234, gid=1234, account="default",
                               partition="batch", qos="normal", state="PENDING", submit_time=T - 3,
                               spec={"script": "true", "workdir": "/"},
                               request={"tasks": 1, "per_task": {"cpu": 1, "mem": 100}})])

    def printed(snap):
        policy = merge_policy(None, snap)
        rows = table.filter_rows(share_rows(snap, None), None, None, False)
        run_mins, order = table.tres_run_mins(snap, policy)
        return table.render(rows, table.resolve_fields(table.default_fields(policy["fairshare_algorithm"], True,
                                                                             False)),
                            parsable="", header=True, cluster="c", run_mins=run_mins, tres_order=order,
                            tres_raw=table.tres_raw_mins(snap, order), grp_mins={})

    whole, running = ctl.snapshot(T), ctl.snapshot(T, running_only=True)
    assert {j["id"] for j in running["jobs"]} == {1} and {j["id"] for j in whole["jobs"]} == {1, 2, 3, 9}
    assert "carol" in printed(whole)
    assert printed(running) == printed(whole)
