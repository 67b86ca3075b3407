"""c2sp.org/tlog-proof@v1: an offline-verifiable proof that an entry is in a log, seen by witnesses.

Follows the spec as in the C2SP repository. :func:`parse` / :class:`TlogProof.format` ("Format");
:func:`verify` ("Verifying a tlog proof", steps 1-4). Files SHOULD end in :data:`EXTENSION`.
Cosignature timestamps are checked as part of each cosignature, then ignored ("Use of timestamps").
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from signoff.audit.c2sp_errors import (
    C2SPFormatError,
    InclusionFailed,
    NoteNotVerified,
    ProofFormatError,
    QuorumNotMet,
)
from signoff.audit.merkle import HASH_SIZE, ProofError, verify_inclusion
from signoff.audit.signed_note import Verifier, decode_base64, parse_note
from signoff.audit.tlog_checkpoint import Checkpoint, parse_decimal, verify_checkpoint

__all__ = ["EXTENSION", "HEADER", "LeafHash", "TlogProof", "VerifiedProof", "parse", "verify"]

HEADER = "c2sp.org/tlog-proof@v1"
"""'The first line MUST be the string `c2sp.org/tlog-proof@v1`'."""
EXTENSION = ".tlog-proof"
"""'Proofs SHOULD be stored with file extension `.tlog-proof`'."""

LeafHash = bytes | Callable[[bytes | None], bytes]
"""The leaf hash itself, or the application's function of the extra data (None when absent) giving it."""


@dataclass(frozen=True)
class TlogProof:
    """A parsed proof. ``extra`` is unauthenticated ("Applications MUST NOT implicitly trust the extra data")."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def format(self) -> bytes:
        """The proof file: header, optional ``extra``, ``index``, proof lines, an empty line, the checkpoint."""
        lines = [HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode("ascii"))
        if self.index < 0:
            raise ProofFormatError(f"index: expected a non-negative index, found {self.index}")
        lines.append(f"index {self.index}")
        for i, h in enumerate(self.proof):
            if len(h) != HASH_SIZE:
                raise ProofFormatError(f"inclusion proof line {i}: expected {HASH_SIZE} bytes, found {len(h)}")
            lines.append(base64.b64encode(h).decode("ascii"))
        parse_note(self.checkpoint)  # "the checkpoint issued by the log is included verbatim"
        return "".join(line + "\n" for line in lines).encode("ascii") + b"\n" + self.checkpoint


def parse(data: bytes) -> TlogProof:
    """Parse a proof ("Format"); raises :class:`ProofFormatError`."""
    head, sep, checkpoint = data.partition(b"\n\n")
    if not sep:
        raise ProofFormatError("tlog proof: expected proof lines, an empty line and a checkpoint, found no empty line")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise ProofFormatError("tlog proof: expected ASCII lines before the checkpoint, found other bytes") from None
    if lines[0] != HEADER:
        raise ProofFormatError(f"tlog proof: expected a first line {HEADER!r}, found {lines[0][:60]!r}")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        # "The second line MAY start with the string `extra` followed by a space ... and base64"
        extra = decode_base64(rest[0][len("extra ") :], "tlog proof extra", ProofFormatError)
        rest = rest[1:]
    if not rest or not rest[0].startswith("index "):
        raise ProofFormatError("tlog proof: expected a line 'index <N>', found none")
    # "the zero-based index ... as an ASCII decimal with no leading zeroes (unless the index is `0`)"
    index = parse_decimal(rest[0][len("index ") :], "tlog proof index", ProofFormatError)
    proof = []
    for i, line in enumerate(rest[1:]):
        h = decode_base64(line, f"tlog proof line {i}", ProofFormatError)  # "zero or more non-empty lines"
        if len(h) != HASH_SIZE:
            raise ProofFormatError(f"tlog proof line {i}: expected a {HASH_SIZE}-byte hash, found {len(h)} bytes")
        proof.append(h)
    try:
        parse_note(checkpoint)
    except C2SPFormatError as exc:
        raise ProofFormatError(f"tlog proof checkpoint: {exc}") from None
    return TlogProof(index, tuple(proof), checkpoint, extra)


@dataclass(frozen=True)
class VerifiedProof:
    checkpoint: Checkpoint
    index: int
    leaf_hash: bytes
    witnesses: tuple[str, ...]
    """The names of the witnesses whose cosignature verified."""


def verify(
    proof: TlogProof | bytes,
    *,
    leaf: LeafHash,
    origin: str,
    log: Sequence[Verifier],
    witnesses: Sequence[Verifier],
    quorum: int,
) -> VerifiedProof:
    """The four steps of "Verifying a tlog proof".

    1. the leaf hash: ``leaf`` itself, or ``leaf(extra)`` (the application's function of the extra data);
    2. the checkpoint's origin must be ``origin``, and a key in ``log`` must have signed it;
    3. at least ``quorum`` distinct witnesses (by name) of ``witnesses`` must have cosigned it;
    4. the RFC 6962 §2.1.1 inclusion proof binds the leaf hash at ``index`` to the checkpoint's root.

    Every signature from a known key must verify (signed-note). Raises a
    :class:`~signoff.audit.c2sp_errors.C2SPVerificationError` or a format error.
    """
    parsed = parse(proof) if isinstance(proof, bytes) else proof
    if quorum < 0 or quorum > len({w.name for w in witnesses}):
        raise ValueError(
            f"quorum: expected 0..{len({w.name for w in witnesses})} (the witnesses given), found {quorum}"
        )
    if not log:
        raise ValueError("log: expected at least one log key, found none")
    leaf_hash = leaf if isinstance(leaf, bytes) else leaf(parsed.extra)  # step 1
    verified = verify_checkpoint(parsed.checkpoint, [*log, *witnesses], origin=origin)  # step 2 (origin)
    log_ids = {(v.name, bytes(v.key_id)) for v in log}
    signers = [(v.name, bytes(v.key_id)) for v in verified.note.verifiers]
    if not any(pair in log_ids for pair in signers):
        raise NoteNotVerified(
            f"checkpoint of {origin}: expected a signature by the log's key, found none that verifies"
        )
    names = sorted({name for name, kid in signers if (name, kid) not in log_ids})  # step 3
    if len(names) < quorum:
        raise QuorumNotMet(
            f"checkpoint of {origin}: expected cosignatures from at least {quorum} known witnesses, "
            f"found {len(names)} ({', '.join(names) or 'none'})"
        )
    checkpoint = verified.checkpoint
    try:  # step 4
        verify_inclusion(leaf_hash, parsed.index, checkpoint.size, parsed.proof, checkpoint.root)
    except ProofError as exc:
        raise InclusionFailed(f"entry {parsed.index} in {origin} at size {checkpoint.size}: {exc}") from None
    return VerifiedProof(checkpoint, parsed.index, leaf_hash, tuple(names))
