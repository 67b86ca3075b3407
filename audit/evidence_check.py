"""Checking an evidence pack offline (``audit verify DIR``; the pack is :mod:`signoff.audit.evidence`'s).

Nothing here trusts the pack's own word. The checkpoint must be signed by the log key (the auditor's
``--log-vkey``; the pack's own vkey is used only when none is given, and the report says so) and cosigned by
a quorum of the auditor's witnesses. The anchor proves the slice's last entry in that checkpoint, and each
line's ``prev`` links it to the line before, so every line is the log's own entry at its seq and none is
missing in between. The slice's ends must lie outside the range (or at the log's start, or at the
checkpoint's end), so no review of the range is left out, as the log's clock runs forward (a time going
backwards inside the slice is named). Each trust entry is proven by its own inclusion path; with them, each
entry's writer and signature are checked (:mod:`signoff.audit.trust`) and each decision's reviewer had the
role, their own or lent (:mod:`signoff.audit.delegation`). Each review's decisions are replayed as the gate
replays them. ``decisions.csv`` must be exactly the rows the slice gives. Receipts and the consistency proof
are checked last. The first thing that does not hold raises :class:`VerificationFailed` naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from signoff.audit import delegation, merkle, rules, trust
from signoff.audit.c2sp_errors import C2SPFormatError
from signoff.audit.canonical import canonical, parse_canonical
from signoff.audit.decided import review_from_sealed
from signoff.audit.entry import DECISIONS, ZERO_HASH, Entry, format_hash, from_json, parse_hash
from signoff.audit.errors import AuditError, NotAllowed, UnusableInput, VerificationFailed
from signoff.audit.evidence import FORMAT, TRUST_KINDS
from signoff.audit.evidence_rows import HEADER, Range, from_csv, rows
from signoff.audit.merkle import ProofError
from signoff.audit.proofs import check_tlog_proof
from signoff.audit.tlog_checkpoint import verify_checkpoint
from signoff.audit.vkeys import verifier_from_vkey


@dataclass
class PackReport:
    """What a pack that held proves."""

    log: str
    since: str
    until: str
    first_seq: int
    last_seq: int
    size: int
    reviews: int
    receipts: int
    witnesses: tuple[str, ...]
    vkey_from_pack: bool
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}}


def _read(directory: Path, name: str) -> bytes:
    path = directory / name
    if not path.is_file():
        raise UnusableInput(f"{directory}: expected an evidence pack (`audit evidence`) with {name}, found none")
    return path.read_bytes()


def _entries(data: bytes, what: str) -> list[Entry]:
    found = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line:
            continue
        try:
            parsed, _simple = parse_canonical(line)
        except ValueError as exc:
            raise VerificationFailed(
                None, f"{what} line {number}", "an entry's canonical bytes (RFC 8785)", str(exc)
            ) from None
        found.append(from_json(parsed, line))
    return found


def check_pack(
    directory: Path, *, log_vkey: str | None = None, witnesses: Sequence[str] = (), quorum: int = 0
) -> PackReport:
    """Check the pack in ``directory``; raises :class:`VerificationFailed` (exit 1) or ``UnusableInput`` (2)."""
    try:
        manifest = json.loads(_read(directory, "manifest.json"))
    except ValueError as exc:
        raise UnusableInput(f"{directory}/manifest.json: expected JSON, found: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UnusableInput(f"{directory}/manifest.json: expected format {FORMAT!r}, found {manifest.get('format')!r}")
    vkey = log_vkey or str(manifest.get("log_vkey") or "")
    if not 0 <= quorum <= len(witnesses):
        raise UnusableInput(f"--quorum: expected 0..{len(witnesses)} (the witnesses given), found {quorum}")
    _check_keys(vkey, "--log-vkey" if log_vkey else f"{directory}/manifest.json log_vkey", witnesses)
    scope = Range(str(manifest.get("since")), str(manifest.get("until")), str(manifest.get("tool") or ""))
    # 1. the anchor: the slice's last entry in the log key's checkpoint, cosigned by the witnesses given
    anchor_proof = _read(directory, "anchor.tlog-proof")
    try:
        anchor = check_tlog_proof(anchor_proof, vkey, witnesses, quorum)
    except (ProofError, AuditError) as exc:  # the keys were checked: a file that does not parse was altered
        raise VerificationFailed(
            None, "anchor.tlog-proof", "the slice's last entry in the log's checkpoint", str(exc)
        ) from None
    if _read(directory, "checkpoint.txt") not in anchor_proof:
        raise VerificationFailed(None, "checkpoint.txt", "the checkpoint the anchor proves the slice in", "another one")
    # 2. the slice: canonical lines, dense seqs, each linked to the one before, the last the anchor's entry
    entries = _entries(_read(directory, "entries.jsonl"), "entries.jsonl")
    if not entries:
        raise VerificationFailed(None, "entries.jsonl", "the slice of the log", "no entry")
    first, last = entries[0], entries[-1]
    if (last.seq, last.raw) != (anchor.index, canonical(anchor.entry)):  # the anchor's extra is canonical
        raise VerificationFailed(
            last.seq, "entries.jsonl", f"its last line to be the anchor's entry {anchor.index}", "another entry"
        )
    for before, item in zip(entries, entries[1:], strict=False):
        if item.seq != before.seq + 1:
            raise VerificationFailed(
                item.seq,
                "entries.jsonl",
                f"seq {before.seq + 1} after seq {before.seq}",
                f"seq {item.seq} (an entry removed or added)",
            )
        if item.prev != before.hash:
            raise VerificationFailed(item.seq, "prev link", before.hash, item.prev)
        if item.at < before.at:
            raise VerificationFailed(
                item.seq, "entry time", f"no earlier than {before.at} (the seq before it)", item.at
            )
    if first.seq == 0 and first.prev != ZERO_HASH:
        raise VerificationFailed(0, "prev link", ZERO_HASH, first.prev)
    # 3. its ends: nothing of the range outside it
    if first.seq != 0 and first.at >= scope.since:
        raise VerificationFailed(first.seq, "slice start", f"an entry before {scope.since} (or entry 0)", first.at)
    if last.at < scope.until and last.seq != anchor.size - 1:
        raise VerificationFailed(
            last.seq, "slice end", f"an entry from {scope.until} on (or the checkpoint's last)", last.at
        )
    # 4. the trust entries, each proven in the checkpoint, then every writer and signature
    trusted = _trust_entries(directory, anchor.size, anchor.root, first.seq)
    _check_writers(trusted, entries, manifest)
    # 5. the rows: exactly what the slice gives
    derived = rows(entries, scope)
    _check_rows(derived, _read(directory, "decisions.csv").decode("utf-8"))
    for row in derived:
        own = [e for e in entries if e.body.get("review") == row.review]
        problem = review_from_sealed(row.review, own, True).problem
        if problem:
            raise VerificationFailed(
                int(row.opened_seq), "review decisions", "decisions that fit their review", problem
            )
    # 6. receipts and the consistency proof
    receipts = _check_receipts(directory, derived, entries, vkey, witnesses, quorum)
    _check_consistency(directory, vkey, anchor.size, anchor.root)
    report = PackReport(
        str(manifest.get("log")), scope.since, scope.until, first.seq, last.seq, anchor.size, len(derived),
        receipts, anchor.witnesses, log_vkey is None,
    )  # fmt: skip
    if log_vkey is None:
        report.notes.append("the log's vkey came from the pack itself: pass --log-vkey to trust your own copy")
    return report


def _check_keys(vkey: str, source: str, witnesses: Sequence[str]) -> None:
    """The auditor's keys (and the pack's own vkey, when none is given), before any file is checked: a
    key that does not parse is unusable input (exit 2) naming where it came from, so that from then on a
    receipt or proof that does not parse is the pack's fault (exit 1, naming its file)."""
    for where, text in [(source, vkey), *(("--witness", w) for w in witnesses)]:
        try:
            verifier_from_vkey(text)
        except C2SPFormatError as exc:
            raise UnusableInput(f"{where}: {exc}") from None


