"""One error hierarchy for the C2SP transparency-log modules (signed notes, checkpoints,
cosignatures, the witness protocol, tiles and tlog proofs).

Two families, so that ``audit.cli`` maps them to its exit codes without knowing them:

* :class:`C2SPFormatError` (also :class:`~signoff.audit.errors.UnusableInput` and ``ValueError``):
  the bytes are not the format the spec defines (exit code 2);
* :class:`C2SPVerificationError` (also :class:`~signoff.audit.errors.VerificationFailed`): a
  signature, a proof, a tile or a quorum does not check (exit code 1).

:class:`WitnessError` is a witness that refused, or could not be reached (exit code 2). Every
message says what was expected and what was found.
"""

from __future__ import annotations

from signoff.audit.errors import AuditError, UnusableInput, VerificationFailed

__all__ = [
    "C2SPError",
    "C2SPFormatError",
    "C2SPVerificationError",
    "CheckpointFormatError",
    "InclusionFailed",
    "KeyFormatError",
    "NoteFormatError",
    "NoteNotVerified",
    "ProofFormatError",
    "QuorumNotMet",
    "TileFormatError",
    "TileMismatch",
    "WitnessError",
    "WitnessRequestError",
]


class C2SPError(AuditError):
    """Base of every error raised by the C2SP modules."""


# -- malformed input: exit code 2 --------------------------------------------------------


class C2SPFormatError(C2SPError, UnusableInput, ValueError):
    """Bytes that are not in the format the spec defines."""


class NoteFormatError(C2SPFormatError):
    """Not a signed note (c2sp.org/signed-note "Format")."""


class KeyFormatError(C2SPFormatError):
    """A key name or a vkey breaks c2sp.org/signed-note "Verifier keys"."""


class CheckpointFormatError(C2SPFormatError):
    """A note text that is not a checkpoint (c2sp.org/tlog-checkpoint "Note text"), or an origin
    that breaks the rule :func:`signoff.audit.tlog_checkpoint.check_origin` enforces."""


class WitnessRequestError(C2SPFormatError):
    """An ``add-checkpoint`` body that breaks c2sp.org/tlog-witness (a witness answers 400)."""


class TileFormatError(C2SPFormatError):
    """A tile, an entry bundle or a tile path that breaks c2sp.org/tlog-tiles."""


class ProofFormatError(C2SPFormatError):
    """Not a c2sp.org/tlog-proof@v1 file."""


# -- failed checks: exit code 1 ----------------------------------------------------------


class C2SPVerificationError(C2SPError, VerificationFailed):
    """A signature, proof or quorum that does not check. ``rule`` holds the whole message."""

    def __init__(self, message: str) -> None:
        self.seq = None
        self.rule = message
        self.expected = ""
        self.found = ""
        Exception.__init__(self, message)


class NoteNotVerified(C2SPVerificationError):
    """No known key verified the note, or a known key's signature failed (c2sp.org/signed-note "Signatures")."""


class InclusionFailed(C2SPVerificationError):
    """An inclusion proof does not bind the leaf to the checkpoint's root (RFC 6962 §2.1.1)."""


class QuorumNotMet(C2SPVerificationError):
    """Fewer valid witness cosignatures than the policy asks for (c2sp.org/tlog-proof step 3)."""


class TileMismatch(C2SPVerificationError):
    """A tile or an entry bundle does not hash up to the checkpoint's root (tampered or truncated)."""


# -- the witness as a service: exit code 2 -----------------------------------------------


class WitnessError(C2SPError):
    """A witness answered something other than 200 or 409, or could not be reached."""

    def __init__(self, message: str, status: int | None = None, body: bytes = b"") -> None:
        self.status = status
        self.body = body
        super().__init__(message)
