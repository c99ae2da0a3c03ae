"""usage_daily (usage_hourly per day) and gpu_hourly (its GPU columns per hour and
account), filled from the existing usage_hourly

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_VALUES = ["cpu_s", "mem_s", "node_s", "billing_s", "gpu_s", "gpu_type_s", "gpu_busy_s", "gpu_measured_s",
           "amount"]
_Q = '"'  # "user" is a reserved word on PostgreSQL


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("account", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=1000), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("tres", sa.String(length=100), nullable=False),
        *[sa.Column(c, sa.Float(), nullable=False) for c in _VALUES],
        sa.PrimaryKeyConstraint("day", "account", "user", "node", "gpu_type", "tres", name=op.f("pk_usage_daily")),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "gpu_hourly",
        sa.Column("hour", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("account", sa.String(length=64), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("tres", sa.String(length=100), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.Column("gpu_type_s", sa.Float(), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "account", "gpu_type", "tres", name=op.f("pk_gpu_hourly")),
        sqlite_with_rowid=False,
    )
    user = f"{_Q}user{_Q}"
    sums = ", ".join(f"SUM({c})" for c in _VALUES)
    op.execute(f"INSERT INTO usage_daily (day, account, {user}, node, gpu_type, tres, {', '.join(_VALUES)}) "
               f"SELECT hour - hour % 86400, account, {user}, node, gpu_type, tres, {sums} FROM usage_hourly "
               f"GROUP BY hour - hour % 86400, account, {user}, node, gpu_type, tres")
    # what the rollup writes: the GPU columns of rows with GPU-seconds, the amount of
    # rows of another GPU TRES
    op.execute("INSERT INTO gpu_hourly (hour, account, gpu_type, tres, gpu_s, gpu_type_s, amount) "
               "SELECT hour, account, gpu_type, tres, SUM(gpu_s), SUM(gpu_type_s), 0.0 FROM usage_hourly "
               "WHERE tres = '' AND (gpu_s <> 0 OR gpu_type_s <> 0) GROUP BY hour, account, gpu_type, tres")
    op.execute("INSERT INTO gpu_hourly (hour, account, gpu_type, tres, gpu_s, gpu_type_s, amount) "
               "SELECT hour, account, gpu_type, tres, 0.0, 0.0, SUM(amount) FROM usage_hourly "
               "WHERE tres LIKE 'gres/gpu%' AND amount <> 0 GROUP BY hour, account, gpu_type, tres")


def downgrade() -> None:
    op.drop_table("gpu_hourly")
    op.drop_table("usage_daily")
