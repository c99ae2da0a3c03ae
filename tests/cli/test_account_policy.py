"""`batchd account add|modify --policy` with the preemption keys (issue 16), through the real
routes, service and store on SQLite and PostgreSQL (the socket replaced by a direct call):
borrow_within_cohort's POLICY[:N] text, Slurm durations, removal, `list`/`show`, and bad values
refused with `batchd: error: <where>: <problem>` and exit 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from batchd.cli import admin, client
from batchd.cli.cmd_account import command
from batchd.config import Config
from batchd.errors import BatchdError
from batchd.server import api
from batchd.server.service import Caller, Service
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def svc(db_url, monkeypatch):
    store = Store(db_url)
    upgrade(store.engine)
    store.ensure_default_account()
    s = Service(Config(path="test.toml", cluster_name="dev"), store)

    def request(method, path, body=None, query=None, timeout=60.0):
        try:
            return json.loads(json.dumps(api.ROUTES[(method, path)](s, Caller(0, 0), query or {}, body)))
        except BatchdError as e:
            raise client.DaemonError(e.code, str(e), e.exit_code, e.status) from None

    monkeypatch.setattr(admin, "request", request)
    yield s
    store.close()


def run(*args):
    r = CliRunner().invoke(command, list(args))
    return r.exit_code, r.stdout, r.stderr


def policy(svc, name):
    return next(a for a in svc.store.list_accounts() if a.name == name).policy


def test_set_show_list_and_remove(svc):
    rc, out, err = run("add", "teamx", "--policy", "within_account=lower_or_newer_equal_priority",
                       "--policy", "borrow_within_cohort=lower_priority:100", "--policy", "min_runtime_reclaim_s=30:00",
                       "--policy", "min_runtime_preempt_s=600")
    assert (rc, err) == (0, ""), err
    assert policy(svc, "teamx") == {"within_account": "lower_or_newer_equal_priority",
                                    "borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 100},
                                    "min_runtime_reclaim_s": 1800, "min_runtime_preempt_s": 600}
    # a new POLICY text replaces the whole table (its threshold too)
    assert run("modify", "teamx", "--policy", "borrow_within_cohort=any", "--policy",
               "reclaim_within_cohort=never")[0] == 0
    assert policy(svc, "teamx")["borrow_within_cohort"] == {"policy": "any"}
    # JSON merges into the table, as for TRES tables; null removes a field
    assert run("modify", "teamx", "--policy", 'borrow_within_cohort={"max_priority_threshold": 7}')[0] == 0
    assert policy(svc, "teamx")["borrow_within_cohort"] == {"policy": "any", "max_priority_threshold": 7}
    rc, out, _ = run("show", "teamx")
    assert json.loads(out)["account"][0]["policy"] == policy(svc, "teamx")
    rc, out, _ = run("list")
    line = next(x for x in out.splitlines() if x.strip().startswith("policy:"))
    assert line.split("policy: ")[1] == ("within_account=lower_or_newer_equal_priority "
                                         "borrow_within_cohort=any:7 min_runtime_reclaim_s=1800 "
                                         "min_runtime_preempt_s=600 reclaim_within_cohort=never")
    assert run("modify", "teamx", "--policy", "borrow_within_cohort=null", "--policy", "within_account=-1",
               "--policy", "min_runtime_reclaim_s=-1")[0] == 0
    assert policy(svc, "teamx") == {"min_runtime_preempt_s": 600, "reclaim_within_cohort": "never"}


@pytest.mark.parametrize("opt, message", [
    ("within_account=sometimes", "account teamy.policy.within_account: must be one of never, lower_priority, "
                                 "lower_or_newer_equal_priority, got 'sometimes'"),
    ("borrow_within_cohort=lower_priority:high", "account teamy.policy.borrow_within_cohort: the threshold after "
                                                 "':' must be an integer, got 'high'"),
    ("borrow_within_cohort=maybe", "account teamy.policy.borrow_within_cohort.policy: must be one of never, "
                                   "lower_priority, any, got 'maybe'"),
    ("min_runtime_preempt_s=soon", "account teamy.policy.min_runtime_preempt_s: not a duration, got 'soon'"),
    ("min_runtime_preempt_s=-5", "account teamy.policy.min_runtime_preempt_s: must be an integer number of "
                                 "seconds >= 0, got -5"),
], ids=["word", "threshold", "borrow-word", "duration", "negative"])
def test_bad_values_are_refused_and_nothing_changes(svc, opt, message):
    assert run("add", "teamy")[0] == 0
    rc, out, err = run("modify", "teamy", "--policy", opt)
    assert rc == 1 and err.startswith(f"batchd: error: {message}"), err
    assert not policy(svc, "teamy")
