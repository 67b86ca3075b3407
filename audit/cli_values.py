"""``audit erase`` and ``audit retention run``: erase the values beside a sealed log (:mod:`.erasure`).

``audit erase REVIEW [--field NAME…] --reason TEXT --admin-key FILE`` erases one done review's values;
``audit erase --requester ID …`` those of every done review on behalf of one person (the call's
``user``). ``audit retention run`` erases what retention policies let go. Each writes ``data.erased``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from signoff.audit.cli_common import EXIT_CODES, add_json, emit, open_existing, verb
from signoff.audit.errors import UnusableInput


def _erased_json(done: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"review": done.review}
    if done.entry is not None:
        out.update(
            seq=done.entry.seq, at=done.entry.at, erased=sum(len(v) for v in done.entry.body["commitments"].values())
        )
    else:
        out["refused"] = done.why
    return out


def cmd_erase(args: argparse.Namespace) -> int:
    from signoff.audit import erasure
    from signoff.audit.keys import read_private_key

    if (args.review is None) == (args.requester is None):
        raise UnusableInput("audit erase: expected a REVIEW or --requester ID (one of them), found "
                            + ("both" if args.review else "neither"))  # fmt: skip
    if not args.admin_key:
        raise UnusableInput("--admin-key: expected the admin's key file (or env SIGNOFF_ADMIN_KEY), found none")
    admin = read_private_key(args.admin_key)
    store = open_existing(args)
    if args.review is not None:
        entry = erasure.erase(store, args.review, reason=args.reason, admin=admin, fields=args.field)
        done = [erasure.Erased(args.review, entry)]
    else:
        done = erasure.erase_requester(store, args.requester, reason=args.reason, admin=admin, fields=args.field)
    rows = [_erased_json(item) for item in done]
    out: dict[str, Any] = {"erased": rows}
    vacuumed = erasure.vacuum(store) if args.vacuum else None
    if vacuumed is not None:
        out["vacuum"] = {"done": vacuumed.done, **({"why": vacuumed.why} if vacuumed.why else {})}

    def text() -> None:
        if not rows:
            print(f"no review on behalf of {args.requester}")
        for row in rows:
            if "refused" in row:
                print(f"{row['review']}: not erased: {row['refused']}")
            else:
                print(f"{row['review']}: erased {row['erased']} value(s), data.erased at seq {row['seq']}")
        if vacuumed is not None:  # after the erasure's own outcome, which is committed whatever this says
            print("vacuum: done" if vacuumed.done else f"vacuum: not done: {vacuumed.why}")

    emit(args, out, text)
    ok = all("refused" not in row for row in rows) and (vacuumed is None or vacuumed.done)
    return 0 if ok else 2


def cmd_retention_run(args: argparse.Namespace) -> int:
    from signoff.audit import erasure
    from signoff.audit.keys import read_private_key

    if args.admin_key and args.service_key:
        raise UnusableInput("audit retention run: expected --admin-key or --service-key (one of them), found both")
    store = open_existing(args)
    key = args.admin_key or args.service_key
    signer = read_private_key(key) if key else None
    actor = store.admin_actor(signer) if args.admin_key and signer is not None else args.actor
    done = erasure.retention_run(store, actor=actor, signer=signer)
    erased = [_erased_json(item) for item in done if item.entry is not None]
    refused = [_erased_json(item) for item in done if item.entry is None and not item.waiting]
    waiting = sum(1 for item in done if item.waiting)

    def text() -> None:
        for row in erased:
            print(f"{row['review']}: erased {row['erased']} value(s) (retention), data.erased at seq {row['seq']}")
        for row in refused:
            print(f"{row['review']}: not erased: {row['refused']}")
        print(f"{len(erased)} review(s) erased by retention; {waiting} due but not done yet")

    emit(args, {"erased": erased, "refused": refused, "waiting": waiting}, text)
    return 2 if refused else 0


def register(sub: Any) -> None:
    erase = verb(
        sub,
        "erase",
        "erase a done review's values beside the log (or every one of a requester's), signed by the admin",
        "audit erase --requester cust-7 --reason 'GDPR art. 17 request #12' --admin-key admin.pem",
        cmd_erase,
    )
    erase.add_argument("review", nargs="?", help="the review (rv_…)")
    erase.add_argument("--requester", help="every review on behalf of this person (the call's user id)")
    erase.add_argument("--field", action="append", help="only this args member (repeatable)")
    erase.add_argument("--reason", required=True, help="why (the log keeps it in data.erased)")
    erase.add_argument("--admin-key", default=os.environ.get("SIGNOFF_ADMIN_KEY"), help="the admin's key file")
    erase.add_argument(
        "--vacuum", action="store_true", help="then give the bytes back: SQLite WAL checkpoint, PostgreSQL VACUUM FULL"
    )
    add_json(erase)
    retention = sub.add_parser(
        "retention",
        help="erase the values retention policies let go",
        description="Erase the values beside the log that retention policies (policy retain_values) let go.",
        epilog=f"example:\n  audit retention run\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = retention.add_subparsers(dest="retention_command", required=True, metavar="VERB")
    run = verb(
        verbs, "run", "erase every value whose retention (policy retain_values) has passed, by the log's clock",
        "audit retention run --service-key service.pem", cmd_retention_run,
    )  # fmt: skip
    run.add_argument("--as", dest="actor", default="service:signoff", help="the service: actor that writes it")
    run.add_argument("--service-key", help="that actor's key file, when the log enrolled one for it (it must sign)")
    run.add_argument("--admin-key", help="or erase as the admin, signed with the admin's key file")
    add_json(run)
