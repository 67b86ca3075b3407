"""RFC 9162 §2.1 Merkle trees over SHA-256: tree heads, compact ranges, proofs.

Pure functions, no I/O. Hashes are raw 32-byte ``bytes``. Entries are hashed into
leaves with :func:`leaf_hash` by the caller; every other function here takes leaf
*hashes*.

A database-backed log stores the perfect-subtree nodes that :meth:`CompactRange.append`
reports. It answers a proof with O(log n) reads: :func:`inclusion_path` /
:func:`consistency_path` name the leaf range behind each proof element,
:func:`perfect_subtrees` splits a range into stored nodes, and :func:`subtree_root`
folds those nodes into the element. :func:`inclusion_proof` and
:func:`consistency_proof` take exactly that route over an in-memory list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from signoff.audit.errors import AuditError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "ProofError",
    "consistency_path",
    "consistency_proof",
    "inclusion_path",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "perfect_subtrees",
    "root_from_leaves",
    "subtree_root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Length in bytes of every hash (SHA-256)."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"

EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""MTH({}) = SHA-256() -- the head of the empty tree (RFC 9162 §2.1.1)."""


class ProofError(AuditError):
    """An inclusion or consistency proof failed verification (RFC 9162 §2.1.3.2, §2.1.4.2)."""


def leaf_hash(data: bytes) -> bytes:
    """MTH({d(0)}) = SHA-256(0x00 || d(0)) (RFC 9162 §2.1.1)."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right), an interior node (RFC 9162 §2.1.1)."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def _hex(h: bytes) -> str:
    return "sha256:" + h.hex()


def _largest_power_of_two_below(n: int) -> int:
    """k, the largest power of two smaller than n (n > 1), as in RFC 9162 §2.1.1."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_hash(what: str, h: bytes, error: type[Exception]) -> None:
    if len(h) != HASH_SIZE:
        raise error(f"{what} has wrong length: expected {HASH_SIZE} bytes, got {len(h)}")


class CompactRange:
    """The roots of the perfect subtrees on the right edge of a tree of ``size`` leaves.

    ``hashes`` lists them left to right, largest subtree first: one per set bit of
    ``size`` (the "compact range" [0, size) of transparency-dev/merkle). It is all the
    state needed to append leaves and compute the tree head (RFC 9162 §2.1.1).
    """

    __slots__ = ("hashes", "size")

    size: int
    hashes: list[bytes]

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if size < 0:
            raise ValueError(f"compact range size must be non-negative, got {size}")
        expected = size.bit_count()
        if len(hashes) != expected:
            raise ValueError(
                f"compact range of size {size} needs {expected} hashes (one per set bit), got {len(hashes)}"
            )
        for i, h in enumerate(hashes):
            _check_hash(f"compact range hash {i}", h, ValueError)
        self.size = size
        self.hashes = list(hashes)

    def __repr__(self) -> str:
        return f"CompactRange(size={self.size}, hashes=[{', '.join(h.hex() for h in self.hashes)}])"

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash; return the perfect nodes it completes, lowest level first.

        Each node is ``(level, index, hash)`` with ``level >= 1``; it covers leaves
        ``[index * 2**level, (index + 1) * 2**level)``. O(log n).
        """
        _check_hash("leaf hash", leaf, ValueError)
        completed: list[tuple[int, int, bytes]] = []
        h = leaf
        level = 0
        # Each trailing one-bit of size is a left sibling waiting for this right subtree.
        while (self.size >> level) & 1:
            h = node_hash(self.hashes.pop(), h)
            level += 1
            completed.append((level, self.size >> level, h))
        self.hashes.append(h)
        self.size += 1
        return completed

    def root(self) -> bytes:
        """MTH(D[size]), the tree head for the current size (RFC 9162 §2.1.1)."""
        return subtree_root(self.hashes)

    def copy(self) -> CompactRange:
        """An independent copy (its hashes were checked when they entered this range)."""
        clone = CompactRange.__new__(CompactRange)
        clone.size = self.size
        clone.hashes = list(self.hashes)
        return clone


def root_from_leaves(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes, iteratively in O(n) time, O(log n) space (RFC 9162 §2.1.1)."""
    cr = CompactRange()
    for leaf in leaf_hashes:
        cr.append(leaf)
    return cr.root()


