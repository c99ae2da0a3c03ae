"""nodes.registered (when a node first registered: reports count its capacity from
then on) and node_events (each node state change, for the report's down GPU-time)

Existing nodes get as registration time the earliest start of a usage record or job on
them (node_list equal to the node's name), else their last heartbeat; and one event,
their current state at that time (a node DOWN or drained at the upgrade counts as down
from its registration: nothing older is known).

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
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


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("registered")
    with op.batch_alter_table("node_events", schema=None) as batch_op:
        batch_op.drop_index("ix_node_events_node_time")
    op.drop_table("node_events")
