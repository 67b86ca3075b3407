"""Self-contained inclusion proofs: one entry, its path, and the signed checkpoint it is proven under.

An auditor who receives the file checks it with nothing else (``audit check-proof``): the
entry's leaf hash (RFC 9162 §2.1.1), the inclusion path to the checkpoint's root (§2.1.3.2), and
the checkpoint's signature by the log key (pin the key you trust with ``--log-key``). Every hash
is written ``sha256:<hex>``, like everywhere else on the log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from signoff.audit import merkle, tlog_proof
from signoff.audit.c2sp_errors import C2SPFormatError
from signoff.audit.canonical import canonical
from signoff.audit.entry import format_hash, parse_hash
from signoff.audit.errors import StoreError, UnusableInput
from signoff.audit.merkle import ProofError
from signoff.audit.tlog_proof import TlogProof
from signoff.audit.tree_head import Checkpoint
from signoff.audit.vkeys import verifier_from_vkey

if TYPE_CHECKING:  # the store's tree; checking a proof needs no database code
    from signoff.audit.tree import LogTree

KIND = "signoff.inclusion-proof"


def build_inclusion(store: LogTree, seq: int, size: int | None = None) -> dict[str, Any]:
    """A proof of entry ``seq`` under a stored checkpoint: the one of ``size``, else the latest one."""
    points = store.checkpoints()
    if size is not None:
        point = next((p for p in points if p.size == size), None)
        if point is None:
            raise StoreError(
                f"--size: expected the size of a stored checkpoint {[p.size for p in points]}, found {size}"
            )
    else:
        point = points[-1] if points else None
    if point is None or point.size <= seq:
        covered = f"the latest covers entries 0..{point.size - 1}" if point else "there is none"
        raise StoreError(
            f"seq {seq}: expected a signed checkpoint that covers it, found none ({covered}); "
            "run `audit checkpoint` (with the log key) first"
        )
    item = store.entry(seq)
    path = store.inclusion_proof(seq, point.size)
    return {
        "kind": KIND,
        "v": 1,
        "log": store.log_id,
        "seq": seq,
        "size": point.size,
        "entry": item.raw.decode("utf-8"),
        "leaf": item.hash,
        "path": [format_hash(node) for node in path],
        "checkpoint": point.to_json(),
        "log_key": store.public_key,
    }


def check_inclusion(bundle: Any, pinned_key: str | None = None) -> dict[str, Any]:
    """Check a proof file's content; raises :class:`ProofError` (exit 1) or :class:`UnusableInput` (2)."""
    if not isinstance(bundle, dict) or bundle.get("kind") != KIND:
        raise UnusableInput(
            f"expected a Signoff inclusion proof (kind {KIND!r}, from `audit prove`), found another file"
        )
    try:
        seq, size, entry, leaf = int(bundle["seq"]), int(bundle["size"]), str(bundle["entry"]), str(bundle["leaf"])
        path = [parse_hash(str(node)) for node in bundle["path"]]
        point = Checkpoint.from_json(bundle["checkpoint"])
        log_key = str(bundle["log_key"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UnusableInput(
            f"expected a complete inclusion proof (seq, size, entry, leaf, path, checkpoint, log_key): {exc}"
        ) from None
    if pinned_key is not None and pinned_key != log_key:
        raise ProofError(f"log key: expected the pinned key {pinned_key}, found {log_key}")
    raw = entry.encode("utf-8")
    found_leaf = format_hash(merkle.leaf_hash(raw))
    if found_leaf != leaf:
        raise ProofError(f"leaf: expected SHA-256(0x00 || entry) = {found_leaf}, found {leaf}")
    data = json.loads(raw)
    if data.get("seq") != seq or data.get("log") != point.log or bundle.get("log") != point.log:
        raise ProofError(
            f"entry: expected seq {seq} of log {point.log}, found seq {data.get('seq')} of {data.get('log')}"
        )
    if point.size != size:
        raise ProofError(f"checkpoint: expected size {size}, found {point.size}")
    if not point.verify(log_key):
        raise ProofError(f"checkpoint: expected a valid signature by the log key {log_key}, found an invalid one")
    merkle.verify_inclusion(parse_hash(leaf), seq, size, path, parse_hash(point.root))
    return {"ok": True, "log": point.log, "seq": seq, "size": size, "root": point.root, "kind": data.get("kind")}


def consistency(store: LogTree, old: Checkpoint) -> dict[str, Any]:
    """RFC 9162 §2.1.4 proof that the log now extends a kept checkpoint; raises ProofError if not."""
    if not old.verify(store.public_key):
        raise ProofError("checkpoint: expected a valid signature by the log key, found an invalid one")
    new_size = store.size()
    new_root = store.root(new_size)
    proof = store.consistency_proof(old.size, new_size) if old.size < new_size else []
    merkle.verify_consistency(old.size, new_size, parse_hash(old.root), new_root, proof)
    return {
        "log": store.log_id,
        "old_size": old.size,
        "old_root": old.root,
        "new_size": new_size,
        "new_root": format_hash(new_root),
        "proof": [format_hash(node) for node in proof],
    }


# -- c2sp.org/tlog-proof@v1 ----------------------------------------------------------------------


def build_tlog_proof(store: LogTree, seq: int, size: int | None = None) -> bytes:
    """Entry ``seq``'s receipt as ``c2sp.org/tlog-proof@v1`` (SPEC.md "Proofs"): the entry's canonical bytes
    in the ``extra`` line (so the receipt carries what it proves), its index, its RFC 6962 inclusion path
    and the stored note checkpoint of ``size`` (default: the newest that covers it), with every witness
    cosignature the log recorded for it."""
    points = [c for c in store.checkpoints() if c.note and c.size > seq and (size is None or c.size == size)]
    if not points:
        raise StoreError(
            f"seq {seq}: expected a C2SP note checkpoint that covers it{f' of size {size}' if size else ''}, "
            "found none; run `audit checkpoint` (with the log key) or wait for the publisher"
        )
    point = points[-1]
    item = store.entry(seq)
    path = store.inclusion_proof(seq, point.size)
    return TlogProof(seq, tuple(path), point.note.encode("utf-8"), item.raw).format()


@dataclass(frozen=True)
class CheckedReceipt:
    """A tlog-proof that held: the entry it proves, the checkpoint, and who cosigned it."""

    entry: dict[str, Any]
    index: int
    size: int
    root: str
    origin: str
    witnesses: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "seq": self.index,
            "size": self.size,
            "root": self.root,
            "origin": self.origin,
            "witnesses": list(self.witnesses),
            "kind": self.entry.get("kind"),
            "actor": self.entry.get("actor"),
            "log": self.entry.get("log"),
            "review": (self.entry.get("body") or {}).get("review"),
        }


def check_tlog_proof(data: bytes, log_vkey: str, witness_vkeys: Sequence[str] = (), quorum: int = 0) -> CheckedReceipt:
    """Check a receipt offline (``audit check-proof FILE --log-vkey …``): the leaf is SHA-256(0x00 || the
    ``extra`` bytes), which must be one canonical Signoff entry whose ``seq`` is the proof's index; the
    checkpoint is the log's (its vkey), cosigned by ``quorum`` of the witnesses; the path binds the two.
    Raises ``UnusableInput`` (a malformed file or key, exit 2) or a verification error (exit 1)."""
    try:
        log_key = verifier_from_vkey(log_vkey)
        witnesses = [verifier_from_vkey(text) for text in witness_vkeys]
        parsed = tlog_proof.parse(data)
    except C2SPFormatError as exc:
        raise UnusableInput(str(exc)) from None
    if parsed.extra is None:
        raise UnusableInput("proof: expected the entry's bytes in its extra line (a Signoff receipt), found none")
    try:
        entry = json.loads(parsed.extra)
    except ValueError:
        raise ProofError("extra: expected the canonical JSON of one log entry, found other bytes") from None
    if not isinstance(entry, dict) or canonical(entry) != parsed.extra:
        raise ProofError("extra: expected the canonical JSON of one log entry (RFC 8785), found other bytes")
    if entry.get("seq") != parsed.index:
        raise ProofError(f"extra: expected the entry at index {parsed.index}, found seq {entry.get('seq')!r}")
    done = tlog_proof.verify(
        parsed, leaf=merkle.leaf_hash(parsed.extra), origin=log_key.name, log=[log_key], witnesses=witnesses,
        quorum=quorum,
    )  # fmt: skip
    point = done.checkpoint
    return CheckedReceipt(entry, done.index, point.size, format_hash(point.root), point.origin, done.witnesses)
