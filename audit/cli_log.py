"""``audit`` verbs about the log itself: init, verify, log, show, export, checkpoint, prove, check-proof,
consistency. Wired into the parser by :mod:`signoff.audit.cli`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit.cli_common import add_json, emit, existing_store_url, open_existing, store_url, verb
from signoff.audit.errors import UnusableInput

if TYPE_CHECKING:
    from signoff.audit.entry import Entry
    from signoff.audit.review_queries import Stalled
    from signoff.audit.verify import Report

# Each verb imports what it needs when it runs: `audit --help` loads no database driver (tests/test_startup.py).


def _progress(total: int) -> Any:
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


def entry_line(item: Entry) -> str:
    body = item.body
    subject = body.get("review") or body.get("frontier") or body.get("reviewer") or body.get("actor") or ""
    detail = ""
    if item.kind == "review.opened":
        detail = f"{body['call']['tool']} {json.dumps(body['call']['args'], ensure_ascii=False)[:80]}"
    elif item.kind == "review.rejected":
        detail = f"reason: {str(body.get('reason', ''))[:80]}"
    elif item.kind == "review.edited":
        detail = f"patch: {json.dumps(body.get('patch'), ensure_ascii=False)[:80]}"
    elif item.kind == "log.checkpoint":
        detail = f"size {body.get('size')} root {body.get('root')}"
    elif item.kind == "tool.executed" and body.get("result_preview"):
        detail = f"result: {str(body['result_preview'])[:80]}"
    elif item.kind == "run.replied":
        detail = f"reply: {str(body.get('text', ''))[:80]}"
    elif item.kind == "run.resume_failed":
        detail = f"{', '.join(map(str, body.get('reviews') or []))} will not run: {str(body.get('reason', ''))[:80]}"
    elif item.kind == "review.approved" and body.get("round") is not None:
        detail = f"round {body['round']}"
    elif item.kind == "review.auto_approved":
        named = body.get("policy") or {}
        args = json.dumps(body["call"]["args"], ensure_ascii=False)[:60]
        detail = f"{body['call']['tool']} {args} by policy {named.get('name')}"
    elif item.kind == "review.escalated":
        detail = f"to role {body.get('role')}"
    elif item.kind == "review.claimed":
        detail = f"by {body.get('reviewer')} until {body.get('until')}"
    elif item.kind == "policy.set":
        subject = f"policy:{body.get('policy')}"
        detail = (
            "retired" if body.get("retired") else f"tools {body.get('tools')}, {body.get('approvals', 1)} approval(s)"
        )
    signed = f" signed ({item.sig.get('alg')})" if item.sig else ""
    return f"{item.seq:>6}  {item.at}  {item.kind:<20} {item.actor:<28} {subject} {detail}{signed}".rstrip()


def _report(args: argparse.Namespace, report: Report) -> int:
    def text() -> None:
        if report.ok:
            print(f"ok: log {report.log} intact, {report.size} entries, root {report.root}")
            for note in report.notes:
                print(f"   {note}")
            if report.checkpoints:
                print(f"   {report.checkpoints} checkpoint(s) checked")
            for item in report.stalled:
                print(
                    f"   warning: {item['review']} ({item['tool']}) {item['status']}, run resumed at "
                    f"{item['resumed_at']} by {item['resumed_by']}, but its tool has not run: session "
                    f"{item['session']}, invocation {item['invocation']}"
                )
        else:
            assert report.failure is not None
            print(f"TAMPERED or INVALID: {report.failure}", file=sys.stderr)

    emit(args, report.to_json(), text)
    return 0 if report.ok else 1


# -- the verbs ---------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key, open_store

    store = open_store(store_url(args.store))
    if args.admin_key is None:  # beside the log key, as the README says: log.key -> log.admin.key
        args.admin_key = str(default_admin_key(args.key))
    info = store.init_log(args.key, args.admin_key, admin=args.admin, signed_decisions=args.decisions == "signed")
    admin = read_private_key(args.admin_key)
    data = {
        "log": info.id,
        "store": args.store,
        "log_key": {"public": info.public_key, "file": str(args.key)},
        "admin": {"actor": args.admin, "public": admin.public, "file": str(args.admin_key)},
        "decisions": args.decisions,
    }
    emit(
        args,
        data,
        f"created log {info.id} in {args.store} (decisions: {args.decisions})\n"
        f"log key:   {info.public_key}\n"
        f"           private key in {args.key} (mode 0600): for checkpoints; the desk may hold it\n"
        f"admin key: {admin.public} ({args.admin})\n"
        f"           private key in {args.admin_key} (mode 0600): enrolls reviewers; keep it OFF the agent\n"
        "           and desk hosts (e.g. move it to the administrator's machine now)\n"
        f"pin the log key in agents: Signoff(..., log_key={info.public_key!r})",
    )
    return 0


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


def cmd_verify(args: argparse.Namespace) -> int:
    from signoff.audit.proofs import KIND as PROOF_KIND
    from signoff.audit.verify import load_checkpoint
    from signoff.audit.verify_parallel import default_jobs

    pinned = log_key(args.log_key)
    against = load_checkpoint(Path(args.against)) if args.against else None
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise UnusableInput(f"--jobs: expected 1 or more worker processes, found {jobs}")
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UnusableInput(
                f"{path}: expected an `audit export` JSONL file or an `audit prove` file, found nothing"
            )
        with path.open("rb") as handle:
            first = handle.readline(1 << 20).strip()
        if first.startswith(b"{") and PROOF_KIND.encode() in first + path.read_bytes()[:4096]:
            return _check_proof(args, path)
        if not first:
            raise UnusableInput(f"{path}: expected at least one entry, found an empty file")
        if not _looks_like_an_entry(first):
            raise UnusableInput(
                f"{path}: expected an `audit export` JSONL file (one log entry per line) or an `audit prove` "
                "file, found another kind of file"
            )
        from signoff.audit.verify import verify_file

        return _report(args, verify_file(path, against=against, pinned_key=pinned, jobs=jobs))
    from signoff.audit.verify import verify_store

    store = open_existing(args)
    report = verify_store(
        store,
        against=against,
        progress=_progress(store.size()),
        pinned_key=pinned,
        incremental=args.incremental,
        jobs=jobs,
    )
    if args.stalled_after is not None and report.ok:
        from signoff.audit.reviews import ReviewService

        report.stalled = [_stalled_json(item) for item in ReviewService(store).stalled(args.stalled_after)]
    return _report(args, report)


def _stalled_json(item: Stalled) -> dict[str, Any]:
    review = item.review
    return {
        "review": review.id, "tool": review.tool, "status": review.status, "session": review.call.session,
        "invocation": review.call.invocation, "resumed_seq": item.claim.seq, "resumed_at": item.claim.at,
        "resumed_by": str(item.claim.body.get("via") or item.claim.actor),
    }  # fmt: skip


def _looks_like_an_entry(line: bytes) -> bool:
    """Whether a file's first line is a log entry at all (a tampered one still is; a key file is not)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and {"log", "seq", "kind"} <= set(data)


