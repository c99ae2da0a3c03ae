"""bench/soak.py's audit finds what it claims to find: a store and a jobs' log with one
case of each problem give one count of each, and a clean one gives none."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from batchd.model import Job, UsageRec
from batchd.store import Store
from batchd.store.migrate import upgrade

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def _soak():
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _job(jid, comment, state="COMPLETED", restarts=0):
    return Job(id=jid, name="wrap", user="u", uid=1000, gid=1000, account="default", partition="batch",
               qos="normal", state=state, submit_time=time.time(), spec={}, request={}, comment=comment,
               restarts=restarts, submit_token=f"t-{comment}")


def _usage(jid, run, state="COMPLETED"):
    return UsageRec(job_id=jid, run=run, name="wrap", account="default", user="u", uid=1000, gid=1000,
                    partition="batch", qos="normal", node_list="node1", tres_alloc="cpu=1", tres={"cpu": 1},
                    billing=1.0, submit_time=1.0, start_time=2.0, end_time=3.0, elapsed_s=1, state=state,
                    exit_code=0, exit_signal=0)


def _store(tmp_path, jobs, usage) -> str:
    url = f"sqlite:///{tmp_path / 'soak.db'}"
    s = Store(url)
    upgrade(s.engine)
    s.insert_jobs(jobs)
    for u in usage:
        s.finish_run(u.job_id, u.run, {"end_time": u.end_time}, u)
    s.close()
    return url


def test_each_problem_is_counted_once(tmp_path):
    jobs = [_job(1, "ok"), _job(2, "dup"), _job(3, "dup"), _job(4, "twice"), _job(5, "nousage"),
            _job(6, "silent"), _job(7, "stuck", state="PENDING"), _job(8, "other"),
            _job(9, "requeued", restarts=1)]
    usage = [_usage(1, 0), _usage(2, 0), _usage(3, 0), _usage(4, 0), _usage(6, 0), _usage(8, 0),
             _usage(9, 0, "NODE_FAIL"), _usage(9, 1)]
    url = _store(tmp_path, jobs, usage)
    log = tmp_path / "runs.log"
    log.write_text("".join(f"{j} 0 1.0\n" for j in (1, 2, 3, 4, 4, 5, 8)) + "9 1 2.0\n")
    acks = [("ok", 1, ""), ("dup", 2, ""), ("twice", 4, ""), ("nousage", 5, ""), ("silent", 6, ""),
            ("stuck", 7, ""), ("gone", 10, ""), ("other", 11, ""), ("requeued", 9, "")]
    p = _soak().audit(url, acks, log)
    counts = {k: len(v) for k, v in p.items()}
    assert counts == {"lost": 2, "doubled": 1, "ran_twice": 1, "never_ran": 1, "usage_mismatch": 1,
                      "unfinished": 1, "node_fail": 1}, p
    assert "gone" in " ".join(p["lost"]) and "other: sbatch printed 11" in " ".join(p["lost"])
    assert "t-dup" in p["doubled"][0]


def test_a_clean_soak_has_no_problem(tmp_path):
    url = _store(tmp_path, [_job(1, "a"), _job(2, "b")], [_usage(1, 0), _usage(2, 0)])
    log = tmp_path / "runs.log"
    log.write_text("1 0 1.0\n2 0 1.5\n")
    p = _soak().audit(url, [("a", 1, ""), ("b", 2, "")], log)
    assert not any(p.values()), p
