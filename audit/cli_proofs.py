"""``audit`` verbs about checkpoints and proofs: ``checkpoint``, ``prove`` (a JSON proof, or a
``c2sp.org/tlog-proof`` receipt), ``check-proof``, ``consistency``, ``vkey`` and ``tiles``; and the
options ``verify --witness``/``--tiles`` (:mod:`signoff.audit.cli_log`). Wired into the parser by
:mod:`signoff.audit.cli`; each verb imports what it needs when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit.cli_common import add_json, emit, open_existing, verb
from signoff.audit.errors import UnusableInput

if TYPE_CHECKING:
    from signoff.audit.tlog_cosignature import CosignatureVerifier

RECEIPT_HEADER = b"c2sp.org/tlog-proof@v1\n"


def witness_verifiers(texts: list[str] | None) -> list[CosignatureVerifier]:
    """``--witness VKEY`` options as cosignature/v1 verifiers (a malformed vkey is unusable input)."""
    from signoff.audit.c2sp_errors import C2SPFormatError
    from signoff.audit.tlog_cosignature import CosignatureVerifier

    found = []
    for text in texts or []:
        try:
            found.append(CosignatureVerifier.from_vkey(text))
        except (C2SPFormatError, ValueError) as exc:
            raise UnusableInput(f"--witness: expected a witness's cosignature vkey (type 0x04), found: {exc}") from None
    return found


def cmd_vkey(args: argparse.Namespace) -> int:
    from signoff.audit.c2sp import log_vkey

    store = open_existing(args)
    vkey = log_vkey(store.rules.origin, store.public_key)
    emit(args, {"origin": store.rules.origin, "vkey": vkey, "log": store.log_id}, vkey)
    return 0


def cmd_tiles(args: argparse.Namespace) -> int:
    from signoff.audit.tlog_store import write_store_tiles

    store = open_existing(args)
    report = write_store_tiles(store, args.directory)
    data = {"directory": args.directory, "old_size": report.old_size, "size": report.size,
            "written": len(report.written)}  # fmt: skip
    emit(args, data, f"tiles of {report.size} entries in {args.directory} ({len(report.written)} files written, "
                     f"{report.old_size} entries were there already)")  # fmt: skip
    return 0


def prove_receipt(args: argparse.Namespace, store: Any, seq: int) -> int:
    """``audit prove SEQ|REVIEW --tlog-proof``: the receipt, checked before it is handed out."""
    from signoff.audit.c2sp import log_vkey
    from signoff.audit.proofs import build_tlog_proof, check_tlog_proof

    receipt = build_tlog_proof(store, seq, args.size)
    check_tlog_proof(receipt, log_vkey(store.rules.origin, store.public_key))
    if args.output:
        Path(args.output).write_bytes(receipt)
        print(f"wrote a c2sp.org/tlog-proof@v1 receipt of entry {seq} to {args.output}")
    else:
        sys.stdout.write(receipt.decode("utf-8"))
    return 0


def check_receipt(args: argparse.Namespace, path: Path) -> int:
    """``audit check-proof FILE.tlog-proof --log-vkey VKEY [--witness VKEY …] [--quorum K]``."""
    from signoff.audit.proofs import check_tlog_proof

    if not args.log_vkey:
        raise UnusableInput("--log-vkey: expected the log's vkey (`audit vkey` prints it) to check a receipt")
    witnesses = list(args.witness or [])
    quorum = args.quorum if args.quorum is not None else (1 if witnesses else 0)
    if quorum > len(witnesses):
        raise UnusableInput(f"--quorum: expected 0..{len(witnesses)} (the witnesses given), found {quorum}")
    checked = check_tlog_proof(path.read_bytes(), args.log_vkey, witnesses, quorum)
    by = f", cosigned by {' and '.join(checked.witnesses)}" if checked.witnesses else ""
    review = checked.entry.get("body", {}).get("review")
    emit(args, checked.to_json(), f"ok: entry {checked.index} ({checked.entry.get('kind')}"
                                  f"{' of ' + review if review else ''}, by {checked.entry.get('actor')}) is in "
                                  f"{checked.origin} at size {checked.size}, root {checked.root}{by}")  # fmt: skip
    return 0


def is_receipt(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(len(RECEIPT_HEADER)) == RECEIPT_HEADER


def verify_tiles(args: argparse.Namespace) -> Any:
    from signoff.audit.verify import verify_tiles as verify

    if not args.log_vkey:
        raise UnusableInput("--log-vkey: expected the log's vkey to verify a tiles mirror (`audit vkey`)")
    witnesses = witness_verifiers(args.witness)
    quorum = args.quorum if args.quorum is not None else (1 if witnesses else 0)
    return verify(args.tiles, log_vkey=args.log_vkey, witnesses=witnesses, quorum=quorum)


def add_witness_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--witness", action="append", metavar="VKEY", help="a witness you trust (its cosignature vkey; repeatable)"
    )
    parser.add_argument("--quorum", type=int, help="how many of the --witness must have cosigned (default 1)")


def log_key(text: str | None, option: str = "--log-key") -> str | None:
    """A pinned log key, checked before any verification: a malformed one is unusable input, not tampering."""
    if text is None:
        return None
    from signoff.audit.keys import decode_public

    try:
        decode_public(text)
    except ValueError as exc:
        raise UnusableInput(f"{option}: {exc} (the log key `audit init` printed)") from None
    return text


def check_proof(args: argparse.Namespace, path: Path) -> int:
    """A proof file, either kind: a ``.tlog-proof`` receipt, or an ``audit prove`` JSON proof."""
    from signoff.audit.canonical import decode
    from signoff.audit.proofs import check_inclusion

    if is_receipt(path):
        return check_receipt(args, path)

    pinned = log_key(args.log_key)
    try:
        bundle = decode(path.read_bytes(), "proof")
    except ValueError as exc:
        raise UnusableInput(f"{path}: expected an `audit prove` file, found {exc}") from None
    result = check_inclusion(bundle, pinned)
    emit(args, result, f"ok: entry {result['seq']} ({result['kind']}) is in log {result['log']} of "
                       f"{result['size']} entries, root {result['root']}, signed by the log key")  # fmt: skip
    return 0


def cmd_check_proof(args: argparse.Namespace) -> int:
    path = Path(args.proof)
    if not path.is_file():
        raise UnusableInput(f"{path}: expected an `audit prove` file, found nothing")
    return check_proof(args, path)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    store = open_existing(args)
    point = store.checkpoint(args.key)
    text = json.dumps(point.to_json(), indent=2) + "\n" if args.json else point.note
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


def cmd_prove(args: argparse.Namespace) -> int:
    from signoff.audit.proofs import build_inclusion, check_inclusion

    store = open_existing(args)
    size = store.size()
    seq = _seq_of(store, args.target)
    if not 0 <= seq < size:
        raise UnusableInput(f"seq {seq}: expected 0..{size - 1}, found no such entry")
    if args.tlog_proof:
        return prove_receipt(args, store, seq)
    args.seq = seq
    bundle = build_inclusion(store, args.seq, args.size)
    check_inclusion(bundle)  # never hand out a proof that does not check
    text = json.dumps(bundle, indent=2, ensure_ascii=False)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"wrote a proof of entry {args.seq} under the checkpoint of size {bundle['size']} to {args.output}")
    else:
        print(text)
    return 0


def _seq_of(store: Any, target: str) -> int:
    """A seq number, or a review id: the seq of its decision (what a receipt of the review proves)."""
    if target.isdigit():
        return int(target)
    from signoff.audit.reviews import ReviewService

    review = ReviewService(store).get(target)  # UnknownReview: exit 2
    if review.decision_seq is None:
        raise UnusableInput(f"{target}: expected a decided review, found it {review.status}; prove a seq instead")
    return review.decision_seq


def cmd_consistency(args: argparse.Namespace) -> int:
    from signoff.audit.merkle import ProofError
    from signoff.audit.proofs import consistency
    from signoff.audit.verify import load_checkpoint

    store = open_existing(args)
    old = load_checkpoint(Path(args.old))
    if (old.origin != store.rules.origin) if old.note else (old.log != store.log_id):
        found = old.log or old.origin
        expected = f"a checkpoint of log {store.log_id} ({store.rules.origin})"
        raise UnusableInput(f"{args.old}: expected {expected}, found {found}")
    try:
        result = consistency(store, old)
    except ProofError as exc:
        raise ProofError(f"the log is not an extension of {args.old}: {exc}") from None
    emit(args, result, json.dumps(result, indent=2))
    return 0


def register(sub: Any) -> None:
    check = verb(
        sub,
        "check-proof",
        "check an `audit prove` file offline: the entry, its path and the signed checkpoint",
        "audit check-proof proof-42.json --log-key ed25519:…",
        cmd_check_proof,
    )
    check.add_argument("proof", help="an `audit prove` file, or a .tlog-proof receipt (`audit prove --tlog-proof`)")
    check.add_argument("--log-key", help="pin the log's public key (ed25519:<base64>)")
    check.add_argument("--log-vkey", help="for a receipt: the log's vkey (`audit vkey`)")
    add_witness_options(check)
    add_json(check)

    point = verb(
        sub,
        "checkpoint",
        "sign the current tree head with the log key (a C2SP checkpoint note), record it on the log, print it",
        "audit --key signoff-log-key.pem checkpoint -o checkpoint.txt   # keep it somewhere else",
        cmd_checkpoint,
    )
    point.add_argument("-o", "--output", help="also write it to this file")
    add_json(point)

    prove = verb(
        sub,
        "prove",
        "write a self-contained inclusion proof of one entry (or a review's decision) under a signed checkpoint",
        "audit prove rv_5205944c20622598 --tlog-proof -o receipt.tlog-proof && audit check-proof receipt.tlog-proof "
        '--log-vkey "$(audit vkey)"',
        cmd_prove,
    )
    prove.add_argument("target", help="the entry's seq, or a review id (its decision)")
    prove.add_argument(
        "--tlog-proof", action="store_true", help="write a c2sp.org/tlog-proof@v1 receipt (cosignatures included)"
    )
    prove.add_argument("--size", type=int, help="prove under the stored checkpoint of this size (default: the latest)")
    prove.add_argument("-o", "--output", help="write the proof to this file (default: stdout)")

    cons = verb(
        sub,
        "consistency",
        "prove the log only grew since a checkpoint you kept (RFC 9162 consistency proof)",
        "audit consistency cp.json",
        cmd_consistency,
    )
    cons.add_argument("old", help="a checkpoint JSON file you kept")
    add_json(cons)

    vkey = verb(
        sub, "vkey", "print the log's verifier key (c2sp.org/signed-note): what witnesses and auditors trust",
        "audit --store signoff.db vkey", cmd_vkey,
    )  # fmt: skip
    add_json(vkey)
    tiles = verb(
        sub, "tiles",
        "write (or bring up to date) the log as c2sp.org/tlog-tiles under its newest checkpoint, for any HTTP server",
        "audit --store signoff.db tiles /var/www/log && audit verify --tiles https://log.example.org/ --log-vkey …",
        cmd_tiles,
    )  # fmt: skip
    tiles.add_argument("directory", help="the directory to write (only what is new since its checkpoint)")
    add_json(tiles)


__all__ = ["add_witness_options", "check_proof", "check_receipt", "is_receipt", "log_key", "prove_receipt",
           "register", "verify_tiles", "witness_verifiers"]  # fmt: skip
