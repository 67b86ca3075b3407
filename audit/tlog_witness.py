"""c2sp.org/tlog-witness@v1.0.0: the ``add-checkpoint`` protocol, without the server.

Follows the spec as in the C2SP repository (which adds, after v1.0.0, the 403 for a failing
trusted signature and the 422 for a size-0 checkpoint with a non-empty root). ``sign-subtree``
is not implemented (OPTIONAL). Pure functions, except :func:`add_checkpoint`, the client:

* :func:`format_request` / :func:`parse_request`: the request body;
* :func:`decide`: what a witness answers, given its trusted log keys and stored state;
* :func:`add_checkpoint`: POST a checkpoint to a witness (httpx);
* :func:`add_cosignatures`: keep the witness cosignatures that verify, on the log's note.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

from signoff.audit import tlog_checkpoint
from signoff.audit.c2sp_errors import (
    C2SPFormatError,
    NoteNotVerified,
    WitnessError,
    WitnessRequestError,
)
from signoff.audit.merkle import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency
from signoff.audit.signed_note import (
    Note,
    Signature,
    Verifier,
    decode_base64,
    format_note,
    parse_note,
    parse_signature_line,
    verify_note,
)
from signoff.audit.tlog_checkpoint import Checkpoint, parse_decimal

__all__ = [
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "AddCheckpointRequest",
    "Conflict",
    "Cosigned",
    "Decision",
    "Stored",
    "add_checkpoint",
    "add_cosignatures",
    "decide",
    "format_request",
    "parse_request",
]

MAX_PROOF_LINES = 63
"""Proof lines: "The client MUST NOT send more than 63 consistency proof lines" ("add-checkpoint")."""
SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""The 409 response's ``Content-Type`` ("add-checkpoint": MUST)."""
MAX_SIZE = (1 << 63) - 1
"""Largest tree size the witness handles (its state is a signed 64-bit integer in SQL)."""
_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class AddCheckpointRequest:
    """An ``add-checkpoint`` body: old size, consistency proof, checkpoint note (structure checked)."""

    old_size: int
    proof: tuple[bytes, ...]
    note: bytes

    @property
    def origin(self) -> str:
        """The checkpoint's first line (not yet trusted: the signature is checked by :func:`decide`)."""
        return parse_note(self.note).text.split(b"\n", 1)[0].decode("utf-8")

    def body(self) -> bytes:
        return format_request(self.note, self.old_size, self.proof)


def format_request(note: bytes, old_size: int, proof: Sequence[bytes]) -> bytes:
    """The body: ``old <size>``, one base64 hash per proof line, an empty line, the checkpoint."""
    if old_size < 0:
        raise WitnessRequestError(f"old size: expected a non-negative size, found {old_size}")
    if len(proof) > MAX_PROOF_LINES:
        raise WitnessRequestError(f"consistency proof: expected at most {MAX_PROOF_LINES} lines, found {len(proof)}")
    lines = [f"old {old_size}"]
    for i, h in enumerate(proof):
        if len(h) != HASH_SIZE:
            raise WitnessRequestError(f"consistency proof line {i}: expected {HASH_SIZE} bytes, found {len(h)}")
        lines.append(_b64(h))
    return "".join(line + "\n" for line in lines).encode("ascii") + b"\n" + note


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_request(body: bytes) -> AddCheckpointRequest:
    """Parse a body ("add-checkpoint": "The request body MUST be a sequence of ..."); a witness answers
    400 to a :class:`WitnessRequestError`. The checkpoint note's structure is checked too."""
    lines: list[bytes] = []
    rest = body
    while True:
        end = rest.find(b"\n")
        if end < 0:
            # "Each line MUST terminate in a newline character"
            raise WitnessRequestError("add-checkpoint body: expected an empty line before the checkpoint, found none")
        line, rest = rest[:end], rest[end + 1 :]
        if not line:
            break
        lines.append(line)
        if len(lines) > MAX_PROOF_LINES + 1:
            raise WitnessRequestError(f"consistency proof: expected at most {MAX_PROOF_LINES} lines, found more")
    if not lines or not lines[0].startswith(b"old "):
        raise WitnessRequestError("add-checkpoint body: expected a first line 'old <size>', found none")
    try:
        text = [line.decode("ascii") for line in lines]
    except UnicodeDecodeError:
        raise WitnessRequestError(
            "add-checkpoint body: expected ASCII size and proof lines, found other bytes"
        ) from None
    old_size = parse_decimal(text[0][4:], "old size", WitnessRequestError, MAX_SIZE)
    proof = []
    for i, encoded in enumerate(text[1:]):
        h = decode_base64(encoded, f"consistency proof line {i}", WitnessRequestError)
        if len(h) != HASH_SIZE:
            raise WitnessRequestError(f"consistency proof line {i}: expected a {HASH_SIZE}-byte hash, found {len(h)}")
        proof.append(h)
    try:
        parse_note(rest)
    except C2SPFormatError as exc:
        raise WitnessRequestError(f"add-checkpoint body: {exc}") from None
    return AddCheckpointRequest(old_size, tuple(proof), rest)


