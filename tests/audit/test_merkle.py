"""Tests for ``audit.merkle`` (RFC 9162 §2.1).

Three layers: the published RFC 6962 / transparency-dev/merkle test vectors, an
exhaustive and a hypothesis comparison against a naive recursive implementation
written straight from the RFC 9162 definitions, and tampered proofs that must fail.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.audit.merkle import (
    EMPTY_ROOT,
    CompactRange,
    ProofError,
    consistency_path,
    consistency_proof,
    inclusion_path,
    inclusion_proof,
    leaf_hash,
    node_hash,
    perfect_subtrees,
    root_from_leaves,
    subtree_root,
    verify_consistency,
    verify_inclusion,
)

# ---------------------------------------------------------------------------------------
# Published vectors.
#
# Leaf inputs, node hashes, root hashes and compact ranges: transparency-dev/merkle
# testonly/constants.go (LeafInputs, NodeHashes, RootHashes, CompactTrees), the same data
# as google/certificate-transparency's merkle_tree_test / RFC 6962 reference vectors.
# Inclusion and consistency proofs: transparency-dev/merkle proof/verify_test.go
# (inclusionProofs, consistencyProofs; there "leaf" is 1-based, converted here to 0-based).
# ---------------------------------------------------------------------------------------

LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]

NODE_HASHES = [
    [
        bytes.fromhex(h)
        for h in [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
            "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
        ]
    ],
    [
        bytes.fromhex(h)
        for h in [
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        ]
    ],
    [
        bytes.fromhex(h)
        for h in [
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ]
    ],
    [bytes.fromhex("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")],
]

ROOT_HASHES = [
    bytes.fromhex(h)
    for h in [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
]

_NH = NODE_HASHES
COMPACT_TREES: list[list[bytes]] = [
    [],
    [_NH[0][0]],
    [_NH[1][0]],
    [_NH[1][0], _NH[0][2]],
    [_NH[2][0]],
    [_NH[2][0], _NH[0][4]],
    [_NH[2][0], _NH[1][2]],
    [_NH[2][0], _NH[1][2], _NH[0][6]],
    [_NH[3][0]],
]

# (0-based index, size, proof) from proof/verify_test.go inclusionProofs (1-based leaf there).
INCLUSION_PROOFS: list[tuple[int, int, list[bytes]]] = [
    (0, 1, []),
    (
        0,
        8,
        [
            bytes.fromhex("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        5,
        8,
        [
            bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            bytes.fromhex("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            bytes.fromhex("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        3,
        [bytes.fromhex("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")],
    ),
    (
        1,
        5,
        [
            bytes.fromhex("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]

# (old_size, new_size, proof) from proof/verify_test.go consistencyProofs.
CONSISTENCY_PROOFS: list[tuple[int, int, list[bytes]]] = [
    (1, 1, []),
    (
        1,
        8,
        [
            bytes.fromhex("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            bytes.fromhex("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            bytes.fromhex("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            bytes.fromhex("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        5,
        [
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
    (
        6,
        7,
        [
            bytes.fromhex("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            bytes.fromhex("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            bytes.fromhex("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
]

# proof/verify_test.go sha256SomeHash, used there as a garbage hash.
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")

VECTOR_LEAVES = [leaf_hash(d) for d in LEAF_INPUTS]

# ---------------------------------------------------------------------------------------
# Naive reference, straight from the recursive definitions of RFC 9162 §2.1.
# Inputs are leaf hashes, so MTH({d(0)}) is d(0) itself.
# ---------------------------------------------------------------------------------------


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def naive_mth(d: Sequence[bytes]) -> bytes:
    """MTH(D[n]), RFC 9162 §2.1.1."""
    n = len(d)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return d[0]
    k = _k(n)
    return node_hash(naive_mth(d[:k]), naive_mth(d[k:]))


def naive_path(m: int, d: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]), RFC 9162 §2.1.3.1."""
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return naive_path(m, d[:k]) + [naive_mth(d[k:])]
    return naive_path(m - k, d[k:]) + [naive_mth(d[:k])]