def perfect_subtrees(start: int, end: int) -> list[tuple[int, int]]:
    """Split leaf range [start, end) into aligned perfect subtrees ``(level, index)``, left to right.

    Node ``(level, index)`` covers leaves ``[index * 2**level, (index + 1) * 2**level)``.
    For the ranges named by :func:`inclusion_path` and :func:`consistency_path` (and any
    ``[0, end)``), the sizes decrease left to right and :func:`subtree_root` of the nodes'
    hashes is MTH(D[start:end]) (RFC 9162 §2.1.1).
    """
    if not 0 <= start <= end:
        raise ValueError(f"invalid leaf range [{start}, {end}): expected 0 <= start <= end")
    nodes: list[tuple[int, int]] = []
    while start < end:
        # Largest aligned block at start: limited by start's alignment and by what is left.
        level = (end - start).bit_length() - 1
        if start:
            level = min(level, (start & -start).bit_length() - 1)
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def subtree_root(nodes: Sequence[bytes]) -> bytes:
    """Fold left-to-right perfect-subtree hashes of a range into its MTH (RFC 9162 §2.1.1).

    Right to left: ``h = node_hash(nodes[i], h)``. An empty list gives :data:`EMPTY_ROOT`.
    """
    if not nodes:
        return EMPTY_ROOT
    h = nodes[-1]
    for left in reversed(nodes[:-1]):
        h = node_hash(left, h)
    return h


def inclusion_path(index: int, size: int) -> list[tuple[int, int]]:
    """PATH(m, D[n]) of RFC 9162 §2.1.3.1 as leaf ranges [start, end), in proof order.

    Proof element i is MTH(D[start:end]) of range i; the leaf's sibling comes first.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} out of range for tree size {size}: expected 0 <= index < size")
    path: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _largest_power_of_two_below(hi - lo)
        if index < lo + k:
            path.append((lo + k, hi))  # PATH(m, D[0:k]) : MTH(D[k:n])
            hi = lo + k
        else:
            path.append((lo, lo + k))  # PATH(m - k, D[k:n]) : MTH(D[0:k])
            lo += k
    path.reverse()
    return path


def consistency_path(old_size: int, new_size: int) -> list[tuple[int, int]]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1 as leaf ranges [start, end), in proof order.

    Empty when ``old_size == new_size`` (RFC) or ``old_size == 0`` (nothing to prove).
    """
    if not 0 <= old_size <= new_size:
        raise ValueError(f"invalid consistency sizes {old_size} -> {new_size}: expected 0 <= old_size <= new_size")
    if old_size == 0:
        return []
    path: list[tuple[int, int]] = []
    lo, hi = 0, new_size
    whole = True  # the b flag of SUBPROOF: is D[lo:hi] still a prefix known to the verifier?
    while old_size != hi:
        k = _largest_power_of_two_below(hi - lo)
        if old_size - lo <= k:
            path.append((lo + k, hi))  # SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            hi = lo + k
        else:
            path.append((lo, lo + k))  # SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
            lo += k
            whole = False
    if not whole:
        path.append((lo, hi))  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
    path.reverse()
    return path


def _range_hash(leaves: Sequence[bytes], start: int, end: int) -> bytes:
    """MTH(D[start:end]) the way a stored log computes it: from perfect-subtree nodes."""
    nodes = [
        root_from_leaves(leaves[index << level : (index + 1) << level]) for level, index in perfect_subtrees(start, end)
    ]
    return subtree_root(nodes)


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int | None = None) -> list[bytes]:
    """Inclusion proof of leaf ``index`` in the tree of the first ``size`` leaves (RFC 9162 §2.1.3.1)."""
    if size is None:
        size = len(leaves)
    if not 0 <= size <= len(leaves):
        raise ValueError(f"tree size {size} out of range: expected 0 <= size <= {len(leaves)} (leaves given)")
    return [_range_hash(leaves, start, end) for start, end in inclusion_path(index, size)]


