"""An evidence pack (issue 23 §4): what an auditor files, and checks offline with ``audit verify DIR``.

``audit evidence --from DAY --to DAY [--tool GLOB] --out DIR`` writes, for the reviews opened in those days:

* ``decisions.csv``: one row per review (:mod:`signoff.audit.evidence_rows`);
* ``entries.jsonl``: the slice of the log that covers them, each entry's exact bytes, one per line: from
  the entry just before the range (or entry 0) to the last entry about those reviews, and at least to the
  entry just after the range (or the checkpoint's last entry), so that its ends show nothing is left out;
* ``trust.jsonl`` and ``trust-proofs.json``: the entries before the slice that say who may write and sign
  what (the log key, the rules, admins, reviewers, keys, delegations, policies, witnesses), each with its
  RFC 9162 inclusion path under the pack's checkpoint, so that the slice's signatures can be checked;
* ``checkpoint.txt``: the newest C2SP note checkpoint, cosignatures included; ``anchor.tlog-proof``: the
  slice's last entry under it (c2sp.org/tlog-proof); the hash chain back from it proves every line;
* ``receipts/<review>.tlog-proof``: each decision's receipt under the same checkpoint;
* ``first-checkpoint.txt`` and ``consistency.txt``: the first note checkpoint that covers the slice's first
  entry, and the RFC 9162 consistency proof from it to ``checkpoint.txt`` (one base64 hash per line);
* ``manifest.json`` and ``README.txt``: what the pack holds and how to check it.

Values beside a sealed log are not in the pack: entries and rows hold commitments and digests.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit import c2sp
from signoff.audit.entry import Entry, format_time
from signoff.audit.errors import StoreError, UnusableInput
from signoff.audit.evidence_rows import Range, rows, to_csv
from signoff.audit.proofs import build_tlog_proof
from signoff.audit.reader import parse_entry

if TYPE_CHECKING:
    from signoff.audit.store import Store

FORMAT = "signoff-evidence/1"
# What the slice's writers and signatures are checked against (SPEC.md §3), proven one by one.
TRUST_KINDS = (
    "key.enrolled", "log.configured", "key.revoked", "reviewer.enrolled", "reviewer.disabled", "policy.set",
    "delegation.granted", "delegation.revoked", "witness.added", "witness.removed", "witness.quorum",
)  # fmt: skip

README = """Signoff evidence pack: the reviews opened from {since} to {until} (UTC, until excluded){tool}.

decisions.csv        one row per review: tool, agent, requester, opened, decided, by whom (and for whom),
                     outcome, edited or not, the digest of the args it runs with, what ran and when
entries.jsonl        the log's entries {first}..{last}, each exactly as the log holds it (RFC 8785 bytes)
trust.jsonl          the entries before them that say who may write and sign what, with their
trust-proofs.json    inclusion paths under the checkpoint
checkpoint.txt       the log's signed checkpoint of size {size} (a C2SP note), with its witnesses' cosignatures
anchor.tlog-proof    entry {last} in that checkpoint (c2sp.org/tlog-proof); the hash chain proves the rest
receipts/            each decision's receipt in that checkpoint
first-checkpoint.txt the first checkpoint covering entry {first}, and the consistency proof from it to
consistency.txt      checkpoint.txt (the log only grew between them)

Check it offline, trusting the log's key and your witnesses rather than this pack:

    audit verify {dirname} --log-vkey '{vkey}' [--witness VKEY ... --quorum K]
    audit check-proof {dirname}/receipts/<review>.tlog-proof --log-vkey '{vkey}'

