"""The preemption keys of an account's policy (issue 16, batchd.slurm.assocpolicy): accepted values
normalised, bad values refused naming the key and the allowed values, refused in a user's
policy, and no association limit for the scheduler."""

import pytest

from batchd.slurm.assocpolicy import check_policy


@pytest.mark.parametrize("given, want", [
    ({"within_account": "never"}, {"within_account": "never"}),
    ({"within_account": "lower_or_newer_equal_priority"}, {"within_account": "lower_or_newer_equal_priority"}),
    ({"reclaim_within_cohort": "lower_priority"}, {"reclaim_within_cohort": "lower_priority"}),
    ({"borrow_within_cohort": {"policy": "any"}}, {"borrow_within_cohort": {"policy": "any"}}),
    ({"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 100}},
     {"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 100}}),
    ({"borrow_within_cohort": {"policy": "never", "max_priority_threshold": None}},
     {"borrow_within_cohort": {"policy": "never"}}),
    ({"borrow_within_cohort": "lower_priority"}, {"borrow_within_cohort": {"policy": "lower_priority"}}),
    ({"borrow_within_cohort": "any:-5"}, {"borrow_within_cohort": {"policy": "any", "max_priority_threshold": -5}}),
    ({"min_runtime_reclaim_s": 0, "min_runtime_preempt_s": 600},
     {"min_runtime_reclaim_s": 0, "min_runtime_preempt_s": 600}),
], ids=["never", "newer-equal", "reclaim-lower", "borrow-any", "borrow-threshold", "threshold-null",
        "borrow-text", "borrow-text-threshold", "min-runtimes"])
def test_accepted_and_normalised(given, want):
    assert check_policy("account a.policy", given) == want


@pytest.mark.parametrize("given, where, words", [
    ({"within_account": "sometimes"}, "account a.policy.within_account",
     "never, lower_priority, lower_or_newer_equal_priority"),
    ({"within_account": "any"}, "account a.policy.within_account", "lower_or_newer_equal_priority"),
    ({"reclaim_within_cohort": "always"}, "account a.policy.reclaim_within_cohort", "never, lower_priority, any"),
    ({"borrow_within_cohort": {"max_priority_threshold": 3}}, "account a.policy.borrow_within_cohort.policy",
     "required"),
    ({"borrow_within_cohort": {"policy": "LowerPriority"}}, "account a.policy.borrow_within_cohort.policy",
     "never, lower_priority, any"),
    ({"borrow_within_cohort": {"policy": "any", "max_priority_threshold": 1.5}},
     "account a.policy.borrow_within_cohort.max_priority_threshold", "integer"),
    ({"borrow_within_cohort": {"policy": "any", "limit": 1}}, "account a.policy.borrow_within_cohort.limit",
     "policy, max_priority_threshold"),
    ({"borrow_within_cohort": "any:high"}, "account a.policy.borrow_within_cohort", "integer"),
    ({"borrow_within_cohort": 3}, "account a.policy.borrow_within_cohort", "POLICY[:N]"),
    ({"min_runtime_reclaim_s": -1}, "account a.policy.min_runtime_reclaim_s", ">= 0"),
    ({"min_runtime_preempt_s": 1.5}, "account a.policy.min_runtime_preempt_s", "seconds"),
    ({"min_runtime_preempt_s": True}, "account a.policy.min_runtime_preempt_s", "seconds"),
], ids=["within-word", "within-any", "reclaim-word", "borrow-no-policy", "borrow-kueue-spelling",
        "threshold-float", "borrow-unknown", "text-threshold", "borrow-number", "runtime-negative",
        "runtime-float", "runtime-bool"])
def test_refused_naming_key_and_values(given, where, words):
    with pytest.raises(ValueError) as e:
        check_policy("account a.policy", given)
    assert str(e.value).startswith(where + ":") and words in str(e.value), str(e.value)


@pytest.mark.parametrize("key", ["within_account", "reclaim_within_cohort", "borrow_within_cohort",
                                 "min_runtime_reclaim_s", "min_runtime_preempt_s", "partitions"])
def test_a_users_policy_refuses_account_keys(key):
    with pytest.raises(ValueError) as e:
        check_policy("user[0].policy", {key: "never"}, user=True)
    assert str(e.value) == f"user[0].policy.{key}: an account's key, not a user's (set it in the account's policy)"


def test_preemption_keys_are_no_association_limits():
    # the scheduler switches its association-limit bookkeeping on only for limits (assoclimits.py)
    from batchd.scheduler import load_snapshot
    from batchd.scheduler.state import Session
    from tests.scheduler.sched_builders import account, job, node, snapshot

    pol = check_policy("a", {"within_account": "never", "reclaim_within_cohort": "lower_priority",
                             "borrow_within_cohort": "any:10", "min_runtime_reclaim_s": 5,
                             "min_runtime_preempt_s": 5})
    snap = snapshot([node("n0", 2)], [account("a", quota=2, weight=1)], [job("p", "a")])
    snap["accounts"][0]["policy"] = pol
    assert Session(load_snapshot(snap), {}, {}).assoc_policies is False
    snap["accounts"][0]["policy"] = {**pol, "max_jobs": 1}
    assert Session(load_snapshot(snap), {}, {}).assoc_policies is True


def test_the_examples_of_docs_preemption_md_load():
    import re
    import tomllib
    from pathlib import Path

    from batchd.config import parse_config
    from batchd.server.accounts import parse_accounts

    text = (Path(__file__).resolve().parents[2] / "docs" / "preemption.md").read_text()
    accounts, config = (tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", text, re.S))
    p = {a.name: a.policy for a in parse_accounts(accounts).accounts}
    assert p["research"]["min_runtime_reclaim_s"] == 1800
    assert p["interns"] == {"within_account": "never", "reclaim_within_cohort": "lower_priority"}
    cfg = parse_config({"node": [{"name": "n1", "cpus": 1, "memory_mb": 1}], **config})
    assert [(q.name, q.min_runtime_reclaim_s) for q in cfg.qos] == [("normal", 0), ("low", 900)]
