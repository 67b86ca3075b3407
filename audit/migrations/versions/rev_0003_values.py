"""Values beside the log (issue 20, SPEC.md "Values beside the log"): ``signoff_value``.

The personal data of reviews on a log with ``"values": "sealed"`` lives here, each row bound to
the log by the commitment an entry holds. A store made before gets the empty table; its log keeps
its values in its entries, as before.

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signoff_value",
        sa.Column("log", sa.String(), primary_key=True),
        sa.Column("commitment", sa.String(), primary_key=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("salt", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_index("ix_signoff_value_owner", "signoff_value", ["log", "owner"])


def downgrade() -> None:
    raise NotImplementedError("Signoff does not downgrade a store")
