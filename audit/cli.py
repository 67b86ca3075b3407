"""The ``audit`` command: create, inspect, prove and verify a Signoff log.

Errors become a message and an exit code here, in one place: 0 intact / done,
1 tampered or invalid (or a refused operation), 2 unusable input.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from signoff.audit import merkle
from signoff.audit.entry import Entry, parse_hash
from signoff.audit.errors import AuditError, ReviewError, UnusableInput
from signoff.audit.reviews import ReviewService
from signoff.audit.store import Store, open_store
from signoff.audit.verify import Report, load_checkpoint, verify_file, verify_store

DEFAULT_STORE = "sqlite:///signoff.db"
DEFAULT_KEY = "signoff-log-key.pem"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _progress(total: int) -> Callable[[int], None] | None:
    if not sys.stderr.isatty() or total < 20000:
        return None

    def show(done: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write(f"\rverifying [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _print_entry(item: Entry, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(item.raw.decode("utf-8") + "\n")
        return
    body = item.body
    subject = body.get("review") or body.get("frontier") or body.get("reviewer") or body.get("actor") or ""
    detail = ""
    if item.kind == "review.opened":
        detail = f"{body['call']['tool']} {json.dumps(body['call']['args'], ensure_ascii=False)[:80]}"
    elif item.kind == "review.rejected":
        detail = f"reason: {body.get('reason', '')[:80]}"
    elif item.kind == "review.edited":
        detail = f"patch: {json.dumps(body.get('patch'), ensure_ascii=False)[:80]}"
    signed = " signed" if item.sig else ""
    print(f"{item.seq:>6}  {item.at}  {item.kind:<18} {item.actor:<32} {subject} {detail}{signed}".rstrip())


def _report(report: Report, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.ok:
        print(f"ok: log {report.log} intact, {report.size} entries, root {report.root}")
        for note in report.notes:
            print(f"   {note}")
        if report.checkpoints:
            print(f"   {report.checkpoints} checkpoint(s) checked")
    else:
        assert report.failure is not None
        print(f"TAMPERED or INVALID: {report.failure}", file=sys.stderr)
    return 0 if report.ok else 1


def cmd_init(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    info = store.init_log(args.key)
    print(f"created log {info.id} in {args.store}")
    print(f"log key: {info.public_key} (private key in {args.key}, mode 0600)")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    against = load_checkpoint(Path(args.against)) if args.against else None
    if args.file:
        path = Path(args.file)
        if not path.exists():
            raise UnusableInput(f"{path}: expected an exported JSONL file, found nothing there")
        report = verify_file(path, against=against, pinned_key=args.log_key)
    else:
        store = open_store(args.store, create=False)
        report = verify_store(
            store,
            against=against,
            progress=_progress(store.size()),
            pinned_key=args.log_key,
            incremental=args.incremental,
        )
    return _report(report, args.json)


def cmd_log(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    for item in store.entries(
        kind=args.kind, review=args.review, actor=args.actor, newest_first=args.newest, limit=args.limit
    ):
        _print_entry(item, args.json)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    if args.target.isdigit():
        print(json.dumps(store.entry(int(args.target)).to_json(), indent=2, ensure_ascii=False))
        return 0
    service = ReviewService(store)
    review = service.get(args.target)
    print(f"review {review.id}  status: {review.status}  tool: {review.tool}  agent: {review.call.agent or '-'}")
    print(f"args: {json.dumps(review.call.args, ensure_ascii=False)}")
    if review.final_args is not None and review.final_args != review.call.args:
        print(f"ran with: {json.dumps(review.final_args, ensure_ascii=False)}")
    for item in service.history(review.id):
        _print_entry(item, False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    try:
        for _seq, _hash, raw in store.iter_raw():
            out.write(raw + b"\n")
    finally:
        if args.output:
            out.close()
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    point = store.checkpoint(args.key)
    text = json.dumps(point.to_json(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def inclusion_bundle(store: Store, seq: int, size: int | None = None) -> dict[str, Any]:
    """An RFC 9162 inclusion proof for one entry, with what an offline check needs."""
    size = store.size() if size is None else size
    item = store.entry(seq)
    proof = store.inclusion_proof(seq, size)
    return {
        "log": store.log_id,
        "seq": seq,
        "size": size,
        "entry": item.raw.decode("utf-8"),
        "leaf": item.hash,
        "proof": [_b64(h) for h in proof],
        "root": "sha256:" + store.root(size).hex(),
    }


def cmd_prove(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    bundle = inclusion_bundle(store, args.seq, args.size)
    merkle.verify_inclusion(
        parse_hash(bundle["leaf"]),
        args.seq,
        bundle["size"],
        [base64.b64decode(p) for p in bundle["proof"]],
        parse_hash(bundle["root"]),
    )
    print(json.dumps(bundle, indent=2, ensure_ascii=False))
    return 0


def cmd_consistency(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=False)
    old = load_checkpoint(Path(args.old))
    if old.log != store.log_id:
        raise UnusableInput(f"{args.old}: expected a checkpoint of log {store.log_id}, found log {old.log}")
    if not old.verify(store.public_key):
        print(
            f"TAMPERED: checkpoint {args.old}: expected a valid signature by the log key, found an invalid one",
            file=sys.stderr,
        )
        return 1
    new_size = store.size()
    new_root = store.root(new_size)
    proof = store.consistency_proof(old.size, new_size) if old.size < new_size else []
    result = {
        "log": store.log_id,
        "old_size": old.size,
        "old_root": old.root,
        "new_size": new_size,
        "new_root": "sha256:" + new_root.hex(),
        "proof": [_b64(h) for h in proof],
    }
    try:
        merkle.verify_consistency(old.size, new_size, parse_hash(old.root), new_root, proof)
    except merkle.ProofError as exc:
        print(f"TAMPERED: the log is not an extension of {args.old}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    service = ReviewService(open_store(args.store, create=False))
    for review in service.pending(tool=args.tool, limit=args.limit):
        deadline = review.deadline.isoformat() if review.deadline else "-"
        print(
            f"{review.id}  {review.tool:<20} {review.call.agent or '-':<16} deadline {deadline}  "
            f"{json.dumps(review.call.args, ensure_ascii=False)[:80]}"
        )
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    service = ReviewService(open_store(args.store, create=False))
    actor = _human(args.reviewer)
    if args.decision == "approve":
        review = service.approve(args.review, reviewer=actor, rationale=args.rationale or "")
    elif args.decision == "edit":
        try:
            patch = json.loads(args.patch)
        except json.JSONDecodeError as exc:
            raise UnusableInput(f"--patch: expected an RFC 6902 JSON patch, found invalid JSON: {exc}") from None
        review = service.edit(args.review, reviewer=actor, patch=patch, rationale=args.rationale or "")
    else:
        review = service.reject(args.review, reviewer=actor, reason=args.reason or "")
    print(f"{review.id}: {review.status} by {review.decided_by} at seq {review.decision_seq}")
    return 0


def _human(name: str) -> str:
    """``alice@example.org`` → ``human:alice@example.org``; another actor prefix is refused."""
    prefix = name.split(":", 1)[0] if ":" in name else ""
    if prefix in ("agent", "service", "log"):
        raise ReviewError(f"reviewer: expected a human: actor (an e-mail), found {name!r}")
    return name if prefix == "human" else f"human:{name}"


def cmd_enroll(args: argparse.Namespace) -> int:
    service = ReviewService(open_store(args.store, create=False))
    reviewer = _human(args.reviewer)
    item = service.enroll_reviewer(reviewer, roles=args.role, tools=args.tools or [], key=args.public_key)
    print(f"enrolled {reviewer} with roles {args.role} at seq {item.seq}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="audit", description="Create, inspect, prove and verify a Signoff log.")
    parser.add_argument(
        "--store",
        default=os.environ.get("SIGNOFF_STORE", DEFAULT_STORE),
        help="store URL: sqlite:///file.db or postgresql://… (env SIGNOFF_STORE)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("SIGNOFF_KEY", DEFAULT_KEY),
        help="the log's private key file (PEM, mode 0600; env SIGNOFF_KEY)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("init", help="create the log and its Ed25519 key").set_defaults(run=cmd_init)

    verify = sub.add_parser("verify", help="verify the store, or an exported JSONL file offline")
    verify.add_argument("file", nargs="?", help="an `audit export` file (no database needed)")
    verify.add_argument("--against", help="a checkpoint JSON you kept: prove the log extends it")
    verify.add_argument(
        "--incremental",
        action="store_true",
        help="with --against: trust the entries the kept checkpoint covers (its root proves them); check later ones",
    )
    verify.add_argument("--log-key", help="pin the log's public key (ed25519:<base64>)")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(run=cmd_verify)

    log = sub.add_parser("log", help="list entries")
    log.add_argument("--kind")
    log.add_argument("--review")
    log.add_argument("--actor")
    log.add_argument("--limit", type=int)
    log.add_argument("--newest", action="store_true", help="newest first")
    log.add_argument("--json", action="store_true", help="print each entry's canonical bytes")
    log.set_defaults(run=cmd_log)

    show = sub.add_parser("show", help="show one entry (SEQ) or one review's history (REVIEW_ID)")
    show.add_argument("target")
    show.set_defaults(run=cmd_show)

    export = sub.add_parser("export", help="stream the log as JSONL: each entry's exact canonical bytes")
    export.add_argument("-o", "--output")
    export.set_defaults(run=cmd_export)

    point = sub.add_parser("checkpoint", help="sign and print the current tree head")
    point.add_argument("-o", "--output", help="also write it to this file")
    point.set_defaults(run=cmd_checkpoint)

    prove = sub.add_parser("prove", help="RFC 9162 inclusion proof for one entry")
    prove.add_argument("seq", type=int)
    prove.add_argument("--size", type=int, help="tree size (default: the current size)")
    prove.set_defaults(run=cmd_prove)

    consistency = sub.add_parser("consistency", help="prove the log extends an older checkpoint")
    consistency.add_argument("old")
    consistency.set_defaults(run=cmd_consistency)

    pending = sub.add_parser("pending", help="list open reviews, oldest first")
    pending.add_argument("--tool")
    pending.add_argument("--limit", type=int, default=50)
    pending.set_defaults(run=cmd_pending)

    for name in ("approve", "edit", "reject"):
        decide = sub.add_parser(name, help=f"{name} a review as an enrolled human reviewer")
        decide.add_argument("review")
        decide.add_argument("--as", dest="reviewer", required=True, help="reviewer, e.g. alice@example.org")
        if name == "edit":
            decide.add_argument("--patch", required=True, help='RFC 6902 patch, e.g. \'[{"op":"replace",…}]\'')
        if name == "reject":
            decide.add_argument("--reason", required=True)
        else:
            decide.add_argument("--rationale")
        decide.set_defaults(run=cmd_decide, decision=name)

    enroll = sub.add_parser("enroll", help="enroll a human reviewer on the log")
    enroll.add_argument("reviewer")
    enroll.add_argument("--role", action="append", required=True)
    enroll.add_argument("--tools", nargs="*")
    enroll.add_argument("--public-key")
    enroll.set_defaults(run=cmd_enroll)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except UnusableInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ReviewError, merkle.ProofError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except AuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DBAPIError as exc:
        print(
            f"error: the database refused: expected a working store at {args.store}, found {exc.orig}", file=sys.stderr
        )
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
