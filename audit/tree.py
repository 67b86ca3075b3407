"""The log's Merkle tree in the store, and its signed checkpoints (RFC 9162 §2.1).

Each entry stores the subtree hashes it completes, so a root or a proof costs O(log n)
reads and a checkpoint never rereads the log. The pure tree code is :mod:`signoff.audit.merkle`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Connection, Engine, select

from signoff.audit import merkle
from signoff.audit.driver import dbapi_cursor
from signoff.audit.entry import parse_hash
from signoff.audit.errors import StoreError
from signoff.audit.reader import LogReader
from signoff.audit.tables import CheckpointRow
from signoff.audit.tree_head import Checkpoint

HASH_SIZE = 32


class LogTree(LogReader):
    """Merkle roots, proofs and checkpoints over a :class:`LogReader`'s entries."""

    write_engine: Engine
    _compact_cache: tuple[int, str, merkle.CompactRange] | None

    # -- Merkle tree (RFC 9162 §2.1) -------------------------------------------------

    def _compact_at(self, conn: Connection, size: int, head: str) -> merkle.CompactRange:
        """The compact range at ``size``: from the cache when the head matches, else O(log n) reads."""
        cached = self._compact_cache
        if cached is not None and cached[0] == size and cached[1] == head:
            return cached[2].copy()
        hashes = self._node_hashes(conn, merkle.perfect_subtrees(0, size))
        return merkle.CompactRange(size, hashes)

    def _node_hashes(self, conn: Connection, nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        """Perfect subtree hashes: a leaf's own hash, or a node stored with the entry that completed it."""
        out = []
        for level, index in nodes:
            last_leaf = ((index + 1) << level) - 1
            cursor = dbapi_cursor(conn)
            cursor.execute(self._sql["node"], (self.log_id, last_leaf))
            row = cursor.fetchone()
            if row is None:
                raise StoreError(f"Merkle node ({level}, {index}): expected entry {last_leaf}, found none")
            if level == 0:
                out.append(parse_hash(row[0]))
            else:
                node = bytes(row[1])[(level - 1) * HASH_SIZE : level * HASH_SIZE]
                if len(node) != HASH_SIZE:
                    raise StoreError(f"Merkle node ({level}, {index}): expected a stored hash, found none")
                out.append(node)
        return out

    def _range_hashes(self, conn: Connection, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [merkle.subtree_root(self._node_hashes(conn, merkle.perfect_subtrees(s, e))) for s, e in ranges]

    def root(self, size: int | None = None) -> bytes:
        """The Merkle tree hash over the first ``size`` entries, from O(log n) stored nodes."""
        current = self.size()
        size = current if size is None else size
        if not 0 <= size <= current:
            raise StoreError(f"tree size: expected 0..{current}, found {size}")
        if size == 0:
            return merkle.EMPTY_ROOT
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, [(0, size)])[0]

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        current = self.size()
        size = current if size is None else size
        if not 0 <= seq < size <= current:
            raise StoreError(f"inclusion proof: expected 0 <= seq < size <= {current}, found seq {seq}, size {size}")
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, merkle.inclusion_path(seq, size))

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        current = self.size()
        new_size = current if new_size is None else new_size
        if not 0 < old_size <= new_size <= current:
            raise StoreError(
                f"consistency proof: expected 0 < old size <= new size <= {current}, found {old_size}, {new_size}"
            )
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, merkle.consistency_path(old_size, new_size))

    # -- checkpoints -------------------------------------------------------------------

    def checkpoints(self) -> list[Checkpoint]:
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(CheckpointRow.signed).where(CheckpointRow.log == self.log_id).order_by(CheckpointRow.size)  # type: ignore[call-overload]
            ).all()
        return [Checkpoint.from_json(json.loads(row[0])) for row in rows]

    def latest_checkpoint(self) -> Checkpoint | None:
        with self.read_engine.connect() as conn:
            row = conn.execute(
                select(CheckpointRow.signed)  # type: ignore[call-overload]
                .where(CheckpointRow.log == self.log_id)
                .order_by(CheckpointRow.size.desc())  # type: ignore[attr-defined]
                .limit(1)
            ).first()
        return None if row is None else Checkpoint.from_json(json.loads(row[0]))
