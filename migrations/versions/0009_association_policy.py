"""accounts.policy and associations.policy: Slurm's association limits per account and per
user (allowed and default QOS, allowed partitions, MaxJobs, MaxSubmitJobs, MaxTRES per job
and per user, GrpTRESMins budgets, GrpTRESRunMins; batchd.slurm.assocpolicy). NULL = none.

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy", sa.JSON(), nullable=True))
    with op.batch_alter_table("associations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("associations", schema=None) as batch_op:
        batch_op.drop_column("policy")
    with op.batch_alter_table("accounts", schema=None) as batch_op:
        batch_op.drop_column("policy")
