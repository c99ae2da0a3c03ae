"""chargeback: prices, hourly usage rollups, rollup ledger, job efficiency (issue 6)

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'prices',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('tres', sa.String(length=100), nullable=False),
        sa.Column('per_hour', sa.String(length=40), nullable=False),
        sa.Column('currency', sa.String(length=8), nullable=False),
        sa.Column('valid_from', sa.Float(), nullable=False),
        sa.Column('valid_to', sa.Float(), nullable=True),
        sa.Column('created', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_prices')),
    )
    with op.batch_alter_table('prices', schema=None) as batch_op:
        batch_op.create_index('ix_prices_tres', ['tres'], unique=False)
    op.create_table(
        'usage_hourly',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('hour', sa.BigInteger(), nullable=False),
        sa.Column('account', sa.String(length=64), nullable=False),
        sa.Column('user', sa.String(length=64), nullable=False),
        sa.Column('node', sa.String(length=1000), nullable=False),
        sa.Column('gpu_type', sa.String(length=64), nullable=False),
        sa.Column('tres', sa.String(length=100), nullable=False),
        sa.Column('cpu_s', sa.Float(), nullable=False),
        sa.Column('mem_s', sa.Float(), nullable=False),
        sa.Column('node_s', sa.Float(), nullable=False),
        sa.Column('billing_s', sa.Float(), nullable=False),
        sa.Column('gpu_s', sa.Float(), nullable=False),
        sa.Column('gpu_type_s', sa.Float(), nullable=False),
        sa.Column('gpu_busy_s', sa.Float(), nullable=False),
        sa.Column('gpu_measured_s', sa.Float(), nullable=False),
        sa.Column('amount', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_hourly')),
        sa.UniqueConstraint('hour', 'account', 'user', 'node', 'gpu_type', 'tres',
                            name='uq_usage_hourly_key'),
    )
    op.create_table(
        'rollup_ledger',
        sa.Column('usage_id', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('rolled_at', sa.Float(), nullable=False),
        sa.Column('account', sa.String(length=64), nullable=False),
        sa.Column('user', sa.String(length=64), nullable=False),
        sa.Column('start_s', sa.BigInteger(), nullable=False),
        sa.Column('end_s', sa.BigInteger(), nullable=False),
        sa.Column('gpu_type', sa.String(length=64), nullable=False),
        sa.Column('cpu_n', sa.Float(), nullable=False),
        sa.Column('mem_n', sa.Float(), nullable=False),
        sa.Column('node_n', sa.Float(), nullable=False),
        sa.Column('billing_n', sa.Float(), nullable=False),
        sa.Column('gpu_n', sa.Float(), nullable=False),
        sa.Column('typed_n', sa.Float(), nullable=False),
        sa.Column('other', sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint('usage_id', name=op.f('pk_rollup_ledger')),
    )
    op.create_table(
        'job_efficiency',
        sa.Column('job_id', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('run', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('samples', sa.Integer(), nullable=False),
        sa.Column('first_time', sa.Float(), nullable=False),
        sa.Column('last_time', sa.Float(), nullable=False),
        sa.Column('cpu_pct_sum', sa.Float(), nullable=False),
        sa.Column('cpu_pct_max', sa.Float(), nullable=False),
        sa.Column('rss_mb_max', sa.Float(), nullable=False),
        sa.Column('gpu_samples', sa.Integer(), nullable=False),
        sa.Column('gpu_util_sum', sa.Float(), nullable=False),
        sa.Column('gpu_util_max', sa.Float(), nullable=False),
        sa.Column('gpu_mem_max_mb', sa.Float(), nullable=False),
        sa.Column('gpu_zero_s', sa.Float(), nullable=False),
        sa.Column('gpu_zero_max_s', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('job_id', 'run', name=op.f('pk_job_efficiency')),
    )


def downgrade() -> None:
    op.drop_table('job_efficiency')
    op.drop_table('rollup_ledger')
    op.drop_table('usage_hourly')
    with op.batch_alter_table('prices', schema=None) as batch_op:
        batch_op.drop_index('ix_prices_tres')
    op.drop_table('prices')