def _check_proof(args: argparse.Namespace, path: Path) -> int:
    from signoff.audit.canonical import decode
    from signoff.audit.proofs import check_inclusion

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
    return _check_proof(args, path)


def cmd_log(args: argparse.Namespace) -> int:
    from signoff.audit.entry import KINDS

    if args.kind is not None and args.kind not in KINDS:
        raise UnusableInput(f"--kind: expected one of {', '.join(sorted(KINDS))}, found {args.kind!r}")
    if args.limit is not None and args.limit < 0:
        raise UnusableInput(f"--limit: expected 0 or more entries, found {args.limit}")
    store = open_existing(args)
    # an id or actor the log never mentions is a typo, not an empty answer (as `audit show` says)
    if args.review is not None and next(iter(store.entries(review=args.review, limit=1)), None) is None:
        raise UnusableInput(
            f"--review: expected a review, frontier, reviewer or actor on log {store.log_id}, found none named "
            f"{args.review!r}"
        )
    if args.actor is not None and next(iter(store.entries(actor=args.actor, limit=1)), None) is None:
        raise UnusableInput(
            f"--actor: expected an actor who wrote on log {store.log_id}, found none named {args.actor!r} "
            "(actors are prefixed: human:…, agent:…, service:…, admin:…)"
        )
    items = store.entries(
        kind=args.kind, review=args.review, actor=args.actor, newest_first=args.newest, limit=args.limit
    )
    if args.json:
        for item in items:
            sys.stdout.write(item.raw.decode("utf-8") + "\n")
    else:
        for item in items:
            print(entry_line(item))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from signoff.audit.reviews import ReviewService

    store = open_existing(args)
    if args.target.isdigit():
        seq = int(args.target)
        size = store.size()
        if seq >= size:
            raise UnusableInput(f"seq {seq}: expected 0..{size - 1}, found no such entry")
        item = store.entry(seq)
        emit(args, item.to_json(), json.dumps(item.to_json(), indent=2, ensure_ascii=False))
        return 0
    queries = ReviewService(store)
    review = queries.get(args.target)
    history = queries.history(review.id)

    def text() -> None:
        print(f"review {review.id}  status: {review.status}  tool: {review.tool}  agent: {review.call.agent or '-'}")
        print(f"args: {json.dumps(review.call.args, ensure_ascii=False)}")
        if review.final_args is not None and review.final_args != review.call.args:
            print(f"runs with: {json.dumps(review.final_args, ensure_ascii=False)}")
        for item in history:
            print(entry_line(item))

    data = {
        "review": review.id,
        "status": review.status,
        "tool": review.tool,
        "args": review.call.args,
        "final_args": review.final_args,
        "decided_by": review.decided_by,
        "executed": review.executed,
        "history": [item.to_json() for item in history],
    }
    emit(args, data, text)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_existing(args)
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    try:
        for _seq, _hash, raw in store.iter_raw():
            out.write(raw + b"\n")
    finally:
        if args.output:
            out.close()
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    store = open_existing(args)
    point = store.checkpoint(args.key)
    text = json.dumps(point.to_json(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def cmd_prove(args: argparse.Namespace) -> int:
    from signoff.audit.proofs import build_inclusion, check_inclusion

    store = open_existing(args)
    size = store.size()
    if not 0 <= args.seq < size:
        raise UnusableInput(f"seq {args.seq}: expected 0..{size - 1}, found no such entry")
    bundle = build_inclusion(store, args.seq, args.size)
    check_inclusion(bundle)  # never hand out a proof that does not check
    text = json.dumps(bundle, indent=2, ensure_ascii=False)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"wrote a proof of entry {args.seq} under the checkpoint of size {bundle['size']} to {args.output}")
    else:
        print(text)
    return 0


def cmd_consistency(args: argparse.Namespace) -> int:
    from signoff.audit.merkle import ProofError
    from signoff.audit.proofs import consistency
    from signoff.audit.verify import load_checkpoint

    store = open_existing(args)
    old = load_checkpoint(Path(args.old))
    if old.log != store.log_id:
        raise UnusableInput(f"{args.old}: expected a checkpoint of log {store.log_id}, found log {old.log}")
    try:
        result = consistency(store, old)
    except ProofError as exc:
        raise ProofError(f"the log is not an extension of {args.old}: {exc}") from None
    emit(args, result, json.dumps(result, indent=2))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from signoff.audit import schema_version
    from signoff.audit.store import open_store

    store = open_store(existing_store_url(args.store), create=False, check_schema=False)
    with store.write_engine.begin() as conn:
        before, after = schema_version.upgrade(conn)
    emit(
        args,
        {"before": before, "after": after},
        f"store schema: {before} -> {after}" if before != after else f"store schema: already at {after}",
    )
    return 0


def register(sub: Any) -> None:
    init = verb(
        sub,
        "init",
        "create the log, its log key and a separate admin key",
        "audit --store sqlite:///signoff.db init --admin-key ~/offline/signoff-admin-key.pem",
        cmd_init,
    )
    init.add_argument(
        "--admin-key",
        default=os.environ.get("SIGNOFF_ADMIN_KEY"),
        help="where to write the admin's private key (env SIGNOFF_ADMIN_KEY; default: beside the log key, "
        "log.key -> log.admin.key); keep it off agent and desk hosts",
    )
    init.add_argument("--admin", default="admin:root", help="the admin's actor name (admin:<name>)")
    init.add_argument(
        "--decisions",
        choices=["signed", "unsigned-allowed"],
        default="signed",
        help="signed (default): every decision carries the person's own signature; unsigned-allowed: for demos",
    )
    add_json(init)

    ver = verb(
        sub,
        "verify",
        "verify the store, an exported JSONL file (offline), or a proof file",
        "audit --store sqlite:///signoff.db verify --against cp.json",
        cmd_verify,
    )
    ver.add_argument("file", nargs="?", help="an `audit export` JSONL file or an `audit prove` file (no database)")
    ver.add_argument("--against", help="a checkpoint JSON you kept: prove the log extends it")
    ver.add_argument(
        "--incremental",
        action="store_true",
        help="with --against: trust the entries the kept checkpoint covers (its root proves them); check later ones",
    )
    ver.add_argument("--log-key", help="pin the log's public key (ed25519:<base64>)")
    ver.add_argument(
        "--stalled-after",
        type=float,
        metavar="SECONDS",
        help="also warn about approved calls whose run resumed this long ago and whose tool has not run "
        "(a warning: the exit status stays 0 when the log is intact)",
    )
    ver.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes for hashes, canonical form and signatures (default: one per core; 1: this process)",
    )
    add_json(ver)

    check = verb(
        sub,
        "check-proof",
        "check an `audit prove` file offline: the entry, its path and the signed checkpoint",
        "audit check-proof proof-42.json --log-key ed25519:…",
        cmd_check_proof,
    )
    check.add_argument("proof")
    check.add_argument("--log-key", help="pin the log's public key (ed25519:<base64>)")
    add_json(check)

    log = verb(sub, "log", "list entries, oldest first", "audit log --kind review.edited --newest --limit 20", cmd_log)
    log.add_argument("--kind", help="only this kind (e.g. review.approved)")
    log.add_argument("--review", help="only the entries about this review (or frontier, reviewer, actor)")
    log.add_argument("--actor", help="only entries written by this actor")
    log.add_argument("--limit", type=int, help="at most this many entries")
    log.add_argument("--newest", action="store_true", help="newest first")
    log.add_argument("--json", action="store_true", help="print each entry's exact canonical bytes (JSON lines)")

    show = verb(
        sub,
        "show",
        "show one entry (SEQ) or one review and its history (REVIEW_ID)",
        "audit show rv_5205944c20622598",
        cmd_show,
    )
    show.add_argument("target", help="a seq number or a review id")
    add_json(show)

    export = verb(
        sub,
        "export",
        "stream the log as JSONL: each entry's exact canonical bytes, for `audit verify FILE`",
        "audit export -o log.jsonl",
        cmd_export,
    )
    export.add_argument("-o", "--output", help="write to this file (default: stdout)")

    point = verb(
        sub,
        "checkpoint",
        "sign the current tree head with the log key, record it on the log, print it",
        "audit --key signoff-log-key.pem checkpoint -o cp.json   # keep cp.json somewhere else",
        cmd_checkpoint,
    )
    point.add_argument("-o", "--output", help="also write it to this file")

    prove = verb(
        sub,
        "prove",
        "write a self-contained RFC 9162 inclusion proof of one entry under a signed checkpoint",
        "audit prove 42 -o proof-42.json && audit check-proof proof-42.json",
        cmd_prove,
    )
    prove.add_argument("seq", type=int, help="the entry's seq")
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

    migrate = verb(
        sub,
        "migrate",
        "upgrade the store's schema to this Signoff's (log entries are never rewritten); back it up first",
        "audit --store sqlite:///signoff.db migrate",
        cmd_migrate,
    )
    add_json(migrate)