def naive_subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b), RFC 9162 §2.1.4.1."""
    n = len(d)
    if m == n:
        return [] if b else [naive_mth(d)]
    k = _k(n)
    if m <= k:
        return naive_subproof(m, d[:k], b) + [naive_mth(d[k:])]
    return naive_subproof(m - k, d[k:], False) + [naive_mth(d[:k])]


def naive_proof(m: int, d: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) = SUBPROOF(m, D[n], true), RFC 9162 §2.1.4.1 (0 < m <= n)."""
    return naive_subproof(m, d, True)


MAX_SIZE = 300
LEAVES = [leaf_hash(str(i).encode()) for i in range(MAX_SIZE)]


@functools.cache
def naive_root(size: int) -> bytes:
    return naive_mth(LEAVES[:size])


sizes = st.integers(min_value=1, max_value=MAX_SIZE)
FAST = settings(max_examples=150, deadline=None)


# ---------------------------------------------------------------------------------------
# Published vectors.
# ---------------------------------------------------------------------------------------


def test_hash_primitives_match_vectors() -> None:
    assert ROOT_HASHES[0] == EMPTY_ROOT
    assert NODE_HASHES[0] == VECTOR_LEAVES
    for level in range(1, len(NODE_HASHES)):
        for index, h in enumerate(NODE_HASHES[level]):
            assert node_hash(NODE_HASHES[level - 1][2 * index], NODE_HASHES[level - 1][2 * index + 1]) == h


@pytest.mark.parametrize("size", range(len(ROOT_HASHES)))
def test_root_vectors(size: int) -> None:
    assert root_from_leaves(VECTOR_LEAVES[:size]) == ROOT_HASHES[size]
    assert naive_mth(VECTOR_LEAVES[:size]) == ROOT_HASHES[size]


def test_compact_range_vectors() -> None:
    cr = CompactRange()
    assert cr.hashes == COMPACT_TREES[0]
    assert cr.root() == ROOT_HASHES[0]
    seen: set[tuple[int, int]] = set()
    for size, leaf in enumerate(VECTOR_LEAVES, start=1):
        for level, index, h in cr.append(leaf):
            assert h == NODE_HASHES[level][index], (level, index)
            seen.add((level, index))
        assert cr.size == size
        assert cr.hashes == COMPACT_TREES[size]
        assert cr.root() == ROOT_HASHES[size]
    assert seen == {(lv, i) for lv in range(1, len(NODE_HASHES)) for i in range(len(NODE_HASHES[lv]))}


