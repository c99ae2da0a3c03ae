"""nodes.reason_uid and nodes.reason_time: who set a node's reason and when (sinfo -R's
USER and TIMESTAMP, scontrol show node's Reason=... [user@time]); NULL without a reason.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason_uid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("reason_time", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("reason_time")
        batch_op.drop_column("reason_uid")
