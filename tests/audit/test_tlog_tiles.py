"""c2sp.org/tlog-tiles: the spec's path and tile-count examples, tile contents from their definition,
the incremental directory writer against a one-shot write, and the verifying reader over a directory
and over real local HTTP, with tampering, big entries and a million entries in flat memory."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import pytest
from c2spkit import GeneratedSource, MemorySource, entry, log_signer, static_server

from signoff.audit.c2sp_errors import NoteNotVerified, TileFormatError, TileMismatch
from signoff.audit.merkle import CompactRange, leaf_hash, root_from_leaves
from signoff.audit.tlog_checkpoint import Checkpoint, sign_checkpoint
from signoff.audit.tlog_tiles import (
    MAX_ENTRY_SIZE,
    Tile,
    alt_bundle_path,
    bundle_path,
    decode_alt_bundle,
    decode_bundle,
    encode_alt_bundle,
    encode_bundle,
    encode_index,
    tile_contents,
    tile_path,
    tiles_for_size,
    write_tiles,
)
from signoff.audit.tlog_tiles_reader import open_log, read_entries

LOG = log_signer()
ENTRIES = [entry(i) for i in range(70_000)]
SOURCE = MemorySource(ENTRIES)
HASHES = [leaf_hash(e) for e in ENTRIES]


def note_for(entries: Sequence[bytes], size: int) -> bytes:
    root = root_from_leaves([leaf_hash(e) for e in entries[:size]])
    return sign_checkpoint(Checkpoint(LOG.name, size, root), [LOG])


def files(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


# -- paths and counts: the spec's examples ------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "encoded"), [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")]
)
def test_tile_index_is_3_digit_groups_with_x_prefixes(n: int, encoded: str) -> None:
    assert encode_index(n) == encoded


def test_tile_and_bundle_paths() -> None:
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(3, 1234067, 8) == "tile/3/x001/x234/067.p/8"
    assert bundle_path(1234067) == "tile/entries/x001/x234/067"
    assert bundle_path(2, 255) == "tile/entries/002.p/255"
    assert alt_bundle_path(2, 7) == "signoff/entries/002.p/7"
    assert Tile(1, 2, 17).path == "tile/1/002.p/17"


@pytest.mark.parametrize(("level", "width"), [(-1, 1), (64, 1), (0, 0), (0, 257)])
def test_tile_level_is_0_to_63_and_width_1_to_256(level: int, width: int) -> None:
    with pytest.raises(TileFormatError):
        tile_path(level, 0, width)


def test_spec_example_tree_of_70000() -> None:
    """273 full level 0 tiles, a partial level 0 tile of width 112, one full level 1 tile, a partial
    level 1 tile of width 17, and a partial level 2 tile of width 1."""
    tiles = tiles_for_size(70_000)
    assert sum(1 for t in tiles if t.level == 0 and not t.partial) == 273
    assert [t for t in tiles if t.partial] == [Tile(0, 273, 112), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert [t for t in tiles if t.level == 1 and not t.partial] == [Tile(1, 0)]
    assert len(tiles) == 277


def test_spec_example_tree_of_256() -> None:
    """A full level 0 tile and a partial level 1 tile of width 1."""
    assert tiles_for_size(256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert tiles_for_size(0) == []
    assert tiles_for_size(255) == [Tile(0, 0, 255)]


def test_tile_contents_follow_the_definition() -> None:
    """Level 0 holds leaf hashes; hash i of tile n at level l is MTH(D[(n*256+i)*256**l : (n*256+i+1)*256**l])."""
    assert tile_contents(HASHES, Tile(0, 3)) == b"".join(HASHES[768:1024])
    level1 = tile_contents(HASHES, Tile(1, 0))
    assert level1[32 * 5 : 32 * 6] == root_from_leaves(HASHES[5 * 256 : 6 * 256])
    assert level1[:32] == root_from_leaves(tile_contents(HASHES, Tile(0, 0))[i : i + 32] for i in range(0, 8192, 32))
    assert tile_contents(HASHES, Tile(2, 0, 1)) == root_from_leaves(HASHES[:65536])


def test_bundles_are_big_endian_uint16_length_prefixed() -> None:
    data = encode_bundle([b"a", b"", b"xyz"])
    assert data == b"\x00\x01a\x00\x00\x00\x03xyz"
    assert decode_bundle(data) == [b"a", b"", b"xyz"]
    assert decode_alt_bundle(encode_alt_bundle([b"a" * 70_000])) == [b"a" * 70_000]
    with pytest.raises(TileFormatError):
        encode_bundle([b"a" * (MAX_ENTRY_SIZE + 1)])
    with pytest.raises(TileFormatError):
        decode_bundle(b"\x00\x05abc")


# -- the writer -----------------------------------------------------------------------------------


def expected_files(size: int) -> dict[str, bytes]:
    out = {t.path: tile_contents(HASHES, t) for t in tiles_for_size(size)}
    for t in tiles_for_size(size):
        if t.level == 0:
            out[bundle_path(t.index, t.width)] = encode_bundle(ENTRIES[t.index * 256 : t.index * 256 + t.width])
    out["checkpoint"] = note_for(ENTRIES, size)
    return out


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 70_000])
def test_one_shot_write_gives_exactly_the_tiles_the_spec_defines(tmp_path: Path, size: int) -> None:
    report = write_tiles(tmp_path, SOURCE, note_for(ENTRIES, size))
    assert files(tmp_path) == expected_files(size)
    assert report.written[-1] == "checkpoint"  # written last
    assert list(read_entries(tmp_path, [LOG.verifier()])) == ENTRIES[:size]


def test_incremental_writes_match_a_one_shot_write_and_never_rewrite_a_full_tile(tmp_path: Path) -> None:
    inc, once = tmp_path / "inc", tmp_path / "once"
    write_tiles(inc, SOURCE, note_for(ENTRIES, 100))
    write_tiles(inc, SOURCE, note_for(ENTRIES, 300))
    full = {p: (inc / p).stat().st_ino for p in files(inc) if ".p" not in p and p != "checkpoint"}
    assert set(full) == {"tile/0/000", "tile/entries/000"}
    report = write_tiles(inc, SOURCE, note_for(ENTRIES, 70_000))
    assert not set(full) & set(report.written)
    assert all((inc / p).stat().st_ino == ino for p, ino in full.items())  # not rewritten
    write_tiles(once, SOURCE, note_for(ENTRIES, 70_000))
    a, b = files(inc), files(once)
    assert {p: v for p, v in a.items() if p in b} == b
    # What remains besides: the partial tiles of the earlier checkpoints (logs MAY delete them).
    assert set(a) - set(b) == {"tile/0/000.p/100", "tile/entries/000.p/100", "tile/0/001.p/44",
                               "tile/entries/001.p/44", "tile/1/000.p/1"}  # fmt: skip
    assert not [p for p in a if ".tmp" in p]  # atomic writes leave no temporary files
    assert list(read_entries(inc, [LOG.verifier()])) == ENTRIES


def test_rewriting_the_same_checkpoint_writes_only_the_checkpoint(tmp_path: Path) -> None:
    write_tiles(tmp_path, SOURCE, note_for(ENTRIES, 300))
    assert write_tiles(tmp_path, SOURCE, note_for(ENTRIES, 300)).written == ["checkpoint"]


def test_writer_refuses_leaves_that_do_not_hash_to_the_checkpoint_root_and_writes_nothing(tmp_path: Path) -> None:
    wrong = sign_checkpoint(Checkpoint(LOG.name, 300, root_from_leaves(HASHES[1:301])), [LOG])
    with pytest.raises(TileMismatch, match="root"):
        write_tiles(tmp_path, SOURCE, wrong)
    assert files(tmp_path) == {}


def test_writer_refuses_to_roll_back_or_change_the_origin(tmp_path: Path) -> None:
    write_tiles(tmp_path, SOURCE, note_for(ENTRIES, 300))
    with pytest.raises(TileFormatError, match="at least 300"):
        write_tiles(tmp_path, SOURCE, note_for(ENTRIES, 200))
    other = log_signer("example.com/other")
    note = sign_checkpoint(Checkpoint(other.name, 400, root_from_leaves(HASHES[:400])), [other])
    with pytest.raises(TileFormatError, match="origin"):
        write_tiles(tmp_path, SOURCE, note)


def test_writer_refuses_a_source_that_disagrees_with_the_tiles_written(tmp_path: Path) -> None:
    write_tiles(tmp_path, SOURCE, note_for(ENTRIES, 300))
    forked = [*ENTRIES[:290], b"forked", *ENTRIES[291:400]]
    with pytest.raises(TileMismatch, match="match the tiles"):
        write_tiles(tmp_path, MemorySource(forked), note_for(forked, 400))


def test_writer_checks_each_entry_hashes_to_its_leaf_hash(tmp_path: Path) -> None:
    class Lying(MemorySource):
        def entries(self, start: int, end: int) -> list[bytes]:
            return [b"lie" if i == 10 else e for i, e in zip(range(start, end), ENTRIES[start:end], strict=True)]

    with pytest.raises(TileMismatch, match="entry 10"):
        write_tiles(tmp_path, Lying(ENTRIES[:300]), note_for(ENTRIES, 300))


def test_entry_over_65535_bytes_goes_to_the_alternate_bundle_path_and_reads_back(tmp_path: Path) -> None:
    big = [*ENTRIES[:300]]
    big[5] = b"B" * 70_000  # full bundle 0
    big[299] = b"C" * (MAX_ENTRY_SIZE + 1)  # partial bundle 1
    source = MemorySource(big)
    write_tiles(tmp_path, source, note_for(big, 200))
    write_tiles(tmp_path, source, note_for(big, 300))
    written = files(tmp_path)
    assert "tile/entries/000" not in written and "signoff/entries/000" in written
    assert "tile/entries/001.p/44" not in written and "signoff/entries/001.p/44" in written
    assert "tile/entries/000.p/200" not in written and "signoff/entries/000.p/200" in written
    assert decode_alt_bundle(written["signoff/entries/000"])[5] == big[5]
    assert list(read_entries(tmp_path, [LOG.verifier()])) == big
    with static_server(tmp_path) as url:
        assert list(read_entries(url, [LOG.verifier()])) == big


# -- the reader -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiles")
    write_tiles(directory, SOURCE, note_for(ENTRIES, 70_000))
    return directory


def copy(written: Path, target: Path) -> Path:
    for rel, data in files(written).items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(data)
    return target


def test_reads_back_over_real_local_http(written: Path) -> None:
    with static_server(written) as url:
        log = open_log(url, [LOG.verifier()], origin=LOG.name)
        assert log.checkpoint.size == 70_000
        assert list(log.entries()) == ENTRIES
        assert list(log.entries(1000)) == ENTRIES[:1000]
        log.close()


def test_reader_verifies_the_checkpoint_signature(written: Path) -> None:
    with pytest.raises(NoteNotVerified):
        list(read_entries(written, [log_signer(seed="stranger").verifier()]))


@pytest.mark.parametrize("path", ["tile/0/005", "tile/0/273.p/112", "tile/1/000", "tile/1/001.p/17", "tile/2/000.p/1"])
def test_a_tampered_tile_is_detected(written: Path, tmp_path: Path, path: str) -> None:
    copy(written, tmp_path)
    data = bytearray((tmp_path / path).read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / path).write_bytes(bytes(data))
    with pytest.raises(TileMismatch):
        list(read_entries(tmp_path, [LOG.verifier()]))


@pytest.mark.parametrize("path", ["tile/entries/005", "tile/entries/273.p/112"])
def test_a_tampered_bundle_is_detected(written: Path, tmp_path: Path, path: str) -> None:
    copy(written, tmp_path)
    entries = decode_bundle((tmp_path / path).read_bytes())
    entries[3] = b"tampered"
    (tmp_path / path).write_bytes(encode_bundle(entries))
    with pytest.raises(TileMismatch, match="level-0 leaf"):
        list(read_entries(tmp_path, [LOG.verifier()]))
    (tmp_path / path).write_bytes(encode_bundle(entries[:-1]))
    with pytest.raises(TileMismatch, match="entries"):
        list(read_entries(tmp_path, [LOG.verifier()]))


def test_a_missing_tile_or_bundle_is_detected(written: Path, tmp_path: Path) -> None:
    copy(written, tmp_path)
    os.remove(tmp_path / "tile/entries/010")
    with pytest.raises(TileMismatch, match="bundle"):
        list(read_entries(tmp_path, [LOG.verifier()]))
    os.remove(tmp_path / "tile/0/010")
    with pytest.raises(TileMismatch, match="tile"):
        list(read_entries(tmp_path, [LOG.verifier()]))


def test_a_tampered_tile_is_detected_over_http(written: Path, tmp_path: Path) -> None:
    copy(written, tmp_path)
    (tmp_path / "tile/1/000").write_bytes(b"\x00" * 8192)
    with static_server(tmp_path) as url, pytest.raises(TileMismatch):
        list(read_entries(url, [LOG.verifier()]))


# -- flat memory ----------------------------------------------------------------------------------


def _peak_write(tmp_path: Path, size: int) -> int:
    cr = CompactRange()
    for h in GeneratedSource(size).leaf_hashes(0, size):
        cr.append(h)
    note = sign_checkpoint(Checkpoint(LOG.name, size, cr.root()), [LOG])
    tracemalloc.start()
    try:
        write_tiles(tmp_path / str(size), GeneratedSource(size), note, durable=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_writer_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    small, large = _peak_write(tmp_path, 10_000), _peak_write(tmp_path, 80_000)
    assert large < small + 200_000, (small, large)  # 70,000 more leaves held would be > 4 MB


@pytest.mark.slow
def test_a_million_entries_stream_through_writer_and_reader(tmp_path: Path) -> None:
    size = 1_000_000
    source = GeneratedSource(size)
    cr = CompactRange()
    for h in source.leaf_hashes(0, size):
        cr.append(h)
    write_tiles(tmp_path, source, sign_checkpoint(Checkpoint(LOG.name, size, cr.root()), [LOG]), durable=False)
    count = 0
    for i, data in enumerate(read_entries(tmp_path, [LOG.verifier()])):
        if i % 99_991 == 0:
            assert data == entry(i)
        count += 1
    assert count == size
