"""job_scripts: a spec's script, environment and argv move out of the jobs row (issue 17).

The environment made every job row about a page (kilobytes), and every listing and
scheduling cycle reads all active rows; PostgreSQL also parsed each spec to drop those keys
before sending it. They move to job_scripts, one row per job, or one per job array (keyed by
`array_job_id`: its tasks carry one spec). Existing rows are moved 2,000 at a time (and
PostgreSQL's statistics refreshed); the downgrade puts the keys back into each job's spec.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: the keys moved, as batchd.store.jobscripts.HEAVY_KEYS had them at this revision
HEAVY = ("script", "environment", "argv")
BATCH = 2000

_jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("array_job_id", sa.Integer),
                 sa.column("spec", sa.JSON))
_scripts = sa.table("job_scripts", sa.column("job_id", sa.Integer), sa.column("payload", sa.JSON))
_SET_SPEC = sa.update(_jobs).where(_jobs.c.id == sa.bindparam("b_id")).values(spec=sa.bindparam("b_spec"))


def _batches(conn: sa.Connection):
    last = -1
    while True:
        rows = conn.execute(sa.select(_jobs.c.id, _jobs.c.array_job_id, _jobs.c.spec)
                            .where(_jobs.c.id > last).order_by(_jobs.c.id).limit(BATCH)).all()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def upgrade() -> None:
    op.create_table("job_scripts",
                    sa.Column("job_id", sa.Integer(), autoincrement=False, nullable=False),
                    sa.Column("payload", sa.JSON(), nullable=False),
                    sa.PrimaryKeyConstraint("job_id"))
    conn = op.get_bind()
    stored: set[int] = set()
    for rows in _batches(conn):
        specs, scripts = [], []
        for jid, array_job_id, spec in rows:
            if not isinstance(spec, dict) or not any(k in spec for k in HEAVY):
                continue
            key = array_job_id if array_job_id is not None else jid
            if key not in stored:
                stored.add(key)
                scripts.append({"job_id": key, "payload": {k: spec[k] for k in HEAVY if k in spec}})
            specs.append({"b_id": jid, "b_spec": {k: v for k, v in spec.items() if k not in HEAVY}})
        if scripts:
            conn.execute(sa.insert(_scripts), scripts)
        if specs:
            conn.execute(_SET_SPEC, specs)
    if conn.dialect.name == "postgresql":
        # every row was rewritten: fresh statistics, or the planner takes the jobs table for
        # its old size until autovacuum comes by (a listing's joins then read every row)
        op.execute("ANALYZE jobs")
        op.execute("ANALYZE job_scripts")


def downgrade() -> None:
    conn = op.get_bind()
    for rows in _batches(conn):
        keys = {a if a is not None else j for j, a, _ in rows}
        found = dict(conn.execute(sa.select(_scripts.c.job_id, _scripts.c.payload)
                                  .where(_scripts.c.job_id.in_(sorted(keys)))).all())
        specs = []
        for jid, array_job_id, spec in rows:
            payload = found.get(array_job_id if array_job_id is not None else jid)
            if payload and isinstance(spec, dict):
                specs.append({"b_id": jid, "b_spec": {**spec, **payload}})
        if specs:
            conn.execute(_SET_SPEC, specs)
    op.drop_table("job_scripts")