def _inclusion_probes(
    index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes
) -> list[tuple[str, int, int, bytes, list[bytes], bytes]]:
    """corruptInclusionProof from transparency-dev/merkle proof/verify_test.go."""
    probes = [
        ("index - 1", index - 1, size, leaf, proof, root),
        ("index + 1", index + 1, size, leaf, proof, root),
        ("index ^ 2", index ^ 2, size, leaf, proof, root),
        ("size * 2", index, size * 2, leaf, proof, root),
        ("size // 2", index, size // 2, leaf, proof, root),
        ("wrong leaf", index, size, b"WrongLeaf", proof, root),
        ("empty root", index, size, leaf, proof, EMPTY_ROOT),
        ("random root", index, size, leaf, proof, SOME_HASH),
        ("trailing garbage", index, size, leaf, [*proof, b""], root),
        ("trailing root", index, size, leaf, [*proof, root], root),
        ("preceding garbage", index, size, leaf, [b"", *proof], root),
        ("preceding root", index, size, leaf, [root, *proof], root),
    ]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 8]) + wrong[i][1:]
        probes.append((f"modified proof[{i}] bit 3", index, size, leaf, wrong, root))
    if proof:
        probes.append(("removed component", index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append(("inserted component", index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root))
    return probes


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_PROOFS)
def test_inclusion_vectors(index: int, size: int, proof: list[bytes]) -> None:
    assert inclusion_proof(VECTOR_LEAVES, index, size) == proof
    assert naive_path(index, VECTOR_LEAVES[:size]) == proof
    leaf, root = VECTOR_LEAVES[index], ROOT_HASHES[size]
    verify_inclusion(leaf, index, size, proof, root)
    for desc, i, n, lf, p, r in _inclusion_probes(index, size, proof, root, leaf):
        with pytest.raises(ProofError):
            verify_inclusion(lf, i, n, p, r)
            pytest.fail(f"verified a tampered inclusion proof: {desc}")


def _consistency_probes(
    m: int, n: int, r1: bytes, r2: bytes, proof: list[bytes]
) -> list[tuple[str, int, int, bytes, bytes, list[bytes]]]:
    """corruptConsistencyProof from transparency-dev/merkle proof/verify_test.go."""
    probes = [
        ("size1 - 1", m - 1, n, r1, r2, proof),
        ("size1 + 1", m + 1, n, r1, r2, proof),
        ("size1 ^ 2", m ^ 2, n, r1, r2, proof),
        ("size2 * 2", m, n * 2, r1, r2, proof),
        ("size2 // 2", m, n // 2, r1, r2, proof),
        ("wrong root1", m, n, b"WrongRoot", r2, proof),
        ("wrong root2", m, n, r1, b"WrongRoot", proof),
        ("swapped roots", m, n, r2, r1, proof),
        ("empty proof", m, n, r1, r2, []),
        ("trailing garbage", m, n, r1, r2, [*proof, b""]),
        ("trailing root1", m, n, r1, r2, [*proof, r1]),
        ("trailing root2", m, n, r1, r2, [*proof, r2]),
        ("preceding garbage", m, n, r1, r2, [b"", *proof]),
        ("preceding root1", m, n, r1, r2, [r1, *proof]),
        ("preceding root2", m, n, r1, r2, [r2, *proof]),
        ("preceding proof[0]", m, n, r1, r2, [proof[0], *proof]),
        ("truncated proof", m, n, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 16]) + wrong[i][1:]
        probes.append((f"modified proof[{i}] bit 4", m, n, r1, r2, wrong))
    return probes


@pytest.mark.parametrize(("old_size", "new_size", "proof"), CONSISTENCY_PROOFS)
def test_consistency_vectors(old_size: int, new_size: int, proof: list[bytes]) -> None:
    assert consistency_proof(VECTOR_LEAVES, old_size, new_size) == proof
    assert naive_proof(old_size, VECTOR_LEAVES[:new_size]) == proof
    r1, r2 = ROOT_HASHES[old_size], ROOT_HASHES[new_size]
    verify_consistency(old_size, new_size, r1, r2, proof)
    if not proof:
        return  # as in verify_test.go: only non-trivial proofs are corrupted
    for desc, m, n, a, b, p in _consistency_probes(old_size, new_size, r1, r2, proof):
        with pytest.raises(ProofError):
            verify_consistency(m, n, a, b, p)
            pytest.fail(f"verified a tampered consistency proof: {desc}")


# ---------------------------------------------------------------------------------------
# Edge cases and error messages.
# ---------------------------------------------------------------------------------------

R1 = ROOT_HASHES[3]
R2 = ROOT_HASHES[5]


@pytest.mark.parametrize(
    ("m", "n", "r1", "r2", "proof", "ok"),
    [
        # Adapted from TestVerifyConsistency in proof/verify_test.go. Stricter there:
        # a size-0 old tree must have EMPTY_ROOT as its root (transparency-dev accepts any).
        (0, 0, R1, R2, [], False),
        (1, 1, R1, R2, [], False),
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, [], True),
        (0, 1, EMPTY_ROOT, R2, [], True),
        (0, 1, R1, R2, [], False),
        (1, 1, R2, R2, [], True),
        (1, 0, R1, R2, [], False),
        (2, 1, R1, R2, [], False),
        (1, 2, R1, R2, [], False),
        (0, 0, EMPTY_ROOT, R2, [], False),
        (1, 1, EMPTY_ROOT, R2, [], False),
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
        (0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
        (1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT], False),
        (-1, 1, EMPTY_ROOT, EMPTY_ROOT, [], False),
    ],
)
def test_verify_consistency_edges(m: int, n: int, r1: bytes, r2: bytes, proof: list[bytes], ok: bool) -> None:
    if ok:
        verify_consistency(m, n, r1, r2, proof)
    else:
        with pytest.raises(ProofError):
            verify_consistency(m, n, r1, r2, proof)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (2, 1), (-1, 4), (4, 4)])
