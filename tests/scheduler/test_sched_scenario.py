"""The scenario type of the scheduler tables (scenario.py): a misspelled or unknown key is refused,
a `want_*` of the wrong shape too, every field says what it compares, and every table uses it."""

import dataclasses
import importlib
from pathlib import Path

import pytest

from .scenario import FIELD_DOCS, Scenario
from .sched_builders import account, job, node


def small(**kw) -> Scenario:
    return Scenario(id="one_job_one_gpu", nodes=[node("n0", 1)], accounts=[account("a", quota=-1)],
                    jobs=[job("j", "a")], **kw)


@pytest.mark.parametrize("key", ["want_preemted", "want_reason", "want_start", "wants_started", "node"])
def test_a_misspelled_key_is_refused(key):
    with pytest.raises(TypeError, match=key):
        small(**{key: set()})


def test_a_want_of_the_wrong_shape_is_refused():
    with pytest.raises(TypeError, match="want_started must be a set"):
        small(want_started={"j": []})
    with pytest.raises(TypeError, match="want_reasons must be a dict"):
        small(want_reasons={"j"})


def test_every_want_given_is_checked():
    out = small().outcome()
    small(want_started={"j"}, want_preempted=set(), want_reasons={}, want_victim_reasons={},
          want_after={"j": []}, want_gpus={"j": [0]}).check(out)
    for wrong in (dict(want_started=set()), dict(want_preempted={"j"}), dict(want_reasons={"j": "Resources"}),
                  dict(want_victims_for={"j": "x"}), dict(want_after={"j": ["v"]}), dict(want_gpus={"j": [1]}),
                  dict(want_fair_share={"a": 7})):
        with pytest.raises(AssertionError):
            small(**wrong).check(out)


def test_every_field_says_what_it_compares():
    assert {f.name for f in dataclasses.fields(Scenario)} == set(FIELD_DOCS)
    assert all(len(doc) > 20 for doc in FIELD_DOCS.values()), FIELD_DOCS


def test_every_table_is_made_of_scenarios():
    """No scheduler test module keeps cases as plain dicts with `want_*` keys (unchecked keys)."""
    here = Path(__file__).parent
    tables = 0
    for path in sorted(here.glob("test_sched_*.py")):
        mod = importlib.import_module(f"{__package__}.{path.stem}")
        for name, value in vars(mod).items():
            if isinstance(value, list) and value and all(isinstance(c, dict) for c in value):
                assert not any(k.startswith("want") for c in value for k in c), f"{path.name}: {name} holds dicts"
            if isinstance(value, list) and value and all(isinstance(c, Scenario) for c in value):
                tables += 1
    assert tables >= 15
