"""jobs.submit_token (a client-made token per submission: a retried submission whose
reply was lost finds its job instead of making a second one) and jobs.launched_run
(the run the node agent last launched: a removed spool directory never starts a run
twice)

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("submit_token", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("launched_run", sa.Integer(), nullable=True))
        batch_op.create_index("ix_jobs_uid_submit_token", ["uid", "submit_token"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_uid_submit_token")
        batch_op.drop_column("launched_run")
        batch_op.drop_column("submit_token")
