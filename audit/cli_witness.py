"""``witness keygen`` and ``witness serve``: run a c2sp.org/tlog-witness witness (:mod:`signoff.audit.witness`).

:func:`register` adds a ``witness`` verb with both subcommands to the ``audit`` parser; :func:`main` is
the same two subcommands on their own (``python -m signoff.audit.cli_witness serve …``).

The witness's key name is part of its identity (its key ID hashes it), so ``keygen`` stores it beside
the key: ``FILE`` holds the Ed25519 private key (PEM, mode 0600) and ``FILE.vkey`` the witness's vkey
(``<name>+<key id>+<base64(0x04 || public key)>``), which ``serve`` reads and checks against the key.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit.c2sp_errors import C2SPVerificationError, KeyFormatError
from signoff.audit.cli_common import EXIT_CODES, add_json, emit, verb
from signoff.audit.errors import AuditError, KeyFileError, VerificationFailed

if TYPE_CHECKING:  # each verb imports what it needs when it runs, so `audit --help` starts fast
    from signoff.audit.keys import Signer
    from signoff.audit.signed_note import Verifier
    from signoff.audit.tlog_cosignature import Cosigner

__all__ = ["DEFAULT_PORT", "load_cosigner", "main", "register", "vkey_path"]

DEFAULT_PORT = 7380


def vkey_path(key: str | Path) -> Path:
    """Where ``keygen`` writes the witness's vkey: beside the key, as ``FILE.vkey``."""
    return Path(f"{key}.vkey")


def load_cosigner(key: str | Path) -> Cosigner:
    """The witness's cosigner from ``FILE`` and ``FILE.vkey``, which must hold the same public key."""
    from signoff.audit.keys import read_private_key
    from signoff.audit.signed_note import SIG_COSIGNATURE_V1, parse_vkey
    from signoff.audit.tlog_cosignature import Cosigner

    signer = read_private_key(key)
    path = vkey_path(key)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise KeyFileError(
            f"{path}: expected the witness vkey written by `witness keygen` beside the key, found {exc.strerror}"
        ) from None
    vkey = parse_vkey(text)
    cosigner = Cosigner(vkey.name, signer.private)
    if vkey.sig_type != SIG_COSIGNATURE_V1 or vkey.public != cosigner.public:
        raise KeyFileError(f"{path}: expected the cosignature vkey of the key in {key}, found {text[:80]!r}")
    return cosigner


def cmd_keygen(args: argparse.Namespace) -> int:
    from signoff.audit.keys import Signer, write_private_key
    from signoff.audit.signed_note import check_key_name
    from signoff.audit.tlog_cosignature import Cosigner

    name = check_key_name(args.name)
    signer = Signer.generate()
    cosigner = Cosigner(name, signer.private)
    path = vkey_path(args.out)
    if path.exists():
        raise KeyFileError(f"{path}: expected no vkey file, found one already (refusing to overwrite)")
    write_private_key(signer, args.out)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(cosigner.vkey() + "\n")
    data = {"name": name, "vkey": cosigner.vkey(), "key_file": str(args.out), "vkey_file": str(path)}
    emit(args, data, f"{cosigner.vkey()}\n"
                     f"witness {name}: private key in {args.out} (mode 0600), vkey in {path}\n"
                     "give the vkey to the logs' clients; start it with: audit witness serve --key "
                     f"{args.out} --store witness.db --log <log vkey>")  # fmt: skip
    return 0


def _logs(vkeys: Sequence[str]) -> dict[str, list[Verifier]]:
    from signoff.audit.vkeys import verifier_from_vkey

    logs: dict[str, list[Verifier]] = {}
    for text in vkeys:
        verifier = verifier_from_vkey(text)
        logs.setdefault(verifier.name, []).append(verifier)
    return logs


