"""A signed tree head of the log: the :class:`Checkpoint` record (RFC 9162 §2.1, c2sp.org/tlog-checkpoint).

Pure data and its signature check, apart from :mod:`signoff.audit.tree` (the tree in the store), so
that verifying a file or a proof imports no database code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signoff.audit.canonical import canonical
from signoff.audit.errors import AuditError
from signoff.audit.keys import verify_signature

__all__ = ["Checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head of the log.

    Since C2SP checkpoints (issue 18) it is a ``c2sp.org/tlog-checkpoint`` signed note (``note``: its
    text, the log's Ed25519 note signature and any witness cosignatures); ``sig`` is then empty. A
    checkpoint recorded before is ``{"log", "size", "root", "at"}`` signed by the log key (``sig``),
    and keeps verifying as such (SPEC.md "Checkpoints").
    """

    log: str
    size: int
    root: str
    at: str
    sig: dict[str, str]
    note: str = ""

    def body(self) -> dict[str, Any]:
        return {"log": self.log, "size": self.size, "root": self.root, "at": self.at}

    def to_json(self) -> dict[str, Any]:
        if self.note:
            return {**self.body(), "note": self.note}
        return {**self.body(), "sig": self.sig}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        try:
            head = (str(data["log"]), int(data["size"]), str(data["root"]), str(data["at"]))
            if "note" in data:
                return cls(*head, {}, str(data["note"]))
            return cls(*head, dict(data["sig"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"expected a checkpoint with log, size, root, at and sig (or note), found {exc}") from None

    @property
    def origin(self) -> str:
        """The origin line of a note checkpoint ("" for a JSON one)."""
        return self.note.split("\n", 1)[0] if self.note else ""

    def verify(self, public_key: str) -> bool:
        """Signed by the log key ``public_key`` (``ed25519:<base64>``): the JSON signature, or the note's
        Ed25519 signature under the origin's key name (c2sp.org/signed-note), whose text must say this
        checkpoint's size and root."""
        if not self.note:
            return verify_signature(public_key, self.sig, canonical(self.body()))
        from signoff.audit import c2sp

        try:
            point = c2sp.verify_log_note(self.note.encode("utf-8"), self.origin, public_key)
        except (AuditError, ValueError):
            return False
        return point.size == self.size and "sha256:" + point.root.hex() == self.root
