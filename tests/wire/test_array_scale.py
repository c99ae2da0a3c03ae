"""Issue 17: the array size limit is a config key (Slurm's MaxArraySize), and cancelling a
large array is one write."""

from __future__ import annotations

from pathlib import Path

import pytest
from wire_helpers import ME, spec

from batchd.errors import BatchdError
from batchd.server.service import Service
from tests.refstore import reference_store


def _svc(tmp_path: Path, **limits: int) -> Service:
    cfg, store = reference_store(tmp_path / "batchd.db", dev=True)
    cfg.limits.update(limits)
    return Service(cfg, store)


def test_the_default_refuses_task_1001_as_slurm_does(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    with pytest.raises(BatchdError, match="Invalid job array specification"):
        svc.submit(ME, spec(tmp_path, array="0-1001", hold=True))
    assert svc.submit(ME, spec(tmp_path, array="0-1000", hold=True))["job_id"]
    svc.store.close()


def test_max_array_size_takes_10000_tasks_and_one_cancel_ends_them(tmp_path: Path) -> None:
    svc = _svc(tmp_path, max_array_size=10001)
    jid = svc.submit(ME, spec(tmp_path, array="0-9999", hold=True))["job_id"]
    writes = []
    real = svc.store.update_jobs

    def counting(changes):
        writes.append(len(changes))
        return real(changes)

    svc.store.update_jobs = counting  # type: ignore[method-assign]
    out = svc.signal_jobs(ME, {"ids": [str(jid)], "signal": None})
    assert len(out["done"]) == 10000 and not out["errors"]
    assert writes == [10000]  # one transaction for all tasks
    left = [j for j in svc.store.list_jobs(states=["PENDING"])]
    assert left == []
    # a second cancel finds them ended: nothing is done twice
    again = svc.signal_jobs(ME, {"ids": [str(jid)], "signal": None})
    assert again["done"] == []
    svc.store.close()
