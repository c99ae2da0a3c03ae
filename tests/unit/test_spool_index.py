"""The node agent's view of its spool (issue 17): a pass does not list every run
directory ever made, and collected runs' directories are purged after
`[scheduler] spool_keep_s`."""

import os
import time

import pytest

from batchd.config import ConfigError, parse_config
from batchd.node import launcher
from batchd.node.agent import Agent
from batchd.node.runwatch import SpoolIndex
from batchd.node.spool import COLLECTED
from batchd.store import Store
from batchd.store.migrate import upgrade


def _run_dir(spool, job_id, run, collected=False, age_s=0.0):
    path = launcher.jobdir_path(str(spool), job_id, run)
    os.makedirs(path)
    if collected:
        marker = os.path.join(path, COLLECTED)
        open(marker, "w").close()
        t = time.time() - age_s
        os.utime(marker, (t, t))
    return path


def _age(path, s):
    t = time.time() - s
    os.utime(path, (t, t))


def test_the_index_lists_again_only_when_the_spool_changed(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(1, 51):
        _run_dir(spool, i, 0, collected=True)
    _run_dir(spool, 60, 0)
    _age(spool, 10)  # its last change is old enough to be trusted
    idx = SpoolIndex(str(spool))
    assert idx.runs() == [(60, 0)] and idx.listings == 1
    assert idx.runs() == [(60, 0)] and idx.runs() == [(60, 0)]
    assert idx.listings == 1  # unchanged spool: no listing, no stat of the 50 collected runs
    launcher.collect(str(spool), 60, 0)
    assert idx.runs() == [] and idx.listings == 1
    _run_dir(spool, 61, 1)  # a new run directory changes the spool's mtime
    assert idx.runs() == [(61, 1)] and idx.listings == 2
    assert idx.runs() == launcher.list_runs(str(spool))


def test_a_change_in_the_same_clock_tick_is_not_missed(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    idx = SpoolIndex(str(spool))
    assert idx.runs() == []
    st = os.stat(spool)
    _run_dir(spool, 7, 0)
    os.utime(spool, ns=(st.st_atime_ns, st.st_mtime_ns))  # as if made within the same tick
    assert idx.runs() == [(7, 0)]  # a recent mtime is never trusted


@pytest.fixture
def agent(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"spool_keep_s": 600},
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    yield Agent(cfg, store, ["n1"])
    store.close()


def test_the_agent_purges_runs_collected_longer_ago_than_spool_keep_s(agent):
    old = _run_dir(agent.spool, 1, 0, collected=True, age_s=700)
    recent = _run_dir(agent.spool, 2, 0, collected=True, age_s=100)
    agent.step()
    assert not os.path.exists(old) and os.path.exists(recent)
    _age(os.path.join(recent, COLLECTED), 700)
    agent.step()  # within the purge period: nothing more
    assert os.path.exists(recent)
    agent._purged = 0.0
    agent.step()
    assert not os.path.exists(recent)


@pytest.mark.parametrize("key", ["spool_keep_s", "min_job_age_s"])
def test_retentions_are_numbers_of_seconds(key):
    with pytest.raises(ConfigError, match=f"scheduler.{key}"):
        parse_config({"scheduler": {key: "1h"}})