def test_verify_inclusion_out_of_range(index: int, size: int) -> None:
    with pytest.raises(ProofError, match="out of range"):
        verify_inclusion(SOME_HASH, index, size, [], EMPTY_ROOT)


def test_verify_inclusion_single_entry() -> None:
    """TestVerifyInclusionSingleEntry, proof/verify_test.go."""
    h = leaf_hash(b"data")
    verify_inclusion(h, 0, 1, [], h)
    for leaf, root in [(h, b""), (b"", h), (b"", b"")]:
        with pytest.raises(ProofError):
            verify_inclusion(leaf, 0, 1, [], root)


def test_error_messages() -> None:
    proof = inclusion_proof(VECTOR_LEAVES, 1, 8)
    with pytest.raises(ProofError, match=r"^inclusion proof has wrong length: expected 3, got 2$"):
        verify_inclusion(VECTOR_LEAVES[1], 1, 8, proof[:2], ROOT_HASHES[8])
    with pytest.raises(ProofError, match=r"^calculated root sha256:[0-9a-f]{64} does not match expected root"):
        verify_inclusion(VECTOR_LEAVES[2], 1, 8, proof, ROOT_HASHES[8])
    with pytest.raises(ProofError, match="proof element 1 has wrong length: expected 32 bytes, got 3"):
        verify_inclusion(VECTOR_LEAVES[1], 1, 8, [proof[0], b"abc", proof[2]], ROOT_HASHES[8])
    cproof = consistency_proof(VECTOR_LEAVES, 3, 7)
    with pytest.raises(ProofError, match=r"^consistency proof has wrong length: expected 4, got 3$"):
        verify_consistency(3, 7, ROOT_HASHES[3], ROOT_HASHES[7], cproof[:3])
    with pytest.raises(ProofError, match=r"^calculated new root sha256:[0-9a-f]{64} does not match"):
        verify_consistency(3, 7, ROOT_HASHES[3], ROOT_HASHES[6], cproof)
    with pytest.raises(ProofError, match=r"^calculated old root sha256:[0-9a-f]{64} does not match"):
        verify_consistency(3, 7, ROOT_HASHES[4], ROOT_HASHES[7], cproof)
    with pytest.raises(ProofError, match=r"expected 0 <= old_size <= new_size"):
        verify_consistency(6, 3, ROOT_HASHES[6], ROOT_HASHES[3], [])
    with pytest.raises(ProofError, match=r"^calculated old root sha256:[0-9a-f]{64} does not match expected"):
        verify_consistency(0, 3, ROOT_HASHES[3], ROOT_HASHES[3], [])


def test_proof_generation_rejects_bad_arguments() -> None:
    for index, size in [(-1, 5), (5, 5), (0, 0)]:
        with pytest.raises(ValueError, match="out of range"):
            inclusion_path(index, size)
    for m, n in [(6, 3), (-1, 3)]:
        with pytest.raises(ValueError, match="expected 0 <= old_size <= new_size"):
            consistency_path(m, n)
    with pytest.raises(ValueError, match="out of range"):
        inclusion_proof(VECTOR_LEAVES, 0, 9)
    with pytest.raises(ValueError, match="out of range"):
        consistency_proof(VECTOR_LEAVES, 1, 9)
    with pytest.raises(ValueError):
        perfect_subtrees(5, 3)
    with pytest.raises(ValueError):
        perfect_subtrees(-1, 3)


def test_trivial_consistency_paths() -> None:
    for n in range(10):
        assert consistency_path(0, n) == []
        assert consistency_path(n, n) == []
        assert consistency_proof(VECTOR_LEAVES, 0, min(n, 8)) == []


