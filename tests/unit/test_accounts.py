"""The accounts file: what cannot be right is refused with a message naming the account
and the field; the diff lists exactly the changes."""

import pytest

from batchd.errors import InvalidRequest
from batchd.server.accounts import diff, parse_accounts


def acct(name, parent=None, **res):
    d = {"name": name}
    if parent:
        d["parent"] = parent
    if res:
        d["resources"] = {"gres/gpu": res}
    return d


@pytest.mark.parametrize("doc, where", [
    ({"account": [acct("a", parent="b"), acct("b", parent="a")]}, "account a.parent"),
    ({"account": [acct("a", parent="nope")]}, "account a.parent"),
    ({"account": [acct("a", quota=6, limit=4)]}, "account a.resources.gres/gpu.limit"),
    ({"account": [acct("p", quota=4), acct("c1", parent="p", quota=3), acct("c2", parent="p", quota=2)]},
     "account p.resources.gres/gpu.quota"),
    ({"account": [{"name": "a", "resources": {"gres/gpu:a100": {"quota": 1}}}]}, "account a.resources.gres/gpu:a100"),
    ({"account": [{"name": "a", "resources": {"disk": {"quota": 1}}}]}, "account a.resources.disk"),
    ({"account": [{"name": "a", "bogus": 1}]}, "account a.bogus"),
    ({"account": [acct("a"), acct("a")]}, "account a"),
    ({"account": [{"name": "a", "default_for": ["u"]}, {"name": "b", "default_for": ["u"]}]}, "user u"),
])
def test_refused_with_the_account_and_field(doc, where):
    with pytest.raises(InvalidRequest) as e:
        parse_accounts(doc, gpu_types={"h200", "1g.24gb"})
    assert e.value.message.startswith(where + ":"), e.value.message


def test_valid_tree_defaults_and_diff():
    doc = {"account": [acct("train", quota=6, limit=-1, over_quota_weight=2),
                       {"name": "nb", "users": ["carol"], "default_for": ["carol"],
                        "resources": {"gres/gpu:h200": {"quota": 2}}}]}
    p = parse_accounts(doc, gpu_types={"h200"})
    names = {a.name: a for a in p.accounts}
    assert set(names) == {"root", "train", "nb", "default"}
    assert names["train"].shares == 6 and names["train"].parent == "root"  # shares default to the GPU quota
    assert p.associations == [{"user": "carol", "account": "nb", "shares": 1, "is_default": True}]
    lines = diff([names["root"], names["default"]], [], p)
    assert sorted(x.split(" (")[0] for x in lines) == ["+ account nb", "+ account train", "+ user carol in nb"]
    assert diff(p.accounts, p.associations, p) == []


PREEMPT_FILE = """
[[account]]
name = "org"
[account.policy]
within_account = "lower_or_newer_equal_priority"
borrow_within_cohort = { policy = "lower_priority", max_priority_threshold = 50 }
min_runtime_reclaim_s = "30:00"
min_runtime_preempt_s = 600

[[account]]
name = "team"
parent = "org"
policy = { reclaim_within_cohort = "never", borrow_within_cohort = "any:10", min_runtime_preempt_s = "1-00:00:00" }
"""


def test_preemption_keys_of_the_accounts_file():
    import tomllib

    p = {a.name: a for a in parse_accounts(tomllib.loads(PREEMPT_FILE)).accounts}
    assert p["org"].policy == {"within_account": "lower_or_newer_equal_priority",
                               "borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 50},
                               "min_runtime_reclaim_s": 1800, "min_runtime_preempt_s": 600}
    assert p["team"].policy == {"reclaim_within_cohort": "never",
                                "borrow_within_cohort": {"policy": "any", "max_priority_threshold": 10},
                                "min_runtime_preempt_s": 86400}


@pytest.mark.parametrize("policy, message", [
    ({"within_account": "sometimes"}, "account a.policy.within_account: must be one of never, lower_priority, "
                                      "lower_or_newer_equal_priority, got 'sometimes'"),
    ({"min_runtime_reclaim_s": "30"}, "account a.policy.min_runtime_reclaim_s: not a duration, got '30' "
                                      "(seconds as a number, or M:S, H:M:S, D-H, D-H:M, D-H:M:S)"),
    ({"min_runtime_reclaim_s": "UNLIMITED"}, "account a.policy.min_runtime_reclaim_s: not a duration"),
    ({"min_runtime_preempt_s": "soon"}, "account a.policy.min_runtime_preempt_s: not a duration"),
    ({"borrow_within_cohort": {"max_priority_threshold": 5}},
     "account a.policy.borrow_within_cohort.policy: required (one of never, lower_priority, any)"),
], ids=["word", "quoted-number", "unlimited", "text", "no-policy"])
def test_bad_preemption_values_are_refused(policy, message):
    with pytest.raises(InvalidRequest) as e:
        parse_accounts({"account": [{"name": "a", "policy": policy}]})
    assert e.value.message.startswith(message), e.value.message


def test_a_user_may_not_set_a_preemption_key():
    doc = {"account": [{"name": "a"}], "user": [{"name": "u", "account": "a",
                                                 "policy": {"min_runtime_preempt_s": 60}}]}
    with pytest.raises(InvalidRequest) as e:
        parse_accounts(doc)
    assert e.value.message == ("user[0].policy.min_runtime_preempt_s: an account's key, not a user's "
                               "(set it in the account's policy)")
