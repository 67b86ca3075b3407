"""c2sp.org/tlog-tiles@v0.1.0: the client side, reading a tiled log and checking it.

:func:`open_log` fetches the checkpoint from a directory or an ``http(s)://`` prefix (httpx) and
verifies it ("The text MUST be ignored unless the note is signed by a trusted key"), then the partial
tiles of its right edge against its root; :meth:`TiledLog.entries` fetches each full tile, checks it
hashes to its parent up to the root, fetches the entry bundle (the standard path first, then
:func:`~signoff.audit.tlog_tiles.alt_bundle_path`) and yields each entry once it hashes to its
level-0 leaf. Memory stays flat: one tile per level and one bundle.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import httpx

from signoff.audit.c2sp_errors import TileFormatError, TileMismatch
from signoff.audit.merkle import HASH_SIZE, leaf_hash, root_from_leaves
from signoff.audit.signed_note import MAX_NOTE_SIZE, Verifier
from signoff.audit.tlog_checkpoint import VerifiedCheckpoint, verify_checkpoint
from signoff.audit.tlog_tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    alt_bundle_path,
    bundle_path,
    decode_alt_bundle,
    decode_bundle,
    edge_root,
    levels,
    tile_path,
)

__all__ = ["MAX_BUNDLE_BYTES", "TiledLog", "open_log", "read_entries"]

MAX_BUNDLE_BYTES = 64 << 20
"""Largest entry bundle fetched by default."""


class _Fetch(Protocol):
    def __call__(self, path: str, limit: int) -> bytes | None: ...


def _directory(root: Path) -> _Fetch:
    def fetch(path: str, limit: int) -> bytes | None:
        target = root / path
        if not target.is_file():
            return None
        if target.stat().st_size > limit:
            raise TileFormatError(f"{target}: expected at most {limit} bytes, found {target.stat().st_size}")
        return target.read_bytes()

    return fetch


def _http(prefix: str, client: httpx.Client) -> _Fetch:
    def fetch(path: str, limit: int) -> bytes | None:
        url = f"{prefix.rstrip('/')}/{path}"
        with client.stream("GET", url) as response:
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise TileFormatError(f"{url}: expected 200 or 404, found {response.status_code}")
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > limit:
                    raise TileFormatError(f"{url}: expected at most {limit} bytes, found more")
        return bytes(data)

    return fetch


class TiledLog:
    """A tiled log whose checkpoint verified; :meth:`entries` yields entries once they hash up to its root."""

    def __init__(self, fetch: _Fetch, checkpoint: VerifiedCheckpoint, client: httpx.Client | None = None) -> None:
        self._fetch, self.verified, self._client = fetch, checkpoint, client
        self.checkpoint = checkpoint.checkpoint
        size = self.checkpoint.size
        # "Clients MUST NOT fetch arbitrary partial tiles without verifying a checkpoint with a size that
        # requires their existence": these are the partial tiles of the verified checkpoint's size.
        self._edge: list[list[bytes]] = []
        for level in levels(size):
            width, index = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH, size >> (TILE_HEIGHT * (level + 1))
            self._edge.append(self._hashes(tile_path(level, index, width), width) if width else [])
        if edge_root(self._edge) != self.checkpoint.root:
            raise TileMismatch(f"partial tiles at size {size}: expected them to hash to the checkpoint root, found not")
        self._cache: dict[int, tuple[int, list[bytes]]] = {}

    def _hashes(self, path: str, width: int) -> list[bytes]:
        data = self._fetch(path, TILE_WIDTH * HASH_SIZE)
        if data is None or len(data) != width * HASH_SIZE:
            found = "nothing" if data is None else f"{len(data)} bytes"
            raise TileMismatch(f"tile {path}: expected {width * HASH_SIZE} bytes, found {found}")
        return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]

    def _tile(self, level: int, index: int) -> list[bytes]:
        """Tile (level, index) of the checkpoint's tree, checked against its parent up to the root."""
        size = self.checkpoint.size
        full = size >> (TILE_HEIGHT * (level + 1))
        if index == full:
            return self._edge[level]
        cached = self._cache.get(level)
        if cached and cached[0] == index:
            return cached[1]
        hashes = self._hashes(tile_path(level, index), TILE_WIDTH)
        if root_from_leaves(hashes) != self._tile(level + 1, index // TILE_WIDTH)[index % TILE_WIDTH]:
            raise TileMismatch(f"tile {tile_path(level, index)}: expected it to hash to its parent, found another hash")
        self._cache[level] = (index, hashes)
        return hashes

    def _bundle(self, index: int, width: int, limit: int) -> list[bytes]:
        data = self._fetch(bundle_path(index, width), limit)
        if data is not None:
            return decode_bundle(data)
        data = self._fetch(alt_bundle_path(index, width), limit)
        if data is None:
            raise TileMismatch(f"bundle {bundle_path(index, width)}: expected it (or {alt_bundle_path(index, width)})")
        return decode_alt_bundle(data)

    def entries(self, size: int | None = None, *, max_bundle: int = MAX_BUNDLE_BYTES) -> Iterator[bytes]:
        """The first ``size`` (default: all) raw entries, in order, each checked against its leaf hash."""
        total = self.checkpoint.size
        size = total if size is None else size
        if not 0 <= size <= total:
            raise TileFormatError(f"size: expected 0..{total} (the checkpoint's), found {size}")
        for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
            hashes = self._tile(0, n)
            bundle = self._bundle(n, len(hashes), max_bundle)
            if len(bundle) != len(hashes):
                raise TileMismatch(f"bundle {n}: expected {len(hashes)} entries, found {len(bundle)}")
            for i, (entry, h) in enumerate(zip(bundle, hashes, strict=True)):
                if n * TILE_WIDTH + i >= size:
                    return
                if leaf_hash(entry) != h:
                    raise TileMismatch(
                        f"entry {n * TILE_WIDTH + i}: expected it to hash to its level-0 leaf, found not"
                    )
                yield entry

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def open_log(
    location: str | Path,
    verifiers: Sequence[Verifier],
    *,
    origin: str | None = None,
    client: httpx.Client | None = None,
) -> TiledLog:
    """Open a tiled log in a directory or at an ``http(s)://`` prefix: fetch and verify its checkpoint
    ("MUST be ignored unless the note is signed by a trusted key") and its partial tiles."""
    own: httpx.Client | None = None
    if isinstance(location, str) and location.startswith(("http://", "https://")):
        if client is None:
            own = client = httpx.Client(timeout=30, headers={"Accept-Encoding": "gzip, identity"})
        fetch = _http(location, client)
    else:
        fetch = _directory(Path(location))
    try:
        note = fetch("checkpoint", MAX_NOTE_SIZE)
        if note is None:
            raise TileFormatError(f"{location}: expected a checkpoint, found none")
        return TiledLog(fetch, verify_checkpoint(note, verifiers, origin=origin), own)
    except BaseException:
        if own is not None:
            own.close()
        raise


def read_entries(
    location: str | Path, verifiers: Sequence[Verifier], *, origin: str | None = None, size: int | None = None,
    client: httpx.Client | None = None,
) -> Iterator[bytes]:  # fmt: skip
    """The verified entries of the tiled log at ``location`` (see :func:`open_log`), in order."""
    log = open_log(location, verifiers, origin=origin, client=client)
    try:
        yield from log.entries(size)
    finally:
        log.close()
