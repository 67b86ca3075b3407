"""c2sp.org/tlog-tiles@v0.1.0: a log served as static tiles, entry bundles and a checkpoint.

Follows the spec as in the C2SP repository (pruning is not implemented: the minimum index is 0).

* paths: :func:`encode_index`, :func:`tile_path`, :func:`bundle_path` ("Merkle Tree", "Log entries");
* which tiles a tree has: :func:`tiles_for_size`; their contents: :func:`tile_contents`;
* entry bundles: :func:`encode_bundle` / :func:`decode_bundle` (big-endian uint16 length prefixes).
  An entry over 65,535 bytes cannot go in a bundle. A bundle holding one is not written at the
  standard path at all: its entries go to :func:`alt_bundle_path` (``signoff/entries/<N>[.p/<W>]``)
  with big-endian uint32 prefixes (:func:`encode_alt_bundle`), as the spec allows ("Logs MAY serve
  entries in different formats ... MUST serve the differently-encoded entries at a different URL").
  Readers try the standard path first;
* :func:`write_tiles`: an incremental, streaming directory writer. The verifying reader, over a
  directory or an ``http(s)://`` prefix, is :mod:`signoff.audit.tlog_tiles_reader`.
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from signoff.audit import tlog_checkpoint
from signoff.audit.c2sp_errors import TileFormatError, TileMismatch
from signoff.audit.merkle import HASH_SIZE, CompactRange, leaf_hash, root_from_leaves
from signoff.audit.signed_note import parse_note
from signoff.audit.tlog_checkpoint import Checkpoint

__all__ = [
    "MAX_ENTRY_SIZE",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "TileSource",
    "WriteReport",
    "alt_bundle_path",
    "bundle_path",
    "decode_alt_bundle",
    "decode_bundle",
    "encode_alt_bundle",
    "encode_bundle",
    "edge_range",
    "edge_root",
    "encode_index",
    "levels",
    "tile_contents",
    "tile_path",
    "tiles_for_size",
    "write_tiles",
]

TILE_WIDTH = 256
"""Full tiles "MUST be exactly 256 hashes wide, or 8,192 bytes"."""
TILE_HEIGHT = 8
MAX_ENTRY_SIZE = 0xFFFF
"""Largest entry a standard bundle holds (a uint16 length prefix)."""
MAX_ALT_ENTRY_SIZE = 0xFFFFFFFF


def encode_index(n: int) -> str:
    """``<N>``: "zero-padded 3-digit path elements. All but the last path element MUST begin with an `x`"."""
    if n < 0:
        raise TileFormatError(f"tile index: expected a non-negative integer, found {n}")
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


def _suffix(width: int) -> str:
    if not 1 <= width <= TILE_WIDTH:
        raise TileFormatError(f"tile width: expected 1..{TILE_WIDTH}, found {width}")
    return "" if width == TILE_WIDTH else f".p/{width}"  # "between 1 and 255, with no additional leading zeroes"


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """``tile/<L>/<N>[.p/<W>]``, ``<L>`` "a decimal ASCII integer between 0 and 63"."""
    if not 0 <= level <= 63:
        raise TileFormatError(f"tile level: expected 0..63, found {level}")
    return f"tile/{level}/{encode_index(index)}{_suffix(width)}"


def bundle_path(index: int, width: int = TILE_WIDTH) -> str:
    """``tile/entries/<N>[.p/<W>]`` ("Log entries")."""
    return f"tile/entries/{encode_index(index)}{_suffix(width)}"


def alt_bundle_path(index: int, width: int = TILE_WIDTH) -> str:
    """``signoff/entries/<N>[.p/<W>]``: the uint32-prefixed bundles holding an entry over 65,535 bytes."""
    return f"signoff/entries/{encode_index(index)}{_suffix(width)}"


@dataclass(frozen=True)
class Tile:
    """Tile ``index`` at ``level``, ``width`` hashes wide (256: full; fewer: partial)."""

    level: int
    index: int
    width: int = TILE_WIDTH

    @property
    def path(self) -> str:
        return tile_path(self.level, self.index, self.width)

    @property
    def partial(self) -> bool:
        return self.width < TILE_WIDTH


def levels(size: int) -> range:
    """The levels a tree of ``size`` leaves has tiles at (none for the empty tree)."""
    return range((size.bit_length() + TILE_HEIGHT - 1) // TILE_HEIGHT)


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile of a tree of ``size``: at level *l*, ``floor(s / 256**(l+1))`` full tiles and a partial one of
    ``floor(s / 256**l) mod 256`` hashes ("Partial Tiles"; "Empty tiles MUST NOT be served")."""
    tiles: list[Tile] = []
    for level in levels(size):
        full, width = size >> (TILE_HEIGHT * (level + 1)), (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        tiles.extend(Tile(level, n) for n in range(full))
        if width:
            tiles.append(Tile(level, full, width))
    return tiles


def tile_contents(leaf_hashes: Sequence[bytes], tile: Tile) -> bytes:
    """Hash *i* of tile *n* at level *l* is ``MTH(D[(n * 256 + i) * 256**l : (n * 256 + i + 1) * 256**l])``
    ("Merkle Tree"), from the leaf hashes in memory (the definition; :func:`write_tiles` streams)."""
    span = TILE_WIDTH**tile.level
    first = tile.index * TILE_WIDTH
    if (first + tile.width) * span > len(leaf_hashes):
        raise TileFormatError(
            f"tile {tile.path}: expected {(first + tile.width) * span} leaves, found {len(leaf_hashes)}"
        )
    if tile.level == 0:
        return b"".join(leaf_hashes[first : first + tile.width])
    return b"".join(
        root_from_leaves(leaf_hashes[(first + i) * span : (first + i + 1) * span]) for i in range(tile.width)
    )


def _encode(entries: Iterable[bytes], fmt: str, limit: int) -> bytes:
    out = bytearray()
    for i, entry in enumerate(entries):
        if len(entry) > limit:
            raise TileFormatError(f"bundle entry {i}: expected at most {limit} bytes, found {len(entry)}")
        out += struct.pack(fmt, len(entry)) + entry
    return bytes(out)


def _decode(data: bytes, fmt: str) -> list[bytes]:
    entries, offset, prefix = [], 0, struct.calcsize(fmt)
    while offset < len(data):
        if offset + prefix > len(data):
            raise TileFormatError(f"bundle: expected a {prefix}-byte length at offset {offset}, found the end")
        (length,) = struct.unpack_from(fmt, data, offset)
        offset += prefix
        if offset + length > len(data):
            raise TileFormatError(f"bundle: expected {length} entry bytes at offset {offset}, found the end")
        entries.append(data[offset : offset + length])
        offset += length
    return entries


def encode_bundle(entries: Iterable[bytes]) -> bytes:
    """ "sequences of big-endian uint16 length-prefixed log entries" ("Log entries")."""
    return _encode(entries, ">H", MAX_ENTRY_SIZE)


def decode_bundle(data: bytes) -> list[bytes]:
    return _decode(data, ">H")


def encode_alt_bundle(entries: Iterable[bytes]) -> bytes:
    """Our alternate format: big-endian uint32 length-prefixed entries, at :func:`alt_bundle_path`."""
    return _encode(entries, ">I", MAX_ALT_ENTRY_SIZE)


def decode_alt_bundle(data: bytes) -> list[bytes]:
    return _decode(data, ">I")


# -- the writer ---------------------------------------------------------------------------------


class TileSource(Protocol):
    """What :func:`write_tiles` reads: the log's size, its leaf hashes and its raw entries."""

    @property
    def size(self) -> int: ...

    def leaf_hashes(self, start: int, end: int) -> Iterable[bytes]: ...

    def entries(self, start: int, end: int) -> Iterable[bytes]: ...


def edge_range(edge: Sequence[Sequence[bytes]]) -> CompactRange:
    """The compact range of a tree from its right edge, the hashes of the partial tile at each level: the
    perfect subtrees of the top level's hashes come first, then the next level's (RFC 6962 §2.1)."""
    nodes: list[bytes] = []
    for hashes in reversed(edge):
        cr = CompactRange()
        for h in hashes:
            cr.append(h)
        nodes.extend(cr.hashes)
    return CompactRange(sum(len(hashes) << (TILE_HEIGHT * level) for level, hashes in enumerate(edge)), nodes)


def edge_root(edge: Sequence[Sequence[bytes]]) -> bytes:
    """MTH(D[n]) from the right edge (EMPTY_ROOT for the empty tree)."""
    return edge_range(edge).root()


@dataclass
class WriteReport:
    old_size: int
    size: int
    written: list[str] = field(default_factory=list)


class _Writer:
    def __init__(self, root: Path, durable: bool, report: WriteReport) -> None:
        self.root, self.durable, self.report = root, durable, report
        self.dirs: set[Path] = set()

    def write(self, rel: str, data: bytes) -> None:
        """Write once, atomically (a temporary file renamed); an existing file must hold the same bytes."""
        path = self.root / rel
        if path.exists() and rel != "checkpoint":
            if path.read_bytes() != data:
                raise TileMismatch(f"{path}: expected the bytes already there, found others (tiles are immutable)")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        with open(tmp, "wb") as out:
            out.write(data)
            if self.durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
        self.dirs.add(path.parent)
        self.report.written.append(rel)

    def sync_dirs(self) -> None:
        if self.durable:
            for d in self.dirs:
                fd = os.open(d, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self.dirs.clear()

    def bundle(self, index: int, entries: list[bytes]) -> None:
        if any(len(e) > MAX_ENTRY_SIZE for e in entries):
            if (self.root / bundle_path(index, len(entries))).exists():
                raise TileMismatch(f"bundle {index}: expected no standard bundle at {bundle_path(index, len(entries))}")
            self.write(alt_bundle_path(index, len(entries)), encode_alt_bundle(entries))
        else:
            self.write(bundle_path(index, len(entries)), encode_bundle(entries))


def _read_checkpoint(root: Path) -> Checkpoint | None:
    path = root / "checkpoint"
    if not path.exists():
        return None
    return tlog_checkpoint.parse(parse_note(path.read_bytes()).text)


def write_tiles(
    directory: str | Path, source: TileSource, checkpoint_note: bytes, *, durable: bool = True
) -> WriteReport:
    """Bring ``directory`` to the tree ``checkpoint_note`` signs, reading from ``source`` only what is new
    since the ``checkpoint`` already there. Full tiles and bundles are written once (an existing one
    must match), files atomically, ``checkpoint`` last, and nothing at all unless the source's leaves
    hash to the new checkpoint's root. Memory stays flat: one partial tile per level, one bundle.

    Serving is the web server's job: ``checkpoint`` as ``text/plain; charset=utf-8`` and not cached, tiles
    and bundles as ``application/octet-stream`` and immutable. A public log's checkpoint "MUST carry at
    least one Ed25519 signature by the log": the caller signs ``checkpoint_note``. Nothing is pruned."""
    root = Path(directory)
    new = tlog_checkpoint.parse(parse_note(checkpoint_note).text)
    old = _read_checkpoint(root)
    old_size = old.size if old else 0
    if old is not None and old.origin != new.origin:
        raise TileFormatError(f"{root}: expected a log with origin {new.origin!r}, found {old.origin!r}")
    if new.size < old_size:
        raise TileFormatError(f"checkpoint: expected a size of at least {old_size} (the one written), found {new.size}")
    if source.size < new.size:
        raise TileFormatError(f"source: expected at least {new.size} entries, found {source.size}")
    # The right edge at the old size: its partial tiles, written with the old checkpoint.
    edge: list[list[bytes]] = []
    for level in levels(old_size):
        width, index = (old_size >> (TILE_HEIGHT * level)) % TILE_WIDTH, old_size >> (TILE_HEIGHT * (level + 1))
        data = (root / tile_path(level, index, width)).read_bytes() if width else b""
        if len(data) != width * HASH_SIZE:
            raise TileMismatch(f"{tile_path(level, index, width)}: expected {width} hashes, found {len(data)} bytes")
        edge.append([data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)])
    if old is not None and edge_root(edge) != old.root:
        raise TileMismatch(f"{root}: expected partial tiles that hash to the checkpoint's root, found others")
    start = old_size - old_size % TILE_WIDTH
    bundle = list(source.entries(start, old_size))
    if [leaf_hash(e) for e in bundle] != (edge[0] if edge else []):
        raise TileMismatch(f"source: expected entries {start}..{old_size} to match the tiles written, found others")
    # First pass: the source's new leaves must hash to the new root before anything is written.
    cr = edge_range(edge)
    for h in source.leaf_hashes(old_size, new.size):
        cr.append(h)
    if cr.size != new.size or cr.root() != new.root:
        raise TileMismatch(f"source: expected leaves that hash to the checkpoint root at size {new.size}, found others")
    report = WriteReport(old_size, new.size)
    writer = _Writer(root, durable, report)
    size = old_size
    if not edge:
        edge.append([])
    pairs = zip(source.leaf_hashes(old_size, new.size), source.entries(old_size, new.size), strict=True)
    for leaf, entry in pairs:
        if leaf_hash(entry) != leaf:
            raise TileMismatch(f"source entry {size}: expected it to hash to its leaf hash, found another hash")
        size += 1
        bundle.append(entry)
        edge[0].append(leaf)
        level = 0
        # A full tile: write it, hash it into the level above. A partial tile "MUST NOT be hashed into a tile
        # at the level above": only full ones reach this loop.
        while len(edge[level]) == TILE_WIDTH:
            writer.write(tile_path(level, (size >> (TILE_HEIGHT * (level + 1))) - 1), b"".join(edge[level]))
            if len(edge) == level + 1:
                edge.append([])
            edge[level + 1].append(root_from_leaves(edge[level]))
            edge[level] = []
            level += 1
        if len(bundle) == TILE_WIDTH:
            writer.bundle((size >> TILE_HEIGHT) - 1, bundle)
            bundle = []
    if size != new.size:
        raise TileMismatch(f"source: expected {new.size - old_size} new entries, found {size - old_size}")
    for level, hashes in enumerate(edge):
        if hashes:  # "Logs MUST serve partial tiles corresponding to tree sizes for which a checkpoint was produced"
            writer.write(tile_path(level, size >> (TILE_HEIGHT * (level + 1)), len(hashes)), b"".join(hashes))
    if bundle:
        writer.bundle(size >> TILE_HEIGHT, bundle)
    writer.sync_dirs()
    writer.write(
        "checkpoint", checkpoint_note
    )  # "The Signed Tree Head MUST be served as a checkpoint at <prefix>/checkpoint"
    writer.sync_dirs()
    return report
