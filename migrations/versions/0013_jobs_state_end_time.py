"""jobs (state, end_time) replaces jobs (state) (issue 17): a cycle's "ended in the last
24 hours" and sacct's window read the ended jobs of a state by their end time (one range
per state) instead of every ended job ever stored; the old index was this one's prefix.

Revision ID: 0013
Revises: 0012
"""
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_state_end_time", ["state", "end_time"])
        batch_op.drop_index("ix_jobs_state")


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_state", ["state"])
        batch_op.drop_index("ix_jobs_state_end_time")
