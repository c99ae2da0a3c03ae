"""ledger_edges: the rollup ledger summed as run edges per hour (the report's per-job
side without a pass over every ledger row), filled from the existing ledger

Revision ID: 0005
Revises: 0004
"""
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_WIDE = ("cpu", "mem", "node", "billing", "typed")  # ledger column <x>_n -> edges <x>_n, <x>_ns
_VALUES = [f"{x}{s}" for x in _WIDE for s in ("_n", "_ns")] + ["amount_n", "amount_ns"]


def upgrade() -> None:
    op.create_table(
        "ledger_edges",
        sa.Column("hour", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("account", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("tres", sa.String(length=100), nullable=False),
        *[sa.Column(c, sa.Float(), nullable=False) for c in _VALUES],
        sa.PrimaryKeyConstraint("hour", "account", "user", "gpu_type", "tres", name=op.f("pk_ledger_edges")),
        sqlite_with_rowid=False,
    )
    _fill_from_ledger()


def _fill_from_ledger() -> None:
    """The edges of every run already in the ledger (the rollup writes them from now on):
    the common TRES in SQL, the few runs with other TRES (JSON) here."""
    q = '"'  # "user" is a reserved word on PostgreSQL
    sides = []
    for sign, t in (("", "start_s"), ("-", "end_s")):
        cols = ", ".join(f"{sign}{x}_n AS {x}_n, {sign}{x}_n * ({t} % 3600) AS {x}_ns" for x in _WIDE)
        sides.append(f"SELECT {t} - {t} % 3600 AS hour, account, {q}user{q} AS usr, gpu_type, {cols} "
                     "FROM rollup_ledger WHERE end_s > start_s")
    sums = ", ".join(f"SUM({c})" for c in _VALUES[:-2])
    op.execute(f"INSERT INTO ledger_edges (hour, account, {q}user{q}, gpu_type, tres, {', '.join(_VALUES)}) "
               f"SELECT hour, account, usr, gpu_type, '', {sums}, 0.0, 0.0 "
               f"FROM ({' UNION ALL '.join(sides)}) AS e GROUP BY hour, account, usr, gpu_type")
    ledger = sa.table("rollup_ledger", sa.column("account"), sa.column("user"), sa.column("gpu_type"),
                      sa.column("start_s"), sa.column("end_s"), sa.column("other", sa.JSON()))
    rows: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    bind = op.get_bind()
    for acct, user, gtype, s, e, other in bind.execute(
            sa.select(ledger.c.account, ledger.c.user, ledger.c.gpu_type, ledger.c.start_s, ledger.c.end_s,
                      ledger.c.other).where(ledger.c.other.is_not(None), ledger.c.end_s > ledger.c.start_s)):
        for name, n in (other or {}).items():
            for sign, t in ((1.0, int(s)), (-1.0, int(e))):
                v = rows[(t - t % 3600, acct, user, gtype, name)]
                v[0] += sign * float(n)
                v[1] += sign * float(n) * (t % 3600)
    if rows:
        edges = sa.table("ledger_edges", *[sa.column(c) for c in ("hour", "account", "user", "gpu_type", "tres",
                                                                 *_VALUES)])
        zero = {c: 0.0 for c in _VALUES}
        bind.execute(edges.insert(), [dict(zero, hour=k[0], account=k[1], user=k[2], gpu_type=k[3], tres=k[4],
                                           amount_n=v[0], amount_ns=v[1]) for k, v in rows.items()])


def downgrade() -> None:
    op.drop_table("ledger_edges")
