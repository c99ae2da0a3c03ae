"""A spec's script, environment and argv kept in job_scripts (batchd.store.jobscripts), on
both stores: the jobs row holds the light part, every whole-job read joins them back, an
array's tasks share one row, updates never lose them, and migration 0015 moves (and its
downgrade restores) the rows of a database from before it."""

import json
import time

from alembic import command
from sqlalchemy import insert, select, text

from batchd.model import Job
from batchd.store import Store
from batchd.store.jobviews import JobQuery, list_view_jobs
from batchd.store.migrate import _alembic_config, upgrade
from batchd.store.tables import JobRow

ENV = {f"VAR_{i}": "x" * 40 for i in range(60)}
SPEC = {"script": "#!/bin/sh\necho hi\n", "environment": ENV, "argv": ["a", "b"], "workdir": "/srv/w",
        "nodelist": "gpu1", "name": "j"}


def _job(jid, **kw):
    base = dict(id=jid, name="j", user="alice", uid=1000, gid=1000, account="default", partition="gpu",
                qos="normal", state="PENDING", submit_time=time.time(), spec=dict(SPEC),
                request={"tasks": 1, "per_task": {"cpu": 1}})
    base.update(kw)
    return Job(**base)


def _stored_specs(store):
    with store.core_read() as conn:
        specs = {i: (json.loads(s) if isinstance(s, str) else s)
                 for i, s in conn.execute(text("SELECT id, spec FROM jobs")).all()}
        scripts = {i: (json.loads(p) if isinstance(p, str) else p)
                   for i, p in conn.execute(text("SELECT job_id, payload FROM job_scripts")).all()}
    return specs, scripts


def test_the_row_is_light_and_every_whole_read_is_whole(store):
    store.insert_jobs([_job(1)])
    specs, scripts = _stored_specs(store)
    assert specs[1] == {"workdir": "/srv/w", "nodelist": "gpu1", "name": "j"}
    assert scripts == {1: {"script": SPEC["script"], "environment": ENV, "argv": ["a", "b"]}}
    assert store.get_job(1).spec == SPEC
    assert store.list_jobs()[0].spec == SPEC
    # the views read the light part only, and say the same about it
    view = list_view_jobs(store, JobQuery(), ["workdir", "nodelist"], ["tasks", "per_task"])
    assert view[0].spec == {"workdir": "/srv/w", "nodelist": "gpu1"}


def test_a_submission_with_a_token_is_whole_when_repeated(store):
    made, repeated = store.store_submission(1, lambda first: [_job(first, submit_token="tok")], 1000, "tok")
    again, repeated = store.store_submission(1, lambda first: [_job(first, submit_token="tok")], 1000, "tok")
    assert repeated and again[0].id == made[0].id and again[0].spec == SPEC
    assert store.find_submission(1000, "tok")[0].spec == SPEC
    assert store.insert_submission([_job(99, submit_token="tok")], 1000, "tok")[0].spec == SPEC


def test_an_arrays_tasks_share_one_row(store):
    shared = dict(SPEC)

    def build(first):
        return [_job(first + i, spec=shared, array_job_id=first, array_task_id=i) for i in range(50)]

    made, _ = store.store_submission(50, build, 1000, None)
    specs, scripts = _stored_specs(store)
    assert list(scripts) == [made[0].id]
    assert all("environment" not in s for s in specs.values()) and len(specs) == 50
    assert all(j.spec == SPEC for j in store.list_jobs(array_job_ids=[made[0].id]))
    assert store.get_job(made[-1].id).spec == SPEC
    assert made[3].spec is shared  # the submission's own jobs are left as built


def test_updates_keep_the_heavy_part_and_change_the_light(store):
    store.insert_jobs([_job(1), _job(2)])
    whole = store.get_job(1).spec
    assert store.update_job(1, ("PENDING",), spec={**whole, "nodelist": "gpu2"})
    assert store.get_job(1).spec == {**SPEC, "nodelist": "gpu2"}
    store.update_jobs([(2, ("PENDING",), {"spec": {**whole, "exclude": "gpu3"}})])
    assert store.get_job(2).spec == {**SPEC, "exclude": "gpu3"}
    specs, scripts = _stored_specs(store)
    assert "environment" not in specs[1] and "script" not in specs[2]
    assert scripts[1]["environment"] == ENV and scripts[2]["environment"] == ENV


def test_a_spec_without_heavy_keys_has_no_row(store):
    store.insert_jobs([_job(1, spec={"workdir": "/w"})])
    assert _stored_specs(store)[1] == {}
    assert store.get_job(1).spec == {"workdir": "/w"}


def test_migration_0015_moves_the_rows_and_its_downgrade_puts_them_back(db_url):
    s = Store(db_url)
    try:
        upgrade(s.engine, "0014")
        rows = [{c: getattr(j, c) for c in JobRow.__table__.c.keys()}
                for j in ([_job(i) for i in range(1, 2500)]  # more than one batch
                          + [_job(3000 + i, array_job_id=3000, array_task_id=i) for i in range(5)]
                          + [_job(4000, spec={"workdir": "/w"}), _job(4001, spec=["not", "an", "object"])])]
        with s.engine.begin() as conn:
            conn.execute(insert(JobRow.__table__), rows)
        upgrade(s.engine)
        assert s.get_job(1).spec == SPEC and s.get_job(2499).spec == SPEC and s.get_job(3004).spec == SPEC
        assert s.get_job(4000).spec == {"workdir": "/w"} and s.get_job(4001).spec == ["not", "an", "object"]
        specs, scripts = _stored_specs(s)
        assert len(scripts) == 2499 + 1 and 3000 in scripts and 3001 not in scripts
        assert not any(isinstance(v, dict) and "environment" in v for v in specs.values())
        cfg = _alembic_config()
        with s.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0014")
        with s.engine.connect() as conn:
            back = {i: (json.loads(v) if isinstance(v, str) else v)
                    for i, v in conn.execute(select(JobRow.__table__.c.id, text("spec")).select_from(
                        JobRow.__table__)).all()}
        assert back[1] == SPEC and back[3003] == SPEC and back[4000] == {"workdir": "/w"}
    finally:
        s.close()
