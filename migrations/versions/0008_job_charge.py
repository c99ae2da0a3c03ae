"""jobs.charge: what a running job's allocation is charged for, in the record form of
batchd.slurm.gres (the Slurm TRES plus a card-share key per MIG or shard part), as the
scheduler decided it at the start; the run's usage record copies it.

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
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("charge", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("charge")
