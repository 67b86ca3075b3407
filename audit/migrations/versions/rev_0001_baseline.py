"""Baseline: the schema of signoff 0.1.0 (commit e1fe489), unchanged.

Stores made by 0.1.0 carry no version table; ``audit migrate`` stamps them at this revision.
New stores are created at the head directly (``SQLModel.metadata.create_all``, then stamped).

Revision ID: 0001
"""

from __future__ import annotations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change: 0.1.0's tables are this revision's."""


def downgrade() -> None:
    raise NotImplementedError("Signoff does not downgrade a store")