def cmd_serve(args: argparse.Namespace) -> int:
    from signoff.audit.witness import Witness, make_server, open_state

    cosigner = load_cosigner(args.key)
    if not args.log:
        raise KeyFormatError("--log: expected at least one log vkey, found none")
    logs = _logs(args.log)
    state = open_state(args.store)
    server = make_server(Witness(cosigner, logs, state), args.host, args.port, quiet=args.quiet)

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"witness {cosigner.name} listening on http://{args.host}:{server.server_port}", flush=True)
    print(f"vkey {cosigner.vkey()}", flush=True)
    for origin in logs:
        print(f"log {origin}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        state.close()
    return 0


def _add_verbs(sub: Any) -> None:
    keygen = verb(
        sub,
        "keygen",
        "create a witness key: FILE (Ed25519 PEM, mode 0600) and FILE.vkey (its name and public key)",
        "audit witness keygen --name witness.example.org/w1 --out witness-key.pem",
        cmd_keygen,
    )
    keygen.add_argument("--name", required=True, help="the witness's key name, a schema-less URL (no spaces, no '+')")
    keygen.add_argument("--out", required=True, help="the private key file to write (refuses to overwrite)")
    add_json(keygen)

    serve = verb(
        sub,
        "serve",
        "run the witness: POST /add-checkpoint and GET /<sha256 of origin>/checkpoint",
        "audit witness serve --key witness-key.pem --store sqlite:///witness.db --log example.com/log+1a2b3c4d+AW…",
        cmd_serve,
    )
    serve.add_argument("--key", required=True, help="the witness key from `witness keygen` (FILE.vkey beside it)")
    serve.add_argument(
        "--store", required=True, help="state: sqlite:///path.db, a file path, or postgresql://user@host/db"
    )
    serve.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="VKEY",
        help="a trusted log key (repeatable); its key name is the checkpoint origin it signs for",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    serve.add_argument("--quiet", action="store_true", help="no access log on stderr")


# -- the log's side: naming witnesses on a log, pushing to them, their status ------------------------


def _admin(args: argparse.Namespace) -> Signer:
    from signoff.audit.keys import read_private_key

    if not args.admin_key:
        raise KeyFileError("--admin-key: expected the admin's private key file (or env SIGNOFF_ADMIN_KEY), found none")
    return read_private_key(args.admin_key)


def cmd_add(args: argparse.Namespace) -> int:
    from signoff.audit import witnessing
    from signoff.audit.cli_common import open_existing

    store = open_existing(args)
    entry = witnessing.add_witness(store, args.url, args.vkey, admin=_admin(args))
    data = {"seq": entry.seq, "witness": entry.body["witness"], "url": args.url}
    emit(args, data, f"added witness {entry.body['witness']} ({args.url}) at seq {entry.seq}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from signoff.audit import witnessing
    from signoff.audit.cli_common import open_existing

    store = open_existing(args)
    entry = witnessing.remove_witness(store, args.name, reason=args.reason, admin=_admin(args))
    emit(args, {"seq": entry.seq, "witness": args.name}, f"removed witness {args.name} at seq {entry.seq}")
    return 0


def cmd_quorum(args: argparse.Namespace) -> int:
    from signoff.audit import witnessing
    from signoff.audit.cli_common import open_existing

    store = open_existing(args)
    entry = witnessing.set_quorum(store, args.quorum, admin=_admin(args))
    emit(args, {"seq": entry.seq, "quorum": args.quorum}, f"quorum {args.quorum} at seq {entry.seq}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from signoff.audit import c2sp, witnessing
    from signoff.audit.cli_common import open_existing

    store = open_existing(args)
    current = witnessing.config(store)
    cover = witnessing.coverage(store)
    latest = store.latest_checkpoint()
    data = {
        "origin": store.rules.origin,
        "vkey": c2sp.log_vkey(store.rules.origin, store.public_key),
        "checkpoint": latest.size if latest is not None else None,
        **cover.to_json(),
        "witnesses": [{"witness": w.name, "url": w.url, "vkey": w.vkey, "cosigned": cover.witnesses.get(w.name)}
                      for w in current.witnesses.values()],
    }  # fmt: skip

    def show() -> None:
        print(f"log {store.log_id}, origin {store.rules.origin}: {cover.size} entries")
        print(f"  newest checkpoint: {'size ' + str(latest.size) if latest else 'none'}")
        for w in current.witnesses.values():
            size = cover.witnesses.get(w.name)
            said = f"cosigned size {size}" if size is not None else "never cosigned"
            print(f"  {w.name:<40} {w.url:<32} {said}")
        covered = f"size {cover.covered}" if cover.covered is not None else "none"
        print(f"  quorum {cover.quorum}: newest checkpoint a quorum cosigned: {covered}; "
              f"{cover.unwitnessed} entries not yet covered")  # fmt: skip

    emit(args, data, show)
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from signoff.audit.cli_common import open_existing
    from signoff.audit.keys import read_private_key
    from signoff.audit.publisher import Publisher

    store = open_existing(args)
    publisher = Publisher(store, read_private_key(args.key), timeout=args.timeout)
    try:
        report = publisher.publish_once()
    finally:
        publisher.close()

    def show() -> None:
        point = report.checkpoint
        print(f"checkpoint size {point.size}{' (made now)' if report.made else ''}" if point else "no checkpoint")
        for pushed in report.pushed:
            print(f"  {pushed.witness}: {pushed.outcome}{': ' + pushed.detail if pushed.detail else ''}")

    emit(args, report.to_json(), show)
    return 1 if any(p.outcome == "failed" for p in report.pushed) else 0


def _add_log_verbs(sub: Any) -> None:
    admin_env = os.environ.get("SIGNOFF_ADMIN_KEY")
    add = verb(
        sub, "add", "name a witness on the log (admin-signed): checkpoints are pushed to it from now on",
        "audit witness add https://witness.example.org/w1 'witness.example.org/w1+1a2b3c4d+BC…' --admin-key admin.pem",
        cmd_add,
    )  # fmt: skip
    add.add_argument("url", help="the witness's submission prefix (it serves <url>/add-checkpoint)")
    add.add_argument("vkey", help="the witness's cosignature vkey (type 0x04), from its `witness keygen`")
    rm = verb(
        sub, "remove", "take a witness off the log (admin-signed)",
        "audit witness remove witness.example.org/w1 --reason 'retired' --admin-key admin.pem", cmd_remove,
    )  # fmt: skip
    rm.add_argument("name", help="the witness's key name")
    rm.add_argument("--reason", required=True)
    quorum = verb(
        sub, "quorum", "how many witnesses must cosign a checkpoint (admin-signed)",
        "audit witness quorum 2 --admin-key admin.pem", cmd_quorum,
    )  # fmt: skip
    quorum.add_argument("quorum", type=int)
    for parser in (add, rm, quorum):
        parser.add_argument("--admin-key", default=admin_env, help="the admin's private key (env SIGNOFF_ADMIN_KEY)")
        add_json(parser)
    status = verb(
        sub, "status", "the log's witnesses: what each cosigned last, and what a quorum covers",
        "audit --store signoff.db witness status", cmd_status,
    )  # fmt: skip
    add_json(status)
    push = verb(
        sub, "push", "make a checkpoint if the log grew and push it to every witness once (exit 1 if one failed)",
        "audit --store signoff.db --key log.key witness push", cmd_push,
    )  # fmt: skip
    push.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each witness")
    add_json(push)


def register(sub: Any) -> None:
    """Add the ``witness`` verbs to the ``audit`` parser: a witness's own (``keygen``, ``serve``) and the
    log's (``add``, ``remove``, ``quorum``, ``status``, ``push``, on the ``--store`` given to ``audit``)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "witness",
        help="witnesses: run one (c2sp.org/tlog-witness), or name them on the log and push checkpoints to them",
        description="Run a c2sp.org/tlog-witness witness that cosigns the checkpoints of the logs it trusts; "
        "or, as the log's admin, name witnesses on the log and push its checkpoints to them.",
        epilog="example:\n  audit witness keygen --name witness.example.org/w1 --out witness-key.pem\n"
        '  audit --store signoff.db witness add http://127.0.0.1:7380 "$(cat witness-key.pem.vkey)" '
        "--admin-key admin.pem\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="witness_command", required=True, metavar="COMMAND")
    _add_verbs(verbs)
    _add_log_verbs(verbs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m signoff.audit.cli_witness keygen|serve …``; errors become a message and an exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m signoff.audit.cli_witness",
        description="Run a c2sp.org/tlog-witness witness that cosigns the checkpoints of the logs it trusts.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_verbs(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except (VerificationFailed, C2SPVerificationError) as exc:
        print(f"TAMPERED or INVALID: {exc}", file=sys.stderr)
        return 1
    except AuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the edge: a message, never a traceback (e.g. the database refused)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