def _leaf_of(entry: dict[str, Any]) -> str:
    return format_hash(merkle.leaf_hash(canonical(entry)))


def _trust_entries(directory: Path, size: int, root: str, first: int) -> list[Entry]:
    found = _entries(_read(directory, "trust.jsonl"), "trust.jsonl")
    try:
        proofs = json.loads(_read(directory, "trust-proofs.json"))
        paths = {int(k): [base64.b64decode(h, validate=True) for h in v] for k, v in proofs["paths"].items()}
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise UnusableInput(f"{directory}/trust-proofs.json: expected the trust entries' paths, found: {exc}") from None
    for item in found:
        if item.seq >= first or item.kind not in TRUST_KINDS:
            raise VerificationFailed(
                item.seq, "trust.jsonl", "only trust entries before the slice", f"{item.kind} at seq {item.seq}"
            )
        try:
            merkle.verify_inclusion(
                merkle.leaf_hash(item.raw), item.seq, size, paths.get(item.seq, []), parse_hash(root)
            )
        except ProofError as exc:
            raise VerificationFailed(
                item.seq, "trust entry inclusion (RFC 9162)", f"in the checkpoint of size {size}", str(exc)
            ) from None
    if first > 0 and (not found or found[0].seq != 0):
        raise VerificationFailed(0, "trust.jsonl", "entry 0 (the log key) and the rules", "none")
    return found


