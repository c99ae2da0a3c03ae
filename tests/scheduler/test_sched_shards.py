"""gres/shard per card: shards belong to one GPU, and a card is shared or whole, never both.

A node's `shards` are split evenly over its whole (non-MIG) GPUs. Per node, a job's shards all
come from one card (Slurm's default: a shard request must fit one GPU), reported as
`allocation[node]["shard_gpus"] = [index]`. A card with shards in use is not free for a
whole-GPU job; a card held whole offers no shards.

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares): `nodes`,
`accounts`, `jobs` in; `passes` (default allocate only); `want_started`, `want_reasons`,
`want_preempted` (default: none), `want_gpus`, `want_shard_gpus`, `want_after`.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot


def shard_node(name: str = "n0", gpus: int = 2, shards: int = 4, **kw) -> dict:
    return dict(node(name, gpus, **kw), shards=shards)


def sh(jid: str, n: int, acct: str = "a", **kw) -> dict:
    """A job asking `n` shards (and no whole GPU)."""
    return job(jid, acct, per_task={"gres/shard": n, "cpu": 1, "mem": 1}, **kw)


def sh_running(jid: str, n: int, card: int | None, acct: str = "a", **kw) -> dict:
    """A running shard job on card `card` of n0 (`card=None`: an allocation stored before
    shards were tied to a card)."""
    d = sh(jid, n, acct, **kw)
    a = {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 1, "shards": n}
    if card is not None:
        a["shard_gpus"] = [card]
    d.update(state="RUNNING", start_time=1_999_000, allocation={"n0": a})
    return d


A = [account("a", quota=-1)]

def case(**kw) -> Scenario:
    kw.setdefault("want_preempted", set())
    return Scenario(**kw)


CASES = [
    case(id="whole_gpu_job_skips_card_with_shards_in_use",
         nodes=[shard_node()], accounts=A,
         jobs=[sh_running("s", 1, 0), job("w", "a")],
         want_started={"w"}, want_reasons={}, want_gpus={"w": [1]}),
    case(id="two_gpu_job_waits_while_one_card_is_shared",
         nodes=[shard_node()], accounts=A,
         jobs=[sh_running("s", 1, 0), job("w2", "a", gpus=2)],
         want_started=set(), want_reasons={"w2": "Resources"}),
    case(id="shard_job_avoids_card_held_whole",
         nodes=[shard_node()], accounts=A,
         jobs=[job("w", "a", running_on={"n0": [0]}), sh("s1", 2), sh("s2", 1)],
         want_started={"s1"}, want_reasons={"s2": "Resources"}, want_shard_gpus={"s1": [1]}),
    case(id="no_shards_when_every_card_is_held_whole",
         nodes=[shard_node()], accounts=A,
         jobs=[job("w", "a", gpus=2, running_on={"n0": [0, 1]}), sh("s", 1)],
         want_started=set(), want_reasons={"s": "Resources"}),
    case(id="shard_jobs_pack_on_a_shared_card_leaving_a_whole_one",
         nodes=[shard_node()], accounts=A,
         jobs=[sh("s1", 1), sh("s2", 1), job("w", "a")],
         want_started={"s1", "s2", "w"}, want_reasons={},
         want_shard_gpus={"s1": [0], "s2": [0]}, want_gpus={"w": [1]}),
    case(id="whole_jobs_first_then_shards_on_the_card_left",
         nodes=[shard_node()], accounts=A,
         jobs=[job("w", "a"), sh("s1", 2), sh("s2", 1)],
         want_started={"w", "s1"}, want_reasons={"s2": "Resources"},
         want_gpus={"w": [0]}, want_shard_gpus={"s1": [1]}),
    case(id="request_must_fit_one_card",
         nodes=[shard_node()], accounts=A,
         jobs=[sh("s", 3)],
         want_started=set(), want_reasons={"s": "BadConstraints"}),
    case(id="request_fits_the_card_with_room",
         nodes=[shard_node()], accounts=A,
         jobs=[sh_running("s0", 1, 0), sh("s", 2)],
         want_started={"s"}, want_reasons={}, want_shard_gpus={"s": [1]}),
    case(id="legacy_allocation_without_card_still_occupies_one",
         nodes=[shard_node(gpus=1, shards=2)], accounts=A,
         jobs=[sh_running("old", 1, None), job("w", "a"), sh("s", 1)],
         want_started={"s"}, want_reasons={"w": "Resources"}, want_shard_gpus={"s": [0]}),
    case(id="legacy_single_shard_gpu_key_is_honoured",
         nodes=[shard_node()], accounts=A,
         jobs=[dict(sh_running("old", 1, None), allocation={"n0": {"tasks": 1, "gpus": [], "cpus": 1,
                                                                    "memory_mb": 1, "shards": 1, "shard_gpu": 0}}),
               job("w", "a")],
         want_started={"w"}, want_reasons={}, want_gpus={"w": [1]}),
    case(id="mig_card_has_no_shards",
         nodes=[dict(node("n0", devices=[{"index": 0, "uuid": "GPU-a", "type": "rtxpro6000",
                                          "mig": [{"profile": "1g.24gb", "uuid": "MIG-1"}]},
                                         {"index": 1, "uuid": "GPU-b", "type": "rtxpro6000"}]), shards=2)],
         accounts=A,
         jobs=[sh("s", 2), job("m", "a", per_task={"gres/gpu:1g.24gb": 1}), job("w", "a")],
         want_started={"s", "m"}, want_reasons={"w": "Resources"}, want_shard_gpus={"s": [1]},
         want_gpus={"m": ["0:MIG-1"]}),
    # preemption: a victim's shards go back to its card
    case(id="whole_gpu_preemptor_frees_a_shared_card",
         nodes=[shard_node(gpus=1, shards=2)], accounts=[account("a", quota=10)], passes=["preempt"],
         jobs=[sh_running("s1", 1, 0, prio=50), sh_running("s2", 1, 0, prio=50), job("w", "a", prio=125)],
         want_started={"w"}, want_preempted={"s1", "s2"}, want_gpus={"w": [0]}, want_after={"w": ["s1", "s2"]}),
    case(id="shard_preemptor_takes_victims_shards_on_their_card",
         nodes=[shard_node()], accounts=[account("a", quota=10)], passes=["preempt"],
         jobs=[job("w", "a", prio=50, running_on={"n0": [0]}), sh_running("s", 2, 1, prio=50),
               sh("hi", 2, prio=125)],
         want_started={"hi"}, want_preempted={"s"}, want_shard_gpus={"hi": [1]}, want_after={"hi": ["s"]}),
    case(id="shard_preemptor_does_not_evict_more_than_its_card_needs",
         nodes=[shard_node(gpus=2, shards=4)], accounts=[account("a", quota=10)], passes=["preempt"],
         jobs=[sh_running("s0", 2, 0, prio=40), sh_running("s1", 1, 1, prio=50), sh_running("s2", 1, 1, prio=50),
               sh("hi", 1, prio=125)],
         want_started={"hi"}, want_preempted={"s0"}, want_shard_gpus={"hi": [0]}, want_after={"hi": ["s0"]}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_shards_per_card(case):
    case.verify(passes=["allocate"])


def test_second_cycle_after_preempting_shard_jobs_is_stable():
    """Once the shard victims are gone, the whole-GPU job starts on their card and nothing moves."""
    from .sched_builders import apply

    snap = snapshot([shard_node(gpus=1, shards=2)], [account("a", quota=10)],
                    [sh_running("s1", 1, 0, prio=50), job("w", "a", prio=125)])
    out = run(snap)
    assert out.preempted == {"s1"} and out.started == {"w"}
    for s in out.decisions["start"]:
        s["after"] = []
    apply(snap, out.decisions)
    again = run(snap)
    assert again.started == set() and again.preempted == set()
    assert again.reasons == {"s1": "Resources"}