`audit verify DIR` checks the checkpoint's signature (and cosignatures), that every entry is the log's
(the anchor's inclusion and the hash chain), that the slice's ends leave no review of the range out,
each entry's writer and signature against the keys the pack proves, each review's decisions, every row
of decisions.csv against the entries (a row missing, added or changed is named), each receipt and the
consistency proof. Exit code 0: intact; 1: something was changed, removed or added; 2: unusable input.
"""


def build(store: Store, out: Path, scope: Range) -> dict[str, Any]:
    """Write the pack for ``scope`` into ``out`` (a new or empty directory); return its manifest."""
    if out.exists() and any(out.iterdir()):
        raise UnusableInput(f"--out {out}: expected a new or empty directory, found files in it")
    points = [c for c in store.checkpoints() if c.note]
    if not points:
        raise StoreError("expected a C2SP note checkpoint to anchor the pack, found none; run `audit checkpoint`")
    point = points[-1]
    first, last = _bounds(store, scope, point.size)
    out.mkdir(parents=True, exist_ok=True)
    slice_entries = [parse_entry(raw) for _seq, _hash, raw in store.iter_raw(first, last + 1)]
    with (out / "entries.jsonl").open("wb") as handle:
        for item in slice_entries:
            handle.write(item.raw + b"\n")
    found = rows(slice_entries, scope)
    (out / "decisions.csv").write_text(to_csv(found), encoding="utf-8", newline="")
    _write_trust(store, out, first, point.size)
    (out / "checkpoint.txt").write_text(point.note, encoding="utf-8")
    (out / "anchor.tlog-proof").write_bytes(build_tlog_proof(store, last, point.size))
    receipts = out / "receipts"
    receipts.mkdir()
    for row in found:
        if row.decided_seq:
            (receipts / f"{row.review}.tlog-proof").write_bytes(
                build_tlog_proof(store, int(row.decided_seq), point.size)
            )
    opening = next(c for c in points if c.size > first)
    (out / "first-checkpoint.txt").write_text(opening.note, encoding="utf-8")
    proof = store.consistency_proof(opening.size, point.size) if opening.size < point.size else []
    (out / "consistency.txt").write_text("".join(base64.b64encode(h).decode() + "\n" for h in proof), encoding="ascii")
    vkey = c2sp.log_vkey(store.rules.origin, store.public_key)
    manifest = {
        "format": FORMAT,
        "log": store.log_id,
        "origin": store.rules.origin,
        "log_vkey": vkey,
        "since": scope.since,
        "until": scope.until,
        "tool": scope.tool,
        "first_seq": first,
        "last_seq": last,
        "checkpoint_size": point.size,
        "first_checkpoint_size": opening.size,
        "reviews": len(found),
        "decided": sum(1 for r in found if r.decided_seq),
        "made_at": format_time(store.clock()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    note = f", tools {scope.tool}" if scope.tool else ""
    text = README.format(
        since=scope.since, until=scope.until, tool=note, first=first, last=last, size=point.size, vkey=vkey,
        dirname=out.name,
    )  # fmt: skip
    (out / "README.txt").write_text(text, encoding="utf-8")
    return manifest


def _bounds(store: Store, scope: Range, size: int) -> tuple[int, int]:
    """The slice ``[first, last]``: from the entry before the range's first entry (or 0) to the entry after
    its last one (or the checkpoint's last), and on to the last entry about its reviews; one streamed pass."""
    first_in = last_in = -1
    reviews: set[str] = set()
    frontiers: set[str] = set()
    last_about = -1
    for seq, _hash, raw in store.iter_raw(0, size):
        item = parse_entry(raw)
        if scope.since <= item.at < scope.until:
            first_in = seq if first_in < 0 else first_in
            last_in = seq
        if scope.opens(item):
            reviews.add(str(item.body.get("review")))
            frontier = item.body.get("frontier")
            if isinstance(frontier, str) and frontier:
                frontiers.add(frontier)
        if item.body.get("review") in reviews or item.body.get("frontier") in frontiers:
            last_about = seq
    if first_in < 0:
        raise UnusableInput(
            f"--from/--to: expected entries from {scope.since} to {scope.until} in the log's first {size} entries "
            "(its newest checkpoint), found none"
        )
    first = max(0, first_in - 1)
    last = min(size - 1, max(last_in + 1, last_about))
    return first, last


def _write_trust(store: Store, out: Path, first: int, size: int) -> None:
    found: list[Entry] = []
    for kind in TRUST_KINDS:
        found.extend(store.entries(0, first, kind=kind))
    found.sort(key=lambda e: e.seq)
    with (out / "trust.jsonl").open("wb") as handle:
        for item in found:
            handle.write(item.raw + b"\n")
    paths = {str(e.seq): [base64.b64encode(h).decode() for h in store.inclusion_proof(e.seq, size)] for e in found}
    (out / "trust-proofs.json").write_text(
        json.dumps({"size": size, "paths": paths}, indent=1) + "\n", encoding="utf-8"
    )