def consistency_proof(leaves: Sequence[bytes], old_size: int, new_size: int | None = None) -> list[bytes]:
    """Consistency proof from ``old_size`` to ``new_size`` leaves (RFC 9162 §2.1.4.1)."""
    if new_size is None:
        new_size = len(leaves)
    if not 0 <= new_size <= len(leaves):
        raise ValueError(
            f"new tree size {new_size} out of range: expected 0 <= new_size <= {len(leaves)} (leaves given)"
        )
    return [_range_hash(leaves, start, end) for start, end in consistency_path(old_size, new_size)]


def _check_proof_hashes(proof: Sequence[bytes]) -> None:
    for i, p in enumerate(proof):
        _check_hash(f"proof element {i}", p, ProofError)


def _check_root(kind: str, calculated: bytes, expected: bytes) -> None:
    if calculated != expected:
        raise ProofError(f"calculated {kind} {_hex(calculated)} does not match expected {kind} {_hex(expected)}")


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that leaf hash ``leaf`` is at ``index`` in the tree ``root`` of ``size`` (RFC 9162 §2.1.3.2).

    Raises :class:`ProofError` on any failure.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} out of range for tree size {size}: expected 0 <= index < size")
    _check_hash("leaf hash", leaf, ProofError)
    _check_hash("root", root, ProofError)
    _check_proof_hashes(proof)
    inner = (index ^ (size - 1)).bit_length()
    expected_len = inner + (index >> inner).bit_count()
    if len(proof) != expected_len:
        raise ProofError(f"inclusion proof has wrong length: expected {expected_len}, got {len(proof)}")

    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:  # unreachable after the length check; kept as in the RFC
            raise ProofError("inclusion proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # likewise unreachable; RFC 9162 §2.1.3.2 step 5
        raise ProofError("inclusion proof is shorter than the path to the root")
    _check_root("root", r, root)


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """Check that tree ``new_root`` of ``new_size`` extends ``old_root`` of ``old_size`` (RFC 9162 §2.1.4.2).

    ``old_size == new_size`` needs an empty proof and equal roots; ``old_size == 0``
    needs an empty proof and ``old_root == EMPTY_ROOT``. Raises :class:`ProofError`.
    """
    if not 0 <= old_size <= new_size:
        raise ProofError(f"invalid consistency sizes {old_size} -> {new_size}: expected 0 <= old_size <= new_size")
    _check_hash("old root", old_root, ProofError)
    _check_hash("new root", new_root, ProofError)
    _check_proof_hashes(proof)

    if old_size == new_size or old_size == 0:
        if proof:
            raise ProofError(
                f"consistency proof has wrong length: expected 0, got {len(proof)} (sizes {old_size} -> {new_size})"
            )
        if old_size == 0:
            _check_root("old root", old_root, EMPTY_ROOT)
        if old_size == new_size:
            _check_root("new root", new_root, old_root)
        return

    # The proof is an inclusion proof of the node at `shift`, index (old_size-1) >> shift.
    shift = (old_size & -old_size).bit_length() - 1
    node = (old_size - 1) >> shift
    last = (new_size - 1) >> shift
    inner = (node ^ last).bit_length()
    old_is_perfect = old_size == 1 << shift
    expected_len = inner + (node >> inner).bit_count() + (0 if old_is_perfect else 1)
    if len(proof) != expected_len:
        raise ProofError(f"consistency proof has wrong length: expected {expected_len}, got {len(proof)}")

    path = [old_root, *proof] if old_is_perfect else list(proof)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # unreachable after the length check; kept as in the RFC
            raise ProofError("consistency proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # likewise unreachable; RFC 9162 §2.1.4.2 step 7
        raise ProofError("consistency proof is shorter than the path to the root")
    _check_root("old root", fr, old_root)
    _check_root("new root", sr, new_root)
