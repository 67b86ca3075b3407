"""Resume leases: ``signoff_resume_lease`` (README, "Running it for real"; :mod:`signoff.audit.resume_leases`).

A resumer that claimed a frontier holds a lease on it while it sends it, and renews it; another
worker takes the frontier over only once the holder is gone. No entry and no projection row
changes; a store made before gets the empty table.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signoff_resume_lease",
        sa.Column("log", sa.String(), primary_key=True),
        sa.Column("frontier", sa.String(), primary_key=True),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("until", sa.Float(), nullable=False),
    )
    op.create_index("ix_signoff_resume_lease_holder", "signoff_resume_lease", ["log", "holder"])


def downgrade() -> None:
    raise NotImplementedError("Signoff does not downgrade a store")
