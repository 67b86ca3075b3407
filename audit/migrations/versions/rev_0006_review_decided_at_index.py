"""An index of the reviews by decision time: ``signoff_review (log, decided_at, id)``.

A desk serving several logs lists their decisions newest first by time (the one order the logs share)
for its Decided page and the queue's "Just decided" panel, and pages them by ``(decided_at, id)``. Without
this index each log's decided rows were all read and sorted for every such page: 59 ms per log of 50,000
decisions, after every write (issue 24 §5); with it, a page reads about as many rows as it shows. It costs
a decision about 2% more CPU (one more index entry per review). No row and no log entry changes.

Revision ID: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_signoff_review_decided_at", "signoff_review", ["log", "decided_at", "id"])


def downgrade() -> None:
    raise NotImplementedError("Signoff does not downgrade a store")