def test_perfect_subtrees_and_subtree_root() -> None:
    assert perfect_subtrees(3, 3) == []
    assert perfect_subtrees(0, 8) == [(3, 0)]
    assert perfect_subtrees(0, 7) == [(2, 0), (1, 2), (0, 6)]
    assert perfect_subtrees(3, 13) == [(0, 3), (2, 1), (2, 2), (0, 12)]
    assert subtree_root([]) == EMPTY_ROOT
    assert subtree_root([SOME_HASH]) == SOME_HASH
    assert subtree_root(COMPACT_TREES[7]) == ROOT_HASHES[7]


def test_compact_range_validation_and_copy() -> None:
    with pytest.raises(ValueError, match="needs 2 hashes"):
        CompactRange(3, [SOME_HASH])
    with pytest.raises(ValueError, match="non-negative"):
        CompactRange(-1)
    with pytest.raises(ValueError, match="wrong length"):
        CompactRange(1, [b"short"])
    cr = CompactRange(3, COMPACT_TREES[3])
    with pytest.raises(ValueError, match="wrong length"):
        cr.append(b"short")
    assert cr.size == 3 and cr.hashes == COMPACT_TREES[3]
    other = cr.copy()
    other.append(VECTOR_LEAVES[3])
    assert (cr.size, cr.hashes, cr.root()) == (3, COMPACT_TREES[3], ROOT_HASHES[3])
    assert (other.size, other.hashes, other.root()) == (4, COMPACT_TREES[4], ROOT_HASHES[4])


# ---------------------------------------------------------------------------------------
# Against the naive reference.
# ---------------------------------------------------------------------------------------


def test_compact_range_against_naive_every_size() -> None:
    cr = CompactRange()
    assert cr.root() == naive_root(0) == root_from_leaves([])
    for size in range(1, MAX_SIZE + 1):
        nodes = cr.append(LEAVES[size - 1])
        expected_nodes = [
            (level, (size >> level) - 1, naive_mth(LEAVES[size - (1 << level) : size]))
            for level in range(1, size.bit_length())
            if size % (1 << level) == 0
        ]
        assert nodes == expected_nodes
        assert cr.size == size
        assert cr.root() == naive_root(size) == root_from_leaves(LEAVES[:size])
        assert cr.hashes == [naive_mth(LEAVES[i << lv : (i + 1) << lv]) for lv, i in perfect_subtrees(0, size)]


@FAST
@given(data=st.data())
def test_compact_range_resumes_from_stored_state(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, MAX_SIZE), label="start")
    end = data.draw(st.integers(start, MAX_SIZE), label="end")
    stored = [naive_mth(LEAVES[i << lv : (i + 1) << lv]) for lv, i in perfect_subtrees(0, start)]
    cr = CompactRange(start, stored)
    for leaf in LEAVES[start:end]:
        cr.append(leaf)
    assert cr.root() == naive_root(end)


EXHAUSTIVE = 64


def test_proofs_against_naive_every_index_small_trees() -> None:
    for size in range(1, EXHAUSTIVE + 1):
        d = LEAVES[:size]
        root = naive_root(size)
        for index in range(size):
            proof = inclusion_proof(LEAVES, index, size)
            assert proof == naive_path(index, d), (index, size)
            assert len(proof) == len(inclusion_path(index, size))
            verify_inclusion(LEAVES[index], index, size, proof, root)
        for old in range(1, size + 1):
            cproof = consistency_proof(LEAVES, old, size)
            assert cproof == naive_proof(old, d), (old, size)
            verify_consistency(old, size, naive_root(old), root, cproof)


