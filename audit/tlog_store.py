"""The log as c2sp.org/tlog-tiles: written to a directory (``audit tiles DIR``) or served from the store
(the desk's ``/tlog/``), under the newest C2SP note checkpoint (SPEC.md "Tiles").

The tree is the log's own RFC 9162 tree, so tiles need no hashing beyond what the store keeps: level-0
tiles are the entries' stored leaf hashes, higher tiles the subtree hashes stored with the entry that
completed them. Entry bundles hold the entries' canonical bytes. An entry over 65,535 bytes cannot go in a
standard (uint16-prefixed) bundle: a bundle holding one is served only at ``signoff/entries/<N>[.p/<W>]``,
uint32-prefixed (:mod:`signoff.audit.tlog_tiles`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from signoff.audit.entry import parse_hash
from signoff.audit.errors import StoreError
from signoff.audit.tlog_tiles import (
    MAX_ENTRY_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    WriteReport,
    encode_alt_bundle,
    encode_bundle,
    write_tiles,
)
from signoff.audit.tree import LogTree
from signoff.audit.tree_head import Checkpoint

CHECKPOINT_TYPE = "text/plain; charset=utf-8"
TILE_TYPE = "application/octet-stream"
IMMUTABLE = "public, max-age=31536000, immutable"  # tiles and bundles: "caching headers SHOULD be long-lived"
MUTABLE = "public, max-age=5"  # the checkpoint: "SHOULD prevent caching beyond a few seconds"
_INDEX = r"((?:x\d{3}/)*\d{3})"
_TILE = re.compile(rf"tile/(\d|[1-5]\d|6[0-3])/{_INDEX}(?:\.p/([1-9]\d{{0,2}}))?")
_BUNDLE = re.compile(rf"(tile|signoff)/entries/{_INDEX}(?:\.p/([1-9]\d{{0,2}}))?")


class StoreSource:
    """A :class:`~signoff.audit.tlog_tiles.TileSource` over the store's first ``size`` entries."""

    def __init__(self, store: LogTree, size: int) -> None:
        self.store = store
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    def leaf_hashes(self, start: int, end: int) -> Iterator[bytes]:
        for _seq, stored, _raw in self.store.iter_raw(start, end):
            yield parse_hash(stored)

    def entries(self, start: int, end: int) -> Iterator[bytes]:
        for _seq, _stored, raw in self.store.iter_raw(start, end):
            yield raw


def newest_note(store: LogTree) -> Checkpoint:
    point = store.latest_checkpoint()
    if point is None or not point.note:
        raise StoreError("tiles: expected a C2SP note checkpoint to serve under, found none; run `audit checkpoint`")
    return point


def write_store_tiles(store: LogTree, directory: str | Path, *, durable: bool = True) -> WriteReport:
    """Bring ``directory`` to the newest note checkpoint, writing only what is new since the last run."""
    point = newest_note(store)
    return write_tiles(directory, StoreSource(store, point.size), point.note.encode("utf-8"), durable=durable)


@dataclass(frozen=True)
class Served:
    body: bytes
    content_type: str
    cache_control: str


def _index(text: str) -> int:
    return int(text.replace("x", "").replace("/", ""))


def serve(store: LogTree, path: str) -> Served | None:
    """The resource at ``path`` (relative to the tiles prefix) under the newest note checkpoint, or ``None``
    (a 404: no such path, or beyond what the checkpoint covers, or a bundle served at the other path)."""
    point = newest_note(store)
    if path == "checkpoint":
        return Served(point.note.encode("utf-8"), CHECKPOINT_TYPE, MUTABLE)
    tile = _TILE.fullmatch(path)
    if tile is not None:
        level, index = int(tile.group(1)), _index(tile.group(2))
        width = int(tile.group(3)) if tile.group(3) else TILE_WIDTH
        # Any tile within the checkpoint's tree: a partial one of any width is that of some smaller tree
        # (the partial tiles of every size a checkpoint was produced for, which the spec asks for, among them).
        if width > TILE_WIDTH or (index * TILE_WIDTH + width) << (TILE_HEIGHT * level) > point.size:
            return None
        span = TILE_HEIGHT * level
        first = index * TILE_WIDTH
        with store.read_engine.connect() as conn:
            hashes = store._node_hashes(conn, [(span, first + i) for i in range(width)])
        return Served(b"".join(hashes), TILE_TYPE, IMMUTABLE)
    bundle = _BUNDLE.fullmatch(path)
    if bundle is not None:
        index = _index(bundle.group(2))
        width = int(bundle.group(3)) if bundle.group(3) else TILE_WIDTH
        start, end = index * TILE_WIDTH, index * TILE_WIDTH + width
        if width > TILE_WIDTH or end > point.size:
            return None
        entries = [raw for _seq, _h, raw in store.iter_raw(start, end)]
        large = any(len(e) > MAX_ENTRY_SIZE for e in entries)
        if (bundle.group(1) == "signoff") != large:
            return None
        return Served(encode_alt_bundle(entries) if large else encode_bundle(entries), TILE_TYPE, IMMUTABLE)
    return None


__all__ = ["Served", "StoreSource", "newest_note", "serve", "write_store_tiles"]