def _check_writers(trusted: list[Entry], entries: list[Entry], manifest: dict[str, Any]) -> None:
    """Who wrote each entry and its signature, replayed from the log key on; each decision's reviewer."""
    ring = trust.Keyring(trust.LogRules(str(manifest.get("log"))))
    reviewers: dict[str, rules.ReviewerState] = {}
    lent = delegation.Delegations()
    opened: dict[str, dict[str, Any]] = {}
    for item in [*trusted, *entries]:
        state = reviewers.get(item.actor)
        try:
            ring.check(
                item.seq,
                item.kind,
                item.actor,
                item.body,
                item.sig,
                legacy_admin=bool(state and state.enabled and "admin" in state.roles),
            )
            if item.kind in trust.ENROLMENT or item.kind == "log.configured" or item.seq == 0:
                ring.apply(item.seq, item.kind, item.actor, item.body)
        except NotAllowed as exc:
            raise VerificationFailed(
                item.seq, "writer and signature", f"an entry {item.actor} may write, signed", str(exc)
            ) from None
        if item.kind == "reviewer.enrolled":
            name = str(item.body.get("reviewer"))
            reviewers[name] = rules.ReviewerState(
                name, tuple(item.body.get("roles") or ()), tuple(item.body.get("tools") or ())
            )
        elif item.kind == "reviewer.disabled" and str(item.body.get("reviewer")) in reviewers:
            was = reviewers[str(item.body.get("reviewer"))]
            reviewers[was.id] = rules.ReviewerState(was.id, was.roles, was.tools, False)
        elif item.kind in delegation.KINDS:
            lent.apply(item.seq, item.kind, item.actor, item.body, item.at)
        elif item.kind == "review.opened":
            opened[str(item.body.get("review"))] = item.body
        elif item.kind in DECISIONS and str(item.body.get("review")) in opened:
            _check_decider(item, opened[str(item.body["review"])], reviewers, lent)


def _check_decider(
    item: Entry, body: dict[str, Any], reviewers: dict[str, rules.ReviewerState], lent: delegation.Delegations
) -> None:
    tool = str((body.get("call") or {}).get("tool"))
    role = (body.get("policy") or {}).get("role")
    who = reviewers.get(item.actor)
    try:
        if "acting_for" in item.body:
            giver = item.body["acting_for"]
            who = delegation.acting(item.actor, giver, item.at, who, reviewers.get(str(giver)), lent.to(item.actor))
        rules.check_decider(
            item.actor, who, rules.ReviewState(str(item.body.get("review")), "", tool, "pending", None, "", role, None)
        )
    except NotAllowed as exc:
        raise VerificationFailed(
            item.seq, "review rule 2", "a decision by a reviewer covering the tool", str(exc)
        ) from None


def _check_rows(derived: list[Any], text: str) -> None:
    try:
        listed = from_csv(text)
    except ValueError as exc:
        raise VerificationFailed(None, "decisions.csv", "a CSV with the pack's header", str(exc)) from None
    want = {row.review: astuple(row) for row in derived}
    have = {line[0]: line for line in listed}
    for review, values in want.items():
        if review not in have:
            raise VerificationFailed(
                None, "decisions.csv", f"a row for review {review}, opened in the range", "none (a row removed)"
            )
        if have[review] != values:
            changed = [name for name, a, b in zip(HEADER, values, have[review], strict=True) if a != b]
            raise VerificationFailed(
                None, "decisions.csv", f"review {review}'s row as the log gives it", f"other {', '.join(changed)}"
            )
    extra = sorted(set(have) - set(want))
    if extra or len(listed) != len(have):
        raise VerificationFailed(
            None,
            "decisions.csv",
            "one row per review of the range",
            f"rows not in the log's range: {extra or 'a repeated row'}",
        )


def _check_receipts(
    directory: Path, derived: list[Any], entries: list[Entry], vkey: str, witnesses: Sequence[str], quorum: int
) -> int:
    by_seq = {e.seq: e for e in entries}
    checked = 0
    for row in derived:
        if not row.decided_seq:
            continue
        name = f"receipts/{row.review}.tlog-proof"
        if not (directory / name).is_file():
            raise VerificationFailed(int(row.decided_seq), name, "the receipt of the review's decision", "no file")
        try:
            receipt = check_tlog_proof(_read(directory, name), vkey, witnesses, quorum)
        except (ProofError, AuditError) as exc:  # the keys were checked: a file that does not parse was altered
            raise VerificationFailed(int(row.decided_seq), name, "a receipt that holds", str(exc)) from None
        decided = by_seq.get(int(row.decided_seq))
        if decided is None or receipt.index != decided.seq or _leaf_of(receipt.entry) != decided.hash:
            raise VerificationFailed(
                int(row.decided_seq),
                f"receipts/{row.review}.tlog-proof",
                "the review's decision entry",
                f"entry {receipt.index}",
            )
        checked += 1
    return checked


def _check_consistency(directory: Path, vkey: str, size: int, root: str) -> None:
    try:
        verifier = verifier_from_vkey(vkey)
        opening = verify_checkpoint(_read(directory, "first-checkpoint.txt"), [verifier]).checkpoint
        proof = [base64.b64decode(line, validate=True) for line in _read(directory, "consistency.txt").decode().split()]
        merkle.verify_consistency(opening.size, size, opening.root, parse_hash(root), proof)
    except (C2SPFormatError, ProofError, binascii.Error, ValueError) as exc:
        raise VerificationFailed(
            None, "consistency.txt", f"the log growing from first-checkpoint.txt to size {size}", str(exc)
        ) from None
