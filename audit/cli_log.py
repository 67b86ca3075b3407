"""``audit`` verbs about the log itself: init, verify, log, show, export, migrate (checkpoints and proofs:
:mod:`signoff.audit.cli_proofs`). Wired into the parser by :mod:`signoff.audit.cli`."""

from __future__ import annotations

import argparse
import json
import os
import re
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


_COMMITMENT = re.compile(r"sealed:sha256:([0-9a-f]{8})[0-9a-f]{56}")


def entry_line(item: Entry) -> str:
    """One entry as `audit log` lists it (each commitment shortened to ``sealed:<8 hex>…``)."""
    text = json.dumps(item.body, ensure_ascii=False)
    body = json.loads(_COMMITMENT.sub(r"sealed:\1…", text)) if "sealed:sha256:" in text else item.body
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
    elif item.kind == "run.rewound":
        detail = f"invocation {body.get('invocation')} went back before {body.get('before')}; nothing of it runs"
    elif item.kind == "run.cancelled":
        detail = f"invocation {body.get('invocation')} {str(body.get('reason', ''))[:80]}; nothing of it runs"
    elif item.kind == "review.withdrawn":
        detail = f"reason: {str(body.get('reason', ''))[:80]}"
    elif item.kind == "review.approved" and body.get("round") is not None:
        detail = f"round {body['round']}"
    elif item.kind == "review.auto_approved":
        named = body.get("policy") or {}
        args = json.dumps(body["call"]["args"], ensure_ascii=False)[:60]
        detail = f"{body['call']['tool']} {args} by policy {named.get('name')}"
    elif item.kind == "review.escalated":
        detail = f"to role {body.get('role')}"
    elif item.kind == "data.erased":
        count = sum(len(v) for v in (body.get("commitments") or {}).values() if isinstance(v, list))
        detail = f"{count} value(s) erased: {str(body.get('reason', ''))[:80]}"
    elif item.kind == "review.claimed":
        detail = f"by {body.get('reviewer')} until {body.get('until')}"
    elif item.kind == "policy.set":
        subject = f"policy:{body.get('policy')}"
        detail = (
            "retired" if body.get("retired") else f"tools {body.get('tools')}, {body.get('approvals', 1)} approval(s)"
        )
        if body.get("proposal"):
            detail += f", approving {body['proposal']}"
    elif item.kind == "policy.proposed":
        subject = str(body.get("proposal", ""))
        detail = f"for {body.get('tool')}: policy {(body.get('policy') or {}).get('policy')}"
    elif item.kind == "policy.declined":
        subject = str(body.get("proposal", ""))
        detail = f"reason: {str(body.get('reason', ''))[:80]}"
    elif item.kind == "sso.required":
        subject = f"role {body.get('role')}"
        detail = f"IdP groups: {', '.join(map(str, body.get('groups') or [])) or 'none needed'}"
    elif item.kind in ("delegation.granted", "delegation.revoked"):
        subject = str(body.get("delegation", ""))
        lent = f"roles {','.join(map(str, body.get('roles') or []))} until {body.get('until')}"
        what = lent if item.kind == "delegation.granted" else f"reason: {str(body.get('reason', ''))[:60]}"
        detail = f"{body.get('delegator')} -> {body.get('delegate')} {what}"
    if isinstance(body.get("acting_for"), str):  # a delegate's decision or claim (rule 2b)
        detail = f"for {body['acting_for']} {detail}".rstrip()
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
            if report.witnessed is not None:
                seen = report.witnessed
                by = ", ".join(seen.by) or "none"
                print(f"   witnessed: the checkpoint of size {seen.size} is cosigned by {len(seen.by)} of the "
                      f"witnesses given ({by}; quorum {seen.quorum}); {seen.after} entries after it")  # fmt: skip
                for name, said in sorted(seen.online.items()):
                    print(f"   {name}: {said}")
            for item in report.stalled:
                if "failed_seq" in item:
                    print(
                        f"   warning: {item['review']} ({item['tool']}) {item['status']}, but it never runs: "
                        f"run.resume_failed at seq {item['failed_seq']}: {item['reason']}"
                    )
                    continue
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
    info = store.init_log(
        args.key,
        args.admin_key,
        admin=args.admin,
        signed_decisions=args.decisions == "signed",
        origin=args.origin,
        sealed_values=not args.values_in_entries,
        new_log=args.new_log,
    )
    admin = read_private_key(args.admin_key)
    from signoff.audit.c2sp import log_vkey

    vkey = log_vkey(store.rules.origin, info.public_key)
    data = {
        "log": info.id,
        "store": args.store,
        "origin": store.rules.origin,
        "vkey": vkey,
        "log_key": {"public": info.public_key, "file": str(args.key)},
        "admin": {"actor": args.admin, "public": admin.public, "file": str(args.admin_key)},
        "decisions": args.decisions,
        "values": "sealed" if store.rules.sealed_values else "in-entries",
    }
    values = (
        "sealed beside the log (audit erase can erase them)"
        if store.rules.sealed_values
        else "in the entries (they can never be erased)"
    )
    emit(
        args,
        data,
        f"created log {info.id} in {args.store} (decisions: {args.decisions})\n"
        f"values:    {values}\n"
        f"origin:    {store.rules.origin}\n"
        f"vkey:      {vkey}\n"
        "           (give it to witnesses and auditors: it checks the log's checkpoints)\n"
        f"log key:   {info.public_key}\n"
        f"           private key in {args.key} (mode 0600): for checkpoints; the desk may hold it\n"
        f"admin key: {admin.public} ({args.admin})\n"
        f"           private key in {args.admin_key} (mode 0600): enrolls reviewers; keep it OFF the agent\n"
        "           and desk hosts (e.g. move it to the administrator's machine now)\n"
        f"pin the log key in agents: Signoff(..., log_key={info.public_key!r})",
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from signoff.audit import cli_proofs
    from signoff.audit.proofs import KIND as PROOF_KIND
    from signoff.audit.verify import load_checkpoint
    from signoff.audit.verify_parallel import default_jobs

    if args.tiles:
        return _report(args, cli_proofs.verify_tiles(args))
    pinned = cli_proofs.log_key(args.log_key)
    witnesses = cli_proofs.witness_verifiers(args.witness)
    against = load_checkpoint(Path(args.against)) if args.against else None
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise UnusableInput(f"--jobs: expected 1 or more worker processes, found {jobs}")
    if args.file and Path(args.file).is_dir():
        from signoff.audit.cli_evidence import verify_pack

        return verify_pack(args, Path(args.file))
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UnusableInput(
                f"{path}: expected an `audit export` JSONL file or an `audit prove` file, found nothing"
            )
        with path.open("rb") as handle:
            first = handle.readline(1 << 20).strip()
        if (first.startswith(b"{") and PROOF_KIND.encode() in first + path.read_bytes()[:4096]) or (
            cli_proofs.is_receipt(path)
        ):
            return cli_proofs.check_proof(args, path)
        if not first:
            raise UnusableInput(f"{path}: expected at least one entry, found an empty file")
        if not _looks_like_an_entry(first):
            raise UnusableInput(
                f"{path}: expected an `audit export` JSONL file (one log entry per line) or an `audit prove` "
                "file, found another kind of file"
            )
        from signoff.audit.verify import verify_file

        values = Path(args.values) if args.values else None
        if values is not None and not values.is_file():
            raise UnusableInput(f"--values {values}: expected the values file `audit export` wrote, found nothing")
        return _report(args, verify_file(path, against=against, pinned_key=pinned, jobs=jobs, values=values))
    from signoff.audit.verify import verify_store

    store = open_existing(args)
    report = verify_store(
        store,
        against=against,
        progress=_progress(store.size()),
        pinned_key=pinned,
        incremental=args.incremental,
        jobs=jobs,
        witnesses=witnesses,
        quorum=args.quorum if args.quorum is not None else 1,
        online=not args.offline,
    )
    if args.stalled_after is not None and report.ok:
        from signoff.audit.reviews import ReviewService

        svc = ReviewService(store)
        report.stalled = [_stalled_json(item) for item in svc.stalled(args.stalled_after)]
        report.stalled += [_stalled_json(item, failed=True) for item in svc.failed_resumes()]
    return _report(args, report)


def _stalled_json(item: Stalled, *, failed: bool = False) -> dict[str, Any]:
    """One approved call that has not run: its run resumed long ago (``item.claim`` is the
    ``run.resumed``), or, with ``failed``, a ``run.resume_failed`` says it never runs (and why)."""
    review = item.review
    out = {"review": review.id, "tool": review.tool, "status": review.status, "session": review.call.session,
           "invocation": review.call.invocation}  # fmt: skip
    if failed:
        return {**out, "failed_seq": item.claim.seq, "failed_at": item.claim.at, "reason": review.resume_failed}
    return {
        **out, "resumed_seq": item.claim.seq, "resumed_at": item.claim.at,
        "resumed_by": str(item.claim.body.get("via") or item.claim.actor),
    }  # fmt: skip


def _looks_like_an_entry(line: bytes) -> bool:
    """Whether a file's first line is a log entry at all (a tampered one still is; a key file is not)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and {"log", "seq", "kind"} <= set(data)


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

    def shown(args: Any) -> str:  # an erased value reads as such, not as its commitment
        if isinstance(args, dict):
            args = {k: "[erased]" if v in review.erased else v for k, v in args.items()}
        return json.dumps(args, ensure_ascii=False)

    def text() -> None:
        print(f"review {review.id}  status: {review.status}  tool: {review.tool}  agent: {review.call.agent or '-'}")
        print(f"args: {shown(review.call.args)}")
        edited = review.final_args is not None and review.final_args != review.call.args
        if review.resume_failed:  # what the log says of the call, not what the decision asked for
            failed = next((e.seq for e in history if e.kind == "run.resume_failed"), None)
            print(f"refused: {review.resume_failed}")
            print(f"(run.resume_failed at seq {failed}: this call is not run, and no resumer, restart or take-over "
                  "sends it again)")  # fmt: skip
            if edited:
                print(f"signed to run with: {shown(review.final_args)}")
        elif edited:
            print(f"{'ran' if review.executed else 'runs'} with: {shown(review.final_args)}")
        for at, by, reason in review.erasures:
            print(f"values erased on {at} by {by}: {reason}")
        if review.problem:
            print(f"problem: {review.problem}")
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
        "resume_failed": review.resume_failed or None,
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
    if not store.rules.sealed_values or args.without_values:
        return 0
    # A sealed log's values go to their own file (mode 0600: personal data), never into the entries' file.
    from signoff.audit import verify_values

    target = Path(args.values) if args.values else (Path(args.output + ".values.jsonl") if args.output else None)
    if target is None:
        print(
            "note: the values of this sealed log were not written (stdout holds the entries only); "
            "use -o FILE (values beside it) or --values FILE, or --without-values to say so",
            file=sys.stderr,
        )
        return 0
    count = verify_values.write_file(target, verify_values.store_rows(store))
    print(f"{count} value(s) written to {target} (mode 0600; personal data: keep it as such)", file=sys.stderr)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from signoff.audit.store import open_store

    store = open_store(existing_store_url(args.store), create=False)
    found = store.logs()
    lines = [f"{'log':<22} {'entries':>8}  {'created':<28} origin"]
    lines += [f"{one.id:<22} {one.size:>8}  {one.created_at:<28} {one.origin}" for one in found]
    emit(args, {"logs": [one.to_json() for one in found]}, "\n".join(lines))
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
        "--origin",
        help="the log's name in its C2SP checkpoints: a schema-less URL with no spaces and no '+', e.g. "
        "audit.example.org/payments (default: signoff.invalid/<log id>); witnesses know the log by it",
    )
    init.add_argument(
        "--decisions",
        choices=["signed", "unsigned-allowed"],
        default="signed",
        help="signed (default): every decision carries the person's own signature; unsigned-allowed: for demos",
    )
    init.add_argument(
        "--values-in-entries",
        action="store_true",
        help="write args, questions, excerpts, edits, answers, results and replies into the entries, as logs "
        "made before values beside the log did (they can then never be erased); by default they live beside "
        "the log under salted commitments, and `audit erase` can erase them",
    )
    init.add_argument(
        "--new-log",
        action="store_true",
        help="add another log to a store that holds some already (one per app, team or environment; each "
        "has its own keys, admin, reviewers, policies and checkpoints); without it, init refuses such a store",
    )
    add_json(init)

    logs = verb(sub, "logs", "list the logs the store holds", "audit --store sqlite:///signoff.db logs", cmd_logs)
    add_json(logs)

    ver = verb(
        sub,
        "verify",
        "verify the store, an exported JSONL file (offline), or a proof file",
        "audit --store sqlite:///signoff.db verify --against cp.json",
        cmd_verify,
    )
    ver.add_argument(
        "file",
        nargs="?",
        help="an `audit export` JSONL file, an `audit prove` file or an `audit evidence` directory (no database)",
    )
    ver.add_argument("--against", help="a checkpoint JSON you kept: prove the log extends it")
    ver.add_argument(
        "--values", help="with FILE of a sealed log: its values file (default FILE.values.jsonl beside it, if there)"
    )
    ver.add_argument(
        "--incremental",
        action="store_true",
        help="with --against: trust the entries the kept checkpoint covers (its root proves them); check later ones",
    )
    ver.add_argument("--log-key", help="pin the log's public key (ed25519:<base64>)")
    from signoff.audit.cli_proofs import add_witness_options

    add_witness_options(ver)
    ver.add_argument(
        "--offline", action="store_true", help="with --witness: do not ask the witnesses for their newest checkpoint"
    )
    ver.add_argument("--tiles", metavar="DIR|URL", help="verify a c2sp.org/tlog-tiles mirror instead (no database)")
    ver.add_argument("--log-vkey", help="with --tiles or an evidence pack: the log's vkey you trust (`audit vkey`)")
    ver.add_argument(
        "--stalled-after",
        type=float,
        metavar="SECONDS",
        help="also warn about approved calls whose run resumed this long ago and whose tool has not run, "
        "and about those a run.resume_failed says never run (a warning: the exit status stays 0 when the "
        "log is intact)",
    )
    ver.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes for hashes, canonical form and signatures (default: one per core; 1: this process)",
    )
    add_json(ver)

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
    export.add_argument("--values", help="a sealed log: write its values to this file (default: OUTPUT.values.jsonl)")
    export.add_argument(
        "--without-values", action="store_true", help="a sealed log: leave its values out (the rest still verifies)"
    )

    migrate = verb(
        sub,
        "migrate",
        "upgrade the store's schema to this Signoff's (log entries are never rewritten); back it up first",
        "audit --store sqlite:///signoff.db migrate",
        cmd_migrate,
    )
    add_json(migrate)
