"""nodes.registered (when a node first registered: reports count its capacity from
then on), node_events (each node state change, for the report's down GPU-time) and
ledger_edges.gpu_up/gpu_down (the gres/gpu count of the runs starting, resp. ending, in
the hour: the report's bounds of what an account holds in an hour), filled from the
existing ledger

Existing nodes get as registration time the earliest start of a usage record or job on
them (node_list equal to the node's name), else their last heartbeat; and one event,
their current state at that time (a node DOWN or drained at the upgrade counts as down
from its registration: nothing older is known).

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=64), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_events")),
    )
    with op.batch_alter_table("node_events", schema=None) as batch_op:
        batch_op.create_index("ix_node_events_node_time", ["node", "time"])
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("registered", sa.Float(), nullable=True))
    op.execute(
        "UPDATE nodes SET registered = COALESCE("
        "(SELECT MIN(x.t) FROM (SELECT MIN(start_time) AS t FROM usage_records WHERE node_list = nodes.name "
        "UNION ALL SELECT MIN(start_time) FROM jobs WHERE node_list = nodes.name) AS x), heartbeat)")
    op.execute("UPDATE nodes SET registered = heartbeat WHERE registered > heartbeat")
    op.execute("INSERT INTO node_events (node, time, state, reason) SELECT name, registered, state, reason FROM nodes")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.alter_column("registered", existing_type=sa.Float(), nullable=False)
    # NOT NULL with a database default of 0: a plain ALTER TABLE ADD COLUMN on both
    # backends (changing the column afterwards would make SQLite's batch mode rebuild
    # the table, and drop its WITHOUT ROWID)
    with op.batch_alter_table("ledger_edges", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_up", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("gpu_down", sa.Float(), nullable=False, server_default="0"))
    q = '"'  # "user" is a reserved word on PostgreSQL
    for col, t in (("gpu_up", "start_s"), ("gpu_down", "end_s")):
        op.execute(f"UPDATE ledger_edges SET {col} = x.n FROM (SELECT account, {q}user{q} AS usr, gpu_type, "
                   f"{t} - {t} % 3600 AS hour, SUM(gpu_n) AS n FROM rollup_ledger "
                   "WHERE end_s > start_s AND gpu_n > 0 GROUP BY account, usr, gpu_type, hour) AS x "
                   f"WHERE ledger_edges.account = x.account AND ledger_edges.{q}user{q} = x.usr "
                   "AND ledger_edges.gpu_type = x.gpu_type AND ledger_edges.hour = x.hour AND ledger_edges.tres = ''")


def downgrade() -> None:
    with op.batch_alter_table("ledger_edges", schema=None) as batch_op:
        batch_op.drop_column("gpu_down")
        batch_op.drop_column("gpu_up")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("registered")
    with op.batch_alter_table("node_events", schema=None) as batch_op:
        batch_op.drop_index("ix_node_events_node_time")
    op.drop_table("node_events")
