"""An index of the entries by kind: ``signoff_entry (log, kind, seq)``.

``audit verify --incremental`` seeds its verifier with the trust entries before the kept checkpoint
(keys, reviewers, policies, witnesses, delegations, checkpoints), one kind at a time. Without this
index each kind was a scan of the whole entry table, so an incremental verify grew with the log
(201 new entries: 101 ms on a 10k-entry log, 224 ms on 20k; issue 24 §6); with it, it reads only those
entries. No row and no log entry changes.

Revision ID: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_signoff_entry_kind", "signoff_entry", ["log", "kind", "seq"])


def downgrade() -> None:
    raise NotImplementedError("Signoff does not downgrade a store")