@FAST
@given(size=sizes, data=st.data())
def test_inclusion_against_naive(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = inclusion_proof(LEAVES, index, size)
    assert proof == naive_path(index, LEAVES[:size])
    for (start, end), element in zip(inclusion_path(index, size), proof, strict=True):
        assert element == naive_mth(LEAVES[start:end])
    verify_inclusion(LEAVES[index], index, size, proof, naive_root(size))


@FAST
@given(size=sizes, data=st.data())
def test_consistency_against_naive(size: int, data: st.DataObject) -> None:
    old = data.draw(st.integers(0, size), label="old")
    proof = consistency_proof(LEAVES, old, size)
    assert proof == (naive_proof(old, LEAVES[:size]) if old else [])
    for (start, end), element in zip(consistency_path(old, size), proof, strict=True):
        assert element == naive_mth(LEAVES[start:end])
    verify_consistency(old, size, naive_root(old), naive_root(size), proof)


# ---------------------------------------------------------------------------------------
# Tampered proofs fail.
# ---------------------------------------------------------------------------------------


def _tamper(data: st.DataObject, proof: list[bytes]) -> list[bytes]:
    """A proof that differs from ``proof``: one bit flipped, one element dropped or added."""
    kinds = ["add"] + (["flip", "drop"] if proof else [])
    kind = data.draw(st.sampled_from(kinds), label="kind")
    wrong = list(proof)
    if kind == "flip":
        i = data.draw(st.integers(0, len(proof) - 1), label="element")
        bit = data.draw(st.integers(0, 8 * 32 - 1), label="bit")
        flipped = bytearray(wrong[i])
        flipped[bit // 8] ^= 1 << (bit % 8)
        wrong[i] = bytes(flipped)
    elif kind == "drop":
        del wrong[data.draw(st.integers(0, len(proof) - 1), label="element")]
    else:
        extra = data.draw(
            st.sampled_from([*proof, SOME_HASH, EMPTY_ROOT]) | st.binary(min_size=32, max_size=32),
            label="extra",
        )
        wrong.insert(data.draw(st.integers(0, len(proof)), label="position"), extra)
    return wrong


@FAST
@given(size=sizes, data=st.data())
def test_tampered_inclusion_proof_fails(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = inclusion_proof(LEAVES, index, size)
    root = naive_root(size)
    with pytest.raises(ProofError):
        verify_inclusion(LEAVES[index], index, size, _tamper(data, proof), root)


@FAST
@given(size=st.integers(2, MAX_SIZE), data=st.data())
def test_inclusion_proof_for_wrong_index_or_size_fails(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = inclusion_proof(LEAVES, index, size)
    wrong_index = data.draw(st.integers(0, size - 1).filter(lambda i: i != index), label="wrong_index")
    with pytest.raises(ProofError):
        verify_inclusion(LEAVES[index], wrong_index, size, proof, naive_root(size))
    # Claiming another tree size, with that size's real tree head.
    wrong_size = data.draw(st.integers(index + 1, MAX_SIZE).filter(lambda n: n != size), label="wrong_size")
    with pytest.raises(ProofError):
        verify_inclusion(LEAVES[index], index, wrong_size, proof, naive_root(wrong_size))


@FAST
@given(size=st.integers(2, MAX_SIZE), data=st.data())
def test_tampered_consistency_proof_fails(size: int, data: st.DataObject) -> None:
    old = data.draw(st.integers(1, size - 1), label="old")
    proof = consistency_proof(LEAVES, old, size)
    with pytest.raises(ProofError):
        verify_consistency(old, size, naive_root(old), naive_root(size), _tamper(data, proof))


@FAST
@given(size=st.integers(2, MAX_SIZE), data=st.data())
def test_consistency_proof_for_wrong_sizes_fails(size: int, data: st.DataObject) -> None:
    old = data.draw(st.integers(1, size - 1), label="old")
    proof = consistency_proof(LEAVES, old, size)
    # Claiming other sizes, each with that size's real tree head.
    wrong_old = data.draw(st.integers(0, size).filter(lambda m: m != old), label="wrong_old")
    with pytest.raises(ProofError):
        verify_consistency(wrong_old, size, naive_root(wrong_old), naive_root(size), proof)
    wrong_new = data.draw(st.integers(old, MAX_SIZE).filter(lambda n: n != size), label="wrong_new")
    with pytest.raises(ProofError):
        verify_consistency(old, wrong_new, naive_root(old), naive_root(wrong_new), proof)
