"""Preemption policies (issue 16): within-account preemption at a limit, minimal victim sets,
the reclaim/borrow policies of the preemptor's account, combined sets and min runtime.

Written from the documented semantics (Kueue's ClusterQueue preemption policies and minimal
target sets, KAI's reclaim/preempt actions and minruntime plugin), not from the code. Every
case runs a whole `decide()` cycle (all passes, backfill off).

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares; any other key
is refused, so a misspelled `want_*` cannot pass quietly), one whole cycle:

- `id`: the rule the case pins; `nodes`, `accounts`, `jobs` in; `qos`: the snapshot's
  top-level QOS table (optional).
- `want_started` (required): ids started in the cycle.
- `want_victim_reasons` (required): {victim id: decision `reason`}, `"preempt"` for a victim
  of the preemptor's own account, `"reclaim"` for one of another account; exactly these.
- `want_victim_policies` (required when something is preempted; default none): {victim id:
  decision `policy`}, the rule that allowed the victim (`"within_account=lower_priority"`, ...).
- `want_reasons` (optional): {pending job id: pending reason} of every job left pending.

Checked for every case besides: each victim names a started job in `for`, and each started
job's `after` lists exactly the victims preempted for it (even when it is placed on idle
cards, as victims freeing an account limit must end first).

Builders: running jobs start at `NOW - 100` unless `start_time` is given; submit times follow
the list order (earlier = older); a QOS priority below 100 makes a job preemptible.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import NOW, account, job, node, run, snapshot

WA_LOWER = "within_account=lower_priority"
WA_NEWER = "within_account=lower_or_newer_equal_priority"
RC_ANY = "reclaim_within_cohort=any"
RC_LOWER = "reclaim_within_cohort=lower_priority"
BW_ANY = "borrow_within_cohort=any"
BW_LOWER = "borrow_within_cohort=lower_priority"


def bw(policy, threshold):
    """The policy of a victim allowed under a `max_priority_threshold` (the threshold is part of the rule)."""
    return f"borrow_within_cohort={policy},max_priority_threshold={threshold}"


def acct(name, quota=0, limit=-1, weight=1, parent="default", **policy):
    """An account whose `policy` table carries `policy` (preemption keys, association limits)."""
    a = account(name, quota=quota, limit=limit, weight=weight, parent=parent)
    if policy:
        a["policy"] = policy
    return a


def top(name, **policy):
    """A top-level parent account without quota or limit of its own (like `default`)."""
    return acct(name, quota=-1, limit=-1, weight=0, parent=None, **policy)


def ago(s):
    return NOW - s


def usr(jid, acct_, user, **kw):
    d = job(jid, acct_, **kw)
    d["user"] = user
    return d


def case(**kw) -> Scenario:
    """A case of this table: `want_started` and `want_victim_reasons` required, no victim
    policy unless `want_victim_policies` names one."""
    missing = {"want_started", "want_victim_reasons"} - set(kw)
    if missing:
        raise TypeError(f"{kw.get('id')}: this table needs {sorted(missing)}")
    kw.setdefault("want_victim_policies", {})
    return Scenario(**kw)


def check(case: Scenario):
    out = case.verify()
    d = out.decisions
    victims: dict = {}
    for p in d["preempt"]:
        victims.setdefault(p["for"], set()).add(p["job"])
    assert set(victims) <= out.started, "a victim names a job that did not start"
    for s in d["start"]:
        assert set(s["after"]) == victims.get(s["job"], set()), f"after of {s['job']}"
    return out


def params(cases):
    return pytest.mark.parametrize("case", cases, ids=ids(cases))


# --- within-account preemption (rule 1): the account's limit, idle cards elsewhere -------------

TWO8 = [node("n0", 8), node("n1", 8)]  # 16 cards: the cluster is never full in these cases


def lows(acct_="team", n=4, prio=50, **kw):
    return [job(f"l{i}", acct_, prio=prio, running_on={"n0": [i]}, **kw) for i in range(n)]


WITHIN = [
    case(id="at_limit_with_idle_cards_newest_lows_preempted",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4)],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"l3": "preempt", "l2": "preempt"},
         want_victim_policies={"l3": WA_LOWER, "l2": WA_LOWER}),
    case(id="at_limit_lowest_priority_first_then_newest",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4)],
         jobs=[job("l0", "team", prio=40, running_on={"n0": [0]}), job("l1", "team", prio=60, running_on={"n0": [1]}),
               job("l2", "team", prio=50, running_on={"n0": [2]}), job("l3", "team", prio=50, running_on={"n0": [3]}),
               job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"l0": "preempt", "l3": "preempt"},
         want_victim_policies={"l0": WA_LOWER, "l3": WA_LOWER}),
    case(id="at_limit_preemptible_preemptor_above_quota_up_to_limit",
         nodes=TWO8, accounts=[acct("team", quota=2, limit=4)],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"l3": "preempt", "l2": "preempt"},
         want_victim_policies={"l3": WA_LOWER, "l2": WA_LOWER}),
    case(id="equal_priority_never_by_default",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4)],
         jobs=lows() + [job("hi", "team", prio=50)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="newer_equal_priority_preempted_with_opt_in",
         nodes=TWO8, accounts=[acct("team", quota=2, limit=2, within_account="lower_or_newer_equal_priority")],
         jobs=[job("old", "team", running_on={"n0": [0]}), job("hi", "team"), job("new", "team", running_on={"n0": [1]})],
         want_started={"hi"}, want_victim_reasons={"new": "preempt"}, want_victim_policies={"new": WA_NEWER}),
    case(id="older_equal_priority_never_preempted_even_with_opt_in",
         nodes=TWO8, accounts=[acct("team", quota=2, limit=2, within_account="lower_or_newer_equal_priority")],
         jobs=[job("old0", "team", running_on={"n0": [0]}), job("old1", "team", running_on={"n0": [1]}),
               job("hi", "team")],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="opt_in_takes_lower_priority_before_newer_equal",
         nodes=TWO8, accounts=[acct("team", quota=2, limit=2, within_account="lower_or_newer_equal_priority")],
         jobs=[job("low", "team", prio=40, running_on={"n0": [0]}), job("hi", "team"),
               job("new", "team", running_on={"n0": [1]})],
         want_started={"hi"}, want_victim_reasons={"low": "preempt"}, want_victim_policies={"low": WA_NEWER}),
    case(id="within_account_never_no_preemption",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4, within_account="never")],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="within_account_never_inherited_from_parent",
         nodes=TWO8, accounts=[top("dept", within_account="never"), acct("team", quota=4, limit=4, parent="dept")],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="within_account_child_overrides_parent",
         nodes=TWO8, accounts=[top("dept", within_account="never"),
                               acct("team", quota=4, limit=4, parent="dept", within_account="lower_priority")],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"l3": "preempt", "l2": "preempt"},
         want_victim_policies={"l3": WA_LOWER, "l2": WA_LOWER}),
    case(id="non_preemptible_over_quota_never_preempts",
         nodes=TWO8, accounts=[acct("team", quota=2, limit=4)],
         jobs=[job("np", "team", prio=125, gpus=2, running_on={"n0": [0, 1]}),
               job("low", "team", prio=50, gpus=2, running_on={"n0": [2, 3]}), job("hi", "team", prio=125, gpus=2)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="non_preemptible_within_quota_preempts",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4)],
         jobs=[job("np", "team", prio=125, gpus=2, running_on={"n0": [0, 1]}),
               job("low", "team", prio=50, gpus=2, running_on={"n0": [2, 3]}), job("hi", "team", prio=125, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"low": "preempt"}, want_victim_policies={"low": WA_LOWER}),
    case(id="assoc_max_jobs_never_preempts",
         nodes=TWO8, accounts=[acct("team", quota=8, limit=8, max_jobs=1)],
         jobs=[usr("low", "team", "bob", prio=50, running_on={"n0": [0]}), usr("hi", "team", "bob", prio=75)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocMaxJobsLimit"}),
    case(id="assoc_max_tres_per_user_never_preempts",
         nodes=TWO8, accounts=[acct("team", quota=8, limit=8, max_tres_per_user={"gres/gpu": 2})],
         jobs=[usr("low", "team", "bob", prio=50, gpus=2, running_on={"n0": [0, 1]}),
               usr("hi", "team", "bob", prio=75)],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "AssocGrpGRES"}),
    case(id="qos_max_gpus_per_user_never_preempts",
         nodes=TWO8, accounts=[acct("team", quota=8, limit=8)], qos=[{"name": "normal", "max_gpus_per_user": 2}],
         jobs=[usr("low", "team", "bob", prio=50, gpus=2, qos="normal", running_on={"n0": [0, 1]}),
               usr("hi", "team", "bob", prio=75, qos="normal")],
         want_started=set(), want_victim_reasons={}, want_reasons={"hi": "QOSMaxGRESPerUser"}),
    case(id="parent_limit_preempts_in_own_account",
         nodes=TWO8, accounts=[acct("dept", quota=4, limit=4, parent=None), acct("team", quota=4, parent="dept")],
         jobs=lows() + [job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"l3": "preempt", "l2": "preempt"},
         want_victim_policies={"l3": WA_LOWER, "l2": WA_LOWER}),
    case(id="parent_limit_never_takes_a_sibling_accounts_jobs",
         nodes=TWO8, accounts=[acct("dept", quota=4, limit=4, parent=None),
                               acct("team_a", quota=2, parent="dept"), acct("team_b", quota=2, parent="dept")],
         jobs=[job("a0", "team_a", running_on={"n0": [0]}), job("a1", "team_a", running_on={"n0": [1]}),
               job("b0", "team_b", running_on={"n0": [2]}), job("b1", "team_b", running_on={"n0": [3]}),
               job("ha", "team_a", prio=75, gpus=2)],
         want_started={"ha"}, want_victim_reasons={"a0": "preempt", "a1": "preempt"},
         want_victim_policies={"a0": WA_LOWER, "a1": WA_LOWER}),
]


@params(WITHIN)
def test_within_account(case):
    check(case)


# --- minimal victim sets (rule 2): greedy in victim order, then drop in reverse what is not needed

MINIMAL = [
    # at the limit (4): small (40) is taken first, then big (45) frees enough alone -> small dropped
    case(id="limit_one_big_victim_makes_the_smaller_first_one_unneeded",
         nodes=TWO8, accounts=[acct("team", quota=4, limit=4)],
         jobs=[job("small", "team", prio=40, running_on={"n0": [0]}),
               job("big", "team", prio=45, gpus=2, running_on={"n0": [1, 2]}),
               job("l", "team", prio=50, running_on={"n0": [3]}), job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"big": "preempt"}, want_victim_policies={"big": WA_LOWER}),
    # a 2-card gang: greedy takes a (newest, on n0 beside a job it may not take), c, b; the pair
    # b, c on n1 suffices -> a dropped. n2, n3 have one idle card each (too small for the gang);
    # the account's limit keeps victims from being re-placed there.
    case(id="gang_preemptor_pair_on_another_node_first_victim_dropped",
         nodes=[node("n0", 2), node("n1", 2), node("n2", 1), node("n3", 1)], accounts=[acct("team", quota=4, limit=4)],
         jobs=[job("b", "team", running_on={"n1": [0]}), job("c", "team", running_on={"n1": [1]}),
               job("a", "team", running_on={"n0": [0]}), job("keep", "team", prio=75, running_on={"n0": [1]}),
               job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"b": "preempt", "c": "preempt"},
         want_victim_policies={"b": WA_LOWER, "c": WA_LOWER}),
    # the same by priority: a (40) first, then c (45), b (50) for the node; a dropped
    case(id="gang_preemptor_lowest_priority_victim_dropped_when_unneeded",
         nodes=[node("n0", 2), node("n1", 2), node("n2", 1)], accounts=[acct("team", quota=4, limit=4)],
         jobs=[job("a", "team", prio=40, running_on={"n0": [0]}), job("c", "team", prio=45, running_on={"n1": [0]}),
               job("b", "team", prio=50, running_on={"n1": [1]}), job("k", "team", prio=75, running_on={"n0": [1]}),
               job("hi", "team", prio=75, gpus=2)],
         want_started={"hi"}, want_victim_reasons={"b": "preempt", "c": "preempt"},
         want_victim_policies={"b": WA_LOWER, "c": WA_LOWER}),
    # reclaim: ox (50) first, then the gang oz (60) on n1 suffices alone -> ox dropped
    case(id="reclaim_gang_victim_makes_the_first_one_unneeded",
         nodes=[node("n0", 2), node("n1", 2), node("n2", 1)],
         accounts=[acct("team", quota=4), acct("other", quota=0)],
         jobs=[job("ox", "other", prio=50, running_on={"n0": [0]}), job("oy", "other", prio=90, running_on={"n0": [1]}),
               job("oz", "other", prio=60, gpus=2, running_on={"n1": [0, 1]}), job("t", "team", prio=75, gpus=2)],
         want_started={"t"}, want_victim_reasons={"oz": "reclaim"}, want_victim_policies={"oz": RC_ANY}),
]


@params(MINIMAL)
def test_minimal_victim_sets(case):
    check(case)


# --- reclaim policies of the preemptor's account ---------------------------------------------
# other (quota 0) borrows n0's 4 cards as two 2-card gangs; n1's one idle card is too small for
# the 2-card job t of team and for a victim. team quota 4: t stays within its quota
# (reclaim_within_cohort); team quota 1: t ends above it (borrow_within_cohort; over-quota
# weight 1 gives team a fair share of 2).

def cohort(team_quota=4, prio=(50, 50), team_policy=None, other_policy=None, parent=None, starts=(100, 100),
           qos=None):
    """`parent`: a top account (`top(...)`) both accounts hang under, else `default`."""
    under = parent["name"] if parent else "default"
    accounts = [acct("team", quota=team_quota, parent=under, **(team_policy or {})),
                acct("other", quota=0, parent=under, **(other_policy or {}))] + ([parent] if parent else [])
    extra = {"qos": qos} if qos else {}
    jobs = [job("o0", "other", prio=prio[0], gpus=2, running_on={"n0": [0, 1]}, start_time=ago(starts[0]), **extra),
            job("o1", "other", prio=prio[1], gpus=2, running_on={"n0": [2, 3]}, start_time=ago(starts[1]), **extra),
            job("t", "team", prio=75, gpus=2)]
    return dict(nodes=[node("n0", 4), node("n1", 1)], accounts=accounts, jobs=jobs)


def took(victim, policy):
    return dict(want_started={"t"}, want_victim_reasons={victim: "reclaim"}, want_victim_policies={victim: policy})


NOTHING = dict(want_started=set(), want_victim_reasons={})

RECLAIM = [
    case(id="reclaim_default_any", **cohort(), **took("o1", RC_ANY)),
    case(id="reclaim_any_takes_higher_priority_victims", **cohort(prio=(90, 90)), **took("o1", RC_ANY)),
    case(id="reclaim_never", **cohort(team_policy={"reclaim_within_cohort": "never"}), **NOTHING),
    case(id="reclaim_lower_priority_takes_lower",
         **cohort(team_policy={"reclaim_within_cohort": "lower_priority"}), **took("o1", RC_LOWER)),
    case(id="reclaim_lower_priority_spares_equal",
         **cohort(prio=(75, 75), team_policy={"reclaim_within_cohort": "lower_priority"}), **NOTHING),
    case(id="reclaim_lower_priority_spares_higher",
         **cohort(prio=(90, 90), team_policy={"reclaim_within_cohort": "lower_priority"}), **NOTHING),
    case(id="reclaim_policy_is_the_preemptors_not_the_victims",
         **cohort(other_policy={"reclaim_within_cohort": "never", "within_account": "never",
                                "borrow_within_cohort": {"policy": "never"}}), **took("o1", RC_ANY)),
    case(id="reclaim_never_inherited_from_parent",
         **cohort(parent=top("dept", reclaim_within_cohort="never")), **NOTHING),
    case(id="reclaim_child_overrides_parent",
         **cohort(parent=top("dept", reclaim_within_cohort="never"), team_policy={"reclaim_within_cohort": "any"}),
         **took("o1", RC_ANY)),
    # borrowing (team ends at 2 > quota 1)
    case(id="borrow_default_any", **cohort(team_quota=1), **took("o1", BW_ANY)),
    case(id="borrow_never", **cohort(team_quota=1, team_policy={"borrow_within_cohort": {"policy": "never"}}),
         **NOTHING),
    case(id="borrow_lower_priority_takes_lower",
         **cohort(team_quota=1, team_policy={"borrow_within_cohort": {"policy": "lower_priority"}}),
         **took("o1", BW_LOWER)),
    case(id="borrow_lower_priority_spares_equal",
         **cohort(team_quota=1, prio=(75, 75), team_policy={"borrow_within_cohort": {"policy": "lower_priority"}}),
         **NOTHING),
    case(id="borrow_lower_priority_spares_higher",
         **cohort(team_quota=1, prio=(90, 90), team_policy={"borrow_within_cohort": {"policy": "lower_priority"}}),
         **NOTHING),
    case(id="borrow_threshold_below_the_victims",
         **cohort(team_quota=1, prio=(70, 70),
                  team_policy={"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 60}}),
         **NOTHING),
    case(id="borrow_threshold_is_inclusive",
         **cohort(team_quota=1, prio=(70, 70),
                  team_policy={"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 70}}),
         **took("o1", bw("lower_priority", 70))),
    case(id="borrow_threshold_admits_the_victim_under_it",
         **cohort(team_quota=1, prio=(60, 70),
                  team_policy={"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 60}}),
         **took("o0", bw("lower_priority", 60))),
    case(id="borrow_any_with_threshold_above_the_victims",
         **cohort(team_quota=1, prio=(90, 90),
                  team_policy={"borrow_within_cohort": {"policy": "any", "max_priority_threshold": 95}}),
         **took("o1", bw("any", 95))),
    case(id="borrow_any_with_threshold_below_the_victims",
         **cohort(team_quota=1, prio=(90, 90),
                  team_policy={"borrow_within_cohort": {"policy": "any", "max_priority_threshold": 80}}),
         **NOTHING),
    case(id="borrow_lower_priority_threshold_does_not_admit_higher",
         **cohort(team_quota=1, prio=(90, 90),
                  team_policy={"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 95}}),
         **NOTHING),
    case(id="borrow_reclaim_never_also_stops_borrowing_reclaim",
         **cohort(team_quota=1, team_policy={"reclaim_within_cohort": "never",
                                             "borrow_within_cohort": {"policy": "any"}}), **NOTHING),
    case(id="borrow_policy_ignored_within_quota_never",
         **cohort(team_policy={"borrow_within_cohort": {"policy": "never"}}), **took("o1", RC_ANY)),
    case(id="borrow_policy_ignored_within_quota_threshold",
         **cohort(team_policy={"borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 40}}),
         **took("o1", RC_ANY)),
    case(id="borrow_never_inherited_from_parent",
         **cohort(team_quota=1, parent=top("dept", borrow_within_cohort={"policy": "never"})), **NOTHING),
]


@params(RECLAIM)
def test_reclaim_policies(case):
    check(case)


# --- combined sets (rule 3) ------------------------------------------------------------------
# team (quota = limit = 4) wants 3 cards on n0: neither its own low job alone nor the borrower
# alone frees enough; together they do, and team ends at its quota.

COMBINED = [
    case(id="combined_own_low_job_and_borrower",
         nodes=[node("n0", 4), node("n1", 1)],
         accounts=[acct("team", quota=4, limit=4), acct("other", quota=0)],
         jobs=[job("tl", "team", prio=50, running_on={"n0": [0]}),
               job("o0", "other", prio=50, gpus=2, running_on={"n0": [1, 2]}),
               job("tk", "team", prio=75, running_on={"n0": [3]}), job("th", "team", prio=75, gpus=3)],
         want_started={"th"}, want_victim_reasons={"tl": "preempt", "o0": "reclaim"},
         want_victim_policies={"tl": WA_LOWER, "o0": RC_ANY}),
    # borrowers first (o2, o1, o0), then tl; o2 on n1 is not needed and is dropped
    case(id="combined_unneeded_borrower_victim_dropped",
         nodes=[node("n0", 4), node("n1", 1)],
         accounts=[acct("team", quota=4, limit=4), acct("other", quota=0)],
         jobs=[job("o0", "other", running_on={"n0": [0]}), job("o1", "other", running_on={"n0": [1]}),
               job("tl", "team", prio=50, running_on={"n0": [2]}), job("tk", "team", prio=75, running_on={"n0": [3]}),
               job("o2", "other", running_on={"n1": [0]}), job("th", "team", prio=75, gpus=3)],
         want_started={"th"}, want_victim_reasons={"tl": "preempt", "o0": "reclaim", "o1": "reclaim"},
         want_victim_policies={"tl": WA_LOWER, "o0": RC_ANY, "o1": RC_ANY}),
    case(id="combined_needs_within_account",
         nodes=[node("n0", 4), node("n1", 1)],
         accounts=[acct("team", quota=4, limit=4, within_account="never"), acct("other", quota=0)],
         jobs=[job("tl", "team", prio=50, running_on={"n0": [0]}),
               job("o0", "other", prio=50, gpus=2, running_on={"n0": [1, 2]}),
               job("tk", "team", prio=75, running_on={"n0": [3]}), job("th", "team", prio=75, gpus=3)],
         want_started=set(), want_victim_reasons={}),
    case(id="combined_needs_reclaim",
         nodes=[node("n0", 4), node("n1", 1)],
         accounts=[acct("team", quota=4, limit=4, reclaim_within_cohort="never"), acct("other", quota=0)],
         jobs=[job("tl", "team", prio=50, running_on={"n0": [0]}),
               job("o0", "other", prio=50, gpus=2, running_on={"n0": [1, 2]}),
               job("tk", "team", prio=75, running_on={"n0": [3]}), job("th", "team", prio=75, gpus=3)],
         want_started=set(), want_victim_reasons={}),
    # no valid set (r1 of a0 is at its quota, r0 and r4 are not preemptible): p1 pends. Found by
    # test_sched_preempt_properties: decide() raised "a scenario that was valid must stay valid"
    case(id="combined_without_a_valid_set_leaves_the_job_pending",
         nodes=[node("n0", 3), node("n1", 3), node("n2", 2)],
         accounts=[acct("a0", quota=1, limit=2, weight=0), acct("a1", quota=4), acct("a2", quota=4, limit=6, weight=0)],
         jobs=[job("r3", "a1", prio=40, running_on={"n2": [0]}),
               job("r0", "a2", prio=125, gpus=2, running_on={"n0": [0, 1]}),
               job("r2", "a2", prio=75, gpus=2, running_on={"n1": [1, 2]}),
               job("r1", "a0", prio=75, running_on={"n1": [0]}),
               job("r4", "a2", prio=125, running_on={"n2": [1]}), job("p1", "a1", prio=125, gpus=3)],
         want_started=set(), want_victim_reasons={}),
]


@params(COMBINED)
def test_combined(case):
    check(case)


@pytest.mark.parametrize("cards", [dict(r0=[0, 1], r1=[2]), dict(r0=[0, 2], r1=[1])], ids=["r1_last", "r1_between"])
def test_combined_own_victim_needed_for_the_fair_share_only(cards):
    """Reclaim alone is refused (a1 would hold 1 + 2 > its fair share 2), its own r1 alone frees
    one card: the combined set frees r1 (for a1's share, rule 3: own victims count as freed)
    and borrowers' cards for the placement, whether or not p0 lands on r1's card. Found by the
    renumbering property: with r1's card last on n0, p0 stayed pending."""
    snap = snapshot([node("n0", 3), node("n1", 2)],
                    [acct("a0", quota=0, weight=0), acct("a1", quota=2, weight=0), acct("a2", quota=1)],
                    [job("r0", "a2", prio=40, gpus=2, running_on={"n0": cards["r0"]}),
                     job("r1", "a1", prio=40, running_on={"n0": cards["r1"]}),
                     job("r2", "a2", prio=40, running_on={"n1": [0]}), job("r3", "a0", prio=40, running_on={"n1": [1]}),
                     job("p0", "a1", gpus=2)])
    out = run(snap)
    assert "p0" in out.started
    reasons = {p["job"]: p["reason"] for p in out.decisions["preempt"]}
    assert reasons.get("r1") == "preempt"
    assert all(r == "reclaim" for v, r in reasons.items() if v != "r1")


# --- min runtime (the victim's protection) ---------------------------------------------------
# within the account: team quota = limit = 2 runs l0 (started 300 s ago) and l1 (100 s ago)

def young_lows(policy=None, starts=(300, 100), parent=None, qos=None, hi_gpus=1):
    extra = {"qos": qos} if qos else {}
    team = acct("team", quota=2, limit=2, parent=parent["name"] if parent else "default", **(policy or {}))
    return dict(nodes=TWO8, accounts=[team] + ([parent] if parent else []),
                jobs=[job("l0", "team", running_on={"n0": [0]}, start_time=ago(starts[0]), **extra),
                      job("l1", "team", running_on={"n0": [1]}, start_time=ago(starts[1]), **extra),
                      job("hi", "team", prio=75, gpus=hi_gpus)])


def pending_for(minutes, kind="Preemption"):
    job_ = "hi" if kind == "Preemption" else "t"
    return dict(want_started=set(), want_victim_reasons={},
                want_reasons={job_: f"{kind} pending: protected for {minutes} more minutes"})


SPOT_PREEMPT = [{"name": "spot", "min_runtime_preempt_s": 600}]
SPOT_RECLAIM = [{"name": "spot", "min_runtime_reclaim_s": 600}]

MIN_RUNTIME = [
    # l1, the victim, has 500 s left: 9 minutes
    case(id="preempt_protected_by_account", **young_lows({"min_runtime_preempt_s": 600}), **pending_for(9)),
    case(id="preempt_older_victim_taken_younger_skipped", **young_lows({"min_runtime_preempt_s": 600}, starts=(700, 100)),
         want_started={"hi"}, want_victim_reasons={"l0": "preempt"}, want_victim_policies={"l0": WA_LOWER}),
    case(id="preempt_protected_by_qos", **young_lows(qos="spot"), qos=SPOT_PREEMPT, **pending_for(9)),
    # both needed: 550 s and 500 s left -> the larger, 10 minutes
    case(id="preempt_protection_max_over_needed_victims",
         **young_lows({"min_runtime_preempt_s": 600}, starts=(50, 100), hi_gpus=2), **pending_for(10)),
    case(id="preempt_not_protected_by_the_reclaim_pair",
         **young_lows({"min_runtime_reclaim_s": 600}),
         want_started={"hi"}, want_victim_reasons={"l1": "preempt"}, want_victim_policies={"l1": WA_LOWER}),
    case(id="preempt_protection_inherited_from_parent",
         **young_lows(parent=top("dept", min_runtime_preempt_s=600)), **pending_for(9)),
    # reclaim: o0 started 400 s ago, o1 (the victim) 130 s ago: 470 s left = 8 minutes
    case(id="reclaim_protected_by_victims_account",
         **cohort(other_policy={"min_runtime_reclaim_s": 600}, starts=(400, 130)), **pending_for(8, "Reclaim")),
    case(id="reclaim_older_victim_taken_younger_skipped",
         **cohort(other_policy={"min_runtime_reclaim_s": 600}, starts=(1000, 130)), **took("o0", RC_ANY)),
    case(id="reclaim_protected_by_qos",
         **cohort(starts=(400, 130), qos="spot"), qos=SPOT_RECLAIM, **pending_for(8, "Reclaim")),
    # max(QOS 900, account 300): 770 s left = 13 minutes
    case(id="reclaim_protection_max_of_qos_and_account",
         **cohort(other_policy={"min_runtime_reclaim_s": 300}, starts=(400, 130), qos="spot"),
         qos=[{"name": "spot", "min_runtime_reclaim_s": 900}], **pending_for(13, "Reclaim")),
    case(id="reclaim_not_protected_by_the_preempt_pair",
         **cohort(other_policy={"min_runtime_preempt_s": 600}, starts=(400, 130)), **took("o1", RC_ANY)),
    case(id="reclaim_preemptors_min_runtime_does_not_matter",
         **cohort(team_policy={"min_runtime_reclaim_s": 600}, starts=(400, 130)), **took("o1", RC_ANY)),
    case(id="reclaim_protection_inherited_from_parent",
         **cohort(parent=top("dept", min_runtime_reclaim_s=600), starts=(400, 130)), **pending_for(8, "Reclaim")),
]


@params(MIN_RUNTIME)
def test_min_runtime(case):
    check(case)


def test_a_case_without_its_required_wants_is_refused():
    with pytest.raises(TypeError, match="want_victim_reasons"):
        case(id="x", nodes=TWO8, accounts=[acct("team")], jobs=[], want_started=set())
