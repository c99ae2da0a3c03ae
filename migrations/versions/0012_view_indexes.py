"""Indexes for the listings and the time windows (issue 17): jobs.end_time (squeue's
MinJobAge cut, sacct -S), jobs.submit_time (sacct -E), jobs.user and jobs.account
(-u, -A), usage_records.start_time (reports' and sacct's window ends; end_time has its
index since 0001).

Revision ID: 0012
Revises: 0011
"""
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_end_time", ["end_time"])
        batch_op.create_index("ix_jobs_submit_time", ["submit_time"])
        batch_op.create_index("ix_jobs_user", ["user"])
        batch_op.create_index("ix_jobs_account", ["account"])
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.create_index("ix_usage_records_start_time", ["start_time"])


def downgrade() -> None:
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_records_start_time")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_account")
        batch_op.drop_index("ix_jobs_user")
        batch_op.drop_index("ix_jobs_submit_time")
        batch_op.drop_index("ix_jobs_end_time")
