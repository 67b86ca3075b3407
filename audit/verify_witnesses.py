"""``audit verify --witness VKEY … --quorum K``: the log checked against witnesses the auditor trusts, not
against the operator (DESIGN.md "Vouched for outside the operator").

After the log itself verifies (every entry, and every stored checkpoint against the tree it heads):

1. **Offline**: the newest stored checkpoint cosigned (c2sp.org/tlog-cosignature) by at least K of the
   given witnesses is found. Its log signature and its root were checked with the log; the cosignatures
   are checked here against the auditor's vkeys only. None: the log is not vouched for (exit 1).
2. **Online** (unless ``--offline``): each given witness is asked for the newest checkpoint of this origin
   it cosigned (c2sp.org/tlog-witness "Monitor Retrieval Mechanism", at the URL the log names for it).
   Its cosignature must verify; the log must be at least that long and have that root at that size.
   Otherwise the log was truncated, rolled back or forked (exit 1). A witness that cannot be reached is
   a note, not a failure: the offline check still stands.

Pure but for the HTTP fetch, which takes an ``httpx.Client``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from signoff.audit.c2sp_errors import C2SPError
from signoff.audit.errors import VerificationFailed
from signoff.audit.signed_note import Note, parse_note, verify_note
from signoff.audit.tlog_checkpoint import parse
from signoff.audit.tlog_cosignature import CosignatureVerifier


@dataclass
class Witnessed:
    """What the witnesses vouch for: the newest checkpoint a quorum cosigned, and who."""

    size: int | None = None
    by: list[str] = field(default_factory=list)
    quorum: int = 0
    after: int = 0  # entries after that checkpoint
    online: dict[str, str] = field(default_factory=dict)  # witness -> what its own newest checkpoint said

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "by": self.by, "quorum": self.quorum, "after": self.after, "online": self.online}


def cosigners(note: str, witnesses: Sequence[CosignatureVerifier]) -> list[str]:
    """The given witnesses whose cosignature on ``note`` verifies; a failing one is ignored, never counted."""
    parsed = parse_note(note.encode("utf-8"))
    found = []
    for witness in witnesses:
        mine = tuple(s for s in parsed.signatures if (s.name, s.key_id) == (witness.name, witness.key_id))
        if not mine:
            continue
        try:
            verify_note(Note(parsed.text, mine), [witness])
        except C2SPError:
            continue
        found.append(witness.name)
    return found


def newest_cosigned(
    notes: Sequence[tuple[int, str]], witnesses: Sequence[CosignatureVerifier], quorum: int, size: int
) -> Witnessed:
    """Step 1 over the stored note checkpoints ``(size, note)``, newest first is not required."""
    for point_size, note in sorted(notes, reverse=True):
        by = cosigners(note, witnesses)
        if len(by) >= quorum:
            return Witnessed(point_size, by, quorum, size - point_size)
    names = ", ".join(w.name for w in witnesses)
    raise VerificationFailed(
        None, "witnessed checkpoint", f"a stored checkpoint cosigned by {quorum} of {names}", "none"
    )


def check_online(
    witnessed: Witnessed,
    *,
    origin: str,
    witnesses: Sequence[CosignatureVerifier],
    urls: Mapping[str, str],
    size: int,
    root_at: Callable[[int], str],
    fetch: Callable[[str], bytes | None],
) -> None:
    """Step 2: each witness's newest cosigned checkpoint of ``origin`` against the log (raises
    ``VerificationFailed`` naming the witness). ``fetch(url)`` returns the body, ``None`` for a 404, and
    raises ``OSError`` when the witness cannot be reached; ``root_at(n)`` is the log's root at size n."""
    origin_hash = hashlib.sha256(origin.encode("utf-8")).hexdigest()
    for witness in witnesses:
        url = urls.get(witness.name)
        if url is None:
            witnessed.online[witness.name] = "not asked: the log names no URL for it"
            continue
        try:
            body = fetch(f"{url.rstrip('/')}/{origin_hash}/checkpoint")
        except OSError as exc:
            witnessed.online[witness.name] = f"unreachable: {exc}"
            continue
        if body is None:
            witnessed.online[witness.name] = "has cosigned no checkpoint of this log"
            continue
        try:
            parsed = parse_note(body)
            point = parse(parsed.text)
        except C2SPError as exc:
            raise VerificationFailed(None, f"witness {witness.name}", "its newest checkpoint", str(exc)) from None
        if point.origin != origin or witness.name not in cosigners(body.decode("utf-8"), [witness]):
            raise VerificationFailed(
                None, f"witness {witness.name}", f"a checkpoint of {origin} it cosigned", "none that verifies"
            )
        if point.size > size:
            raise VerificationFailed(
                size, f"witness {witness.name} (truncation or rollback)",
                f"a log of at least the {point.size} entries it cosigned", f"{size} entries",
            )  # fmt: skip
        found = root_at(point.size)
        if found != "sha256:" + point.root.hex():
            raise VerificationFailed(
                point.size - 1, f"witness {witness.name} (fork)",
                f"the root it cosigned at size {point.size}, sha256:{point.root.hex()}", found,
            )  # fmt: skip
        witnessed.online[witness.name] = f"agrees at size {point.size}"


__all__ = ["Witnessed", "check_online", "cosigners", "newest_cosigned"]