# -- the witness's decision ---------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """A witness's record for an origin: the size and root of the latest checkpoint it cosigned."""

    size: int
    root: bytes


@dataclass(frozen=True)
class Decision:
    """What to answer. On 200 the caller cosigns ``text`` (the checkpoint's note text, verbatim), stores
    it with ``log_signatures`` (the log's signatures it verified) and its cosignature, and only then
    responds."""

    status: int
    reason: str
    body: bytes = b""
    content_type: str = _TEXT
    checkpoint: Checkpoint | None = None
    text: bytes = b""
    log_signatures: tuple[Signature, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == 200


def _refuse(status: int, reason: str) -> Decision:
    return Decision(status, reason, (reason + "\n").encode("utf-8"))


def decide(
    request: AddCheckpointRequest | bytes,
    logs: Mapping[str, Sequence[Verifier]],
    stored: Stored | None,
) -> Decision:
    """The checks of "add-checkpoint", in the spec's order. ``logs`` maps each known origin to the log
    keys trusted for it; ``stored`` is the record for the request's origin (None: never cosigned).

    404 unknown origin; 403 no valid signature from a trusted key, or a trusted key's signature
    fails; 400 a malformed body or old size > checkpoint size; 409 old size != stored size; 422 a
    size-0 checkpoint whose root is not the empty tree's, a proof with old size 0, a failing
    consistency proof, or the same size with another root; else 200.
    """
    if isinstance(request, bytes):
        try:
            request = parse_request(request)
        except WitnessRequestError as exc:
            return _refuse(400, str(exc))
    try:
        note = parse_note(request.note)
    except C2SPFormatError as exc:
        return _refuse(400, str(exc))
    origin = note.text.split(b"\n", 1)[0].decode("utf-8")
    trusted = logs.get(origin)
    if not trusted:
        # "If the checkpoint origin is unknown, the witness MUST respond with a "404 Not Found""
        return _refuse(404, f"origin {origin!r}: expected a log this witness knows, found an unknown origin")
    try:
        # "MUST verify the checkpoint signature against the public key(s) it trusts for the checkpoint
        # origin, and it MUST ignore signatures from unknown keys" ... else "403 Forbidden"
        verified = verify_note(note, trusted)
    except NoteNotVerified as exc:
        return _refuse(403, str(exc))
    try:
        checkpoint = tlog_checkpoint.parse(verified.text)
    except C2SPFormatError as exc:
        return _refuse(400, str(exc))
    if checkpoint.size > MAX_SIZE:
        return _refuse(400, f"checkpoint size: expected at most {MAX_SIZE}, found {checkpoint.size}")
    if request.old_size > checkpoint.size:
        # "The old size MUST be equal to or lower than the checkpoint size" else "400 Bad Request"
        return _refuse(
            400, f"old size: expected at most the checkpoint size {checkpoint.size}, found {request.old_size}"
        )
    latest = stored.size if stored is not None else 0
    if request.old_size != latest:
        # "MUST check that the old size matches the size of the latest checkpoint it cosigned ... (or zero
        # if it never cosigned ...)" else 409, body the size and a newline, Content-Type text/x.tlog.size
        return Decision(409, f"old size: expected {latest}, found {request.old_size}", f"{latest}\n".encode(),
                        SIZE_CONTENT_TYPE)  # fmt: skip
    if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
        # "A checkpoint of size zero MUST have the root hash of the empty tree" else 422
        return _refuse(422, "checkpoint of size 0: expected the empty tree's root SHA-256(''), found another root")
    if request.old_size == 0 and request.proof:
        # "If the old size is zero, the consistency proof MUST be empty" else 422
        return _refuse(422, f"consistency proof from size 0: expected no lines, found {len(request.proof)}")
    old_root = stored.root if stored is not None and request.old_size else EMPTY_ROOT
    if request.old_size == checkpoint.size and checkpoint.root != old_root:
        # "If the old size matches the checkpoint size, the witness MUST check that the root hashes are
        # also identical" else 422
        return _refuse(422, f"checkpoint of size {checkpoint.size}: expected the root already cosigned, found another")
    try:
        # "MUST encode a Merkle Consistency Proof from the old size to the checkpoint size according to
        # RFC 6962, Section 2.1.2" (the same algorithm as RFC 9162 §2.1.4) else 422
        verify_consistency(request.old_size, checkpoint.size, old_root, checkpoint.root, request.proof)
    except ProofError as exc:
        return _refuse(422, f"consistency proof {request.old_size} -> {checkpoint.size}: {exc}")
    # "If all the checks above pass, the witness MUST update its record ... and respond with 200"
    return Decision(200, "ok", checkpoint=checkpoint, text=verified.text, log_signatures=verified.signatures)


# -- the client ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cosigned:
    """A 200: the witness's note signature lines (not yet verified: see :func:`add_cosignatures`)."""

    signatures: tuple[Signature, ...]

    def lines(self) -> tuple[str, ...]:
        return tuple(sig.line() for sig in self.signatures)


@dataclass(frozen=True)
class Conflict:
    """A 409: the size of the latest checkpoint the witness cosigned. Retry with a proof from it."""

    size: int


def _parse_cosignatures(body: bytes) -> tuple[Signature, ...]:
    """The 200 body: "a sequence of one or more note signature lines, each starting with the `—` character (U+2014) and
    ending with a newline character" ("add-checkpoint")."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WitnessError("witness response: expected UTF-8 signature lines, found invalid bytes", 200, body) from None
    if not text.endswith("\n"):
        raise WitnessError("witness response: expected newline-terminated signature lines, found none", 200, body)
    try:
        return tuple(parse_signature_line(line) for line in text[:-1].split("\n"))
    except C2SPFormatError as exc:
        raise WitnessError(f"witness response: {exc}", 200, body) from None


def add_checkpoint(
    url_prefix: str,
    checkpoint_note: bytes,
    old_size: int,
    proof: Sequence[bytes],
    *,
    client: httpx.Client | None = None,
    timeout: float = 10.0,
) -> Cosigned | Conflict:
    """POST ``<url_prefix>/add-checkpoint``. 200 gives :class:`Cosigned`, 409 :class:`Conflict`
    (the body must be a size and a newline, typed text/x.tlog.size); anything else, or no answer,
    raises :class:`WitnessError`. Pass a shared ``client`` to keep connections alive (the SHOULD)."""
    import httpx  # only here: the witness and `audit --help` do not pay for it

    url = url_prefix.rstrip("/") + "/add-checkpoint"
    body = format_request(checkpoint_note, old_size, proof)
    own = client is None
    http = httpx.Client(timeout=timeout) if client is None else client
    try:
        response = http.post(url, content=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise WitnessError(f"{url}: expected a response from the witness, found {type(exc).__name__}: {exc}") from None
    finally:
        if own:
            http.close()
    status, content = response.status_code, response.content
    if status == 200:
        return Cosigned(_parse_cosignatures(content))
    if status == 409:
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != SIZE_CONTENT_TYPE:
            raise WitnessError(f"{url}: expected a 409 typed {SIZE_CONTENT_TYPE}, found {media!r}", status, content)
        text = content.decode("ascii", "replace")
        if not text.endswith("\n"):
            raise WitnessError(f"{url}: expected a 409 body '<size>\\n', found {text[:40]!r}", status, content)
        try:
            return Conflict(parse_decimal(text[:-1], "witness size", WitnessRequestError))
        except WitnessRequestError as exc:
            raise WitnessError(f"{url}: {exc}", status, content) from None
    detail = content[:200].decode("utf-8", "replace").strip()
    raise WitnessError(
        f"{url}: expected 200 or 409, found {status} {response.reason_phrase}: {detail}", status, content
    )


def add_cosignatures(checkpoint_note: bytes, signatures: Iterable[Signature], witnesses: Sequence[Verifier]) -> bytes:
    """The note with the cosignatures from ``witnesses`` that verify added ("The client MUST ignore any
    cosignatures from unknown keys"). A known witness's failing cosignature raises
    :class:`~signoff.audit.c2sp_errors.NoteNotVerified`."""
    note = parse_note(checkpoint_note)
    candidates = Note(note.text, tuple(signatures))
    verified = verify_note(candidates, witnesses)
    present = {(s.name, s.key_id, s.signature) for s in note.signatures}
    added = [s for s in verified.signatures if (s.name, s.key_id, s.signature) not in present]
    return format_note(note.text, (*note.signatures, *added))
