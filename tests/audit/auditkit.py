"""Helpers shared by the audit tests: calls, a settable clock, the keys of the people in the
tests, raw database access, and an attacker's tools (edit rows, forge an entry, rewrite and
re-link the chain).

Everything here works on the real database with plain ``sqlite3`` / ``psycopg``; nothing
stands in for an ``audit`` component. Entries an attacker writes are built with
``audit.entry.build`` so they are exactly what the library itself would write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # when pytest is not run as ``python -m pytest``
    sys.path.insert(0, str(ROOT))

from signoff.audit import decision, merkle  # noqa: E402
from signoff.audit.canonical import canonical  # noqa: E402
from signoff.audit.entry import (  # noqa: E402
    Entry,
    build,
    format_hash,
    format_time,
    statement,
    subject_of,  # noqa: E402
)
from signoff.audit.keys import Signer, read_private_key, write_private_key  # noqa: E402
from signoff.audit.reviews import CallSpec  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402
from signoff.audit.trust import statement as trust_statement  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PG_BASE = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

ALICE = "human:alice@example.org"  # teller, every tool
BOB = "human:bob@example.org"  # intern, lookup* only
CAROL = "human:carol@example.org"  # enrolled, then disabled
MALLORY = "human:mallory@example.org"  # never enrolled
AGENT = "agent:teller"
WORKER = "agent:worker"
SERVICE = "service:signoff"
ADMIN = "admin:root"  # the first admin, whose key ``Store.init_log`` writes beside the log key

TRANSFER_SCHEMA: dict[str, Any] = {
    "type": "OBJECT",
    "properties": {
        "amount": {"type": "INTEGER"},
        "to": {"type": "STRING"},
        "memo": {"type": "STRING", "nullable": True},
    },
    "required": ["amount", "to"],
}

PROJECTIONS = ("signoff_review", "signoff_frontier", "signoff_reviewer", "signoff_key")


# -- keys: who holds which (DESIGN.md "Who holds which key") ---------------------------------


@dataclass
class Keys:
    """The private keys of a test: the log's and the admin's (from ``init_log``), and each reviewer's own."""

    log: Signer
    admin: Signer
    people: dict[str, Signer] = field(default_factory=dict)

    @classmethod
    def for_log(cls, key_path: str | Path) -> Keys:
        """The log and admin keys ``init_log(key_path)`` wrote, and a fresh key for alice, bob and carol."""
        log, admin = read_private_key(key_path), read_private_key(default_admin_key(key_path))
        return cls(log, admin, {person: Signer.generate() for person in (ALICE, BOB, CAROL)})

    def of(self, actor: str) -> Signer:
        return self.admin if actor == ADMIN else self.people[actor]

    @property
    def alice(self) -> Signer:
        return self.people[ALICE]

    @property
    def bob(self) -> Signer:
        return self.people[BOB]

    @property
    def carol(self) -> Signer:
        return self.people[CAROL]

    def write(self, actor: str, path: Path) -> Path:
        """One private key as a PEM file (mode 0600), for a subprocess that signs as ``actor``."""
        return write_private_key(self.of(actor), path)


def sign_entry(store: Any, signer: Any, kind: str, actor: str, body: dict[str, Any]) -> dict[str, str]:
    """``actor``'s signature on an entry, made outside the service (a script, the desk, a forger):
    over :func:`signoff.audit.trust.statement` under the log's own rules. ``signer`` is a
    ``Signer`` or a ``passkeys.SoftPasskey``."""
    sig: dict[str, str] = signer.sign(trust_statement(store.rules, kind, actor, body))
    return sig


def key_body(tag: int | str, **extra: Any) -> dict[str, Any]:
    """A ``key.enrolled`` body for a fresh key of ``agent:k<tag>``."""
    return {"actor": f"agent:k{tag}", "key": Signer.generate().public, "alg": "Ed25519", **extra}


def admin_draft(store: Any, admin: Signer, body: dict[str, Any]) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    """A ``Store.append`` / ``append_many`` draft: ``key.enrolled`` written and signed by the admin."""
    return (ADMIN, "key.enrolled", body, sign_entry(store, admin, "key.enrolled", ADMIN, body))


class FakeClock:
    """A settable UTC clock for ``Store(clock=...)``; every reading moves it on by 1 ms."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self._now += timedelta(milliseconds=1)
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def peek(self) -> datetime:
        return self._now


def call(
    confirmation_id: str = "conf-1",
    *,
    tool: str = "transfer",
    args: dict[str, Any] | None = None,
    session: str = "sess-1",
    invocation: str = "inv-1",
    **extra: Any,
) -> CallSpec:
    """One paused tool call as the bridge would hand it over."""
    return CallSpec(
        app="bank",
        user="user-1",
        session=session,
        invocation=invocation,
        confirmation_id=confirmation_id,
        call_id="call-" + confirmation_id,
        tool=tool,
        args={"amount": 100, "to": "bob"} if args is None else args,
        **extra,
    )


def backend_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def sqlite_path(url: str) -> str:
    assert url.startswith("sqlite:///"), url
    return url[len("sqlite:///") :]


def pg_schema(url: str) -> str:
    """The schema a ``pg_url`` fixture URL points at (its ``options=-csearch_path=...``)."""
    options = parse_qs(urlsplit(url).query).get("options", [""])[0]
    options = unquote(options)
    assert options.startswith("-csearch_path="), url
    return options[len("-csearch_path=") :]


class Db:
    """A raw connection to the store's database, as an attacker (or an auditor) has it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.backend = backend_of(url)
        if self.backend == "sqlite":
            self.conn: Any = sqlite3.connect(sqlite_path(url), timeout=30)
        else:
            import psycopg

            self.conn = psycopg.connect(url)

    def _sql(self, sql: str) -> str:
        return sql if self.backend == "sqlite" else sql.replace("?", "%s")

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(self._sql(sql), tuple(params))
        out = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in cur.fetchall()]
        self.conn.commit()
        return out

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        found = self.rows(sql, params)
        assert len(found) == 1, (sql, found)
        return found[0]

    def run(self, *statements: tuple[str, Sequence[Any]] | str) -> None:
        """Execute statements in one transaction and commit."""
        for item in statements:
            sql, params = (item, ()) if isinstance(item, str) else item
            self.conn.execute(self._sql(sql), tuple(params))
        self.conn.commit()

    def columns(self, table: str) -> list[str]:
        cur = self.conn.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        names = [d[0] for d in cur.description]
        cur.fetchall()
        self.conn.commit()
        return names

    def has_table(self, table: str) -> bool:
        return table in self.tables()

    def tables(self) -> list[str]:
        if self.backend == "sqlite":
            found = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            found = self.rows("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        return sorted(str(name) for (name,) in found if str(name).startswith("signoff_"))

    def indexes(self, table: str) -> list[str]:
        """The names of ``table``'s indexes."""
        if self.backend == "sqlite":
            found = self.rows("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,))
        else:
            found = self.rows(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ?", (table,)
            )
        return sorted(str(name) for (name,) in found)

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def saved(self) -> Iterator[None]:
        """Put every row of every table back as it was on leaving (to try one forgery after another)."""
        tables = self.tables()
        rows = {table: self.rows(f"SELECT * FROM {table}") for table in tables}
        columns = {table: self.columns(table) for table in tables}
        try:
            yield
        finally:
            statements: list[tuple[str, Sequence[Any]]] = []
            for table in tables:
                marks = ", ".join("?" for _ in columns[table])
                statements.append((f"DELETE FROM {table}", ()))
                statements += [
                    (f"INSERT INTO {table} ({', '.join(columns[table])}) VALUES ({marks})", row) for row in rows[table]
                ]
            self.run(*statements)

    def __enter__(self) -> Db:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reading the log ---------------------------------------------------------------

    def log_id(self) -> str:
        return str(self.one("SELECT id FROM signoff_log")[0])

    def entries(self, start: int = 0) -> list[tuple[int, str, bytes]]:
        return [
            (int(s), str(h), bytes(r))
            for s, h, r in self.rows("SELECT seq, hash, raw FROM signoff_entry WHERE seq >= ? ORDER BY seq", (start,))
        ]

    def raw(self, seq: int) -> bytes:
        return bytes(self.one("SELECT raw FROM signoff_entry WHERE seq = ?", (seq,))[0])

    def entry_json(self, seq: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.raw(seq))
        return data


def refused(store: Any, url: str, error: type[Exception], action: Callable[[], Any], *words: str) -> None:
    """``action`` raises ``error`` (its message holding each of ``words``) and writes nothing at all."""
    import pytest

    size, before = store.size(), snapshot(url)
    with pytest.raises(error) as caught:
        action()
    assert store.size() == size and snapshot(url) == before, "a refused operation wrote something"
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def snapshot(url: str) -> dict[str, Any]:
    """Every row of every table except the (large) entry bytes: to prove 'nothing written'."""
    out: dict[str, Any] = {}
    with Db(url) as db:
        for table in db.tables():
            rows = db.rows(f"SELECT * FROM {table}")
            out[table] = sorted(rows, key=repr)
    return out


def leaf(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(b"\x00" + raw).hexdigest()


def _entry_nodes(hashes: Sequence[str]) -> list[list[tuple[int, int, bytes]]]:
    """For each leaf, the perfect Merkle nodes its append completed (RFC 9162 §2.1)."""
    compact = merkle.CompactRange()
    return [compact.append(bytes.fromhex(digest[7:])) for digest in hashes]


def rebuild_tree(db: Db, hashes: Sequence[str], extra: Sequence[tuple[str, Sequence[Any]]] = ()) -> None:
    """Recompute every stored Merkle node (and a head row, where the schema has one) from the
    entry ``hashes``, as a careful forger would, then run ``extra`` in the same transaction.

    Works on the store's schema as it is: nodes kept with the entry that completed them
    (``signoff_entry.nodes``) or in a ``signoff_node`` table; a head in ``signoff_log``."""
    log_id = db.log_id()
    completed = _entry_nodes(hashes)
    statements: list[tuple[str, Sequence[Any]]] = list(extra)
    if "nodes" in db.columns("signoff_entry"):
        statements += [
            ("UPDATE signoff_entry SET nodes = ? WHERE seq = ?", (b"".join(h for _l, _i, h in nodes), seq))
            for seq, nodes in enumerate(completed)
        ]
    if db.has_table("signoff_node"):
        statements.append(("DELETE FROM signoff_node WHERE log = ?", (log_id,)))
        statements += [
            ("INSERT INTO signoff_node (log, level, idx, hash) VALUES (?, ?, ?, ?)", (log_id, level, idx, digest))
            for nodes in completed
            for level, idx, digest in nodes
        ]
    log_columns = db.columns("signoff_log")
    if "head" in log_columns:
        compact = merkle.CompactRange()
        for digest in hashes:
            compact.append(bytes.fromhex(digest[7:]))
        values: dict[str, Any] = {"size": len(hashes), "head": hashes[-1]}
        if "compact" in log_columns:
            values["compact"] = json.dumps([h.hex() for h in compact.hashes])
        sets = ", ".join(f"{name} = ?" for name in values)
        statements.append((f"UPDATE signoff_log SET {sets} WHERE id = ?", (*values.values(), log_id)))
    db.run(*statements)


def relink(db: Db, seq: int, mutate: Callable[[dict[str, Any]], None], *, drop_checkpoints: bool = True) -> None:
    """Rewrite entry ``seq`` with ``mutate`` and re-link every later entry: new canonical bytes,
    hashes and ``prev`` links, the rewritten entry's index columns (kind, actor, subject), every
    Merkle node (and head row). Signatures are left as they are (a forger cannot make new ones).
    The stored checkpoints the rewrite contradicts (those covering entry ``seq``) are dropped, as a
    careful forger would; the log's own ``log.checkpoint`` entries stay (removing one from the
    middle would renumber every later entry)."""
    rows = db.entries()
    hashes = [h for _s, h, _r in rows]
    statements: list[tuple[str, Sequence[Any]]] = []
    prev = hashes[seq - 1] if seq > 0 else "sha256:" + "0" * 64
    for s, _h, raw in rows[seq:]:
        data = json.loads(raw)
        if s == seq:
            mutate(data)
            subject = subject_of(data["body"]) if isinstance(data.get("body"), dict) else None
            statements.append(
                (
                    "UPDATE signoff_entry SET kind = ?, actor = ?, subject = ? WHERE seq = ?",
                    (data.get("kind"), data.get("actor"), subject, s),
                )
            )
        data["prev"] = prev
        new_raw = canonical(data)
        new_hash = leaf(new_raw)
        hashes[s] = new_hash
        statements.append(("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (new_raw, new_hash, s)))
        prev = new_hash
    if drop_checkpoints:
        statements.append(("DELETE FROM signoff_checkpoint WHERE size > ?", (seq,)))
    rebuild_tree(db, hashes, statements)


def forge_append(
    db: Db,
    actor: str,
    kind: str,
    body: Any,
    *,
    at: str | None = None,
    sig: dict[str, str] | None = None,
    signer: Any = None,
    override: dict[str, Any] | None = None,
) -> Entry:
    """Append an entry straight into the database, well linked and hashed, bypassing every rule.

    ``signer`` (a ``Signer`` or a ``passkeys.SoftPasskey``) signs it as the log's rules (version 2)
    say, as somebody holding that key would: the forger who stole it, or the key's owner writing
    behind the service's back. ``override`` replaces or adds record fields after the fact
    (``None`` removes one), for entries that ``audit.entry.build`` itself would refuse to make."""
    log_id = db.log_id()
    if signer is not None:
        sig = signer.sign(statement(kind, actor, body, log_id))
    rows = db.entries()
    hashes = [h for _s, h, _r in rows]
    last_at = json.loads(rows[-1][2])["at"]
    when = at or format_time(
        datetime.strptime(last_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) + timedelta(milliseconds=1)
    )
    if override is None:
        item = build(log=log_id, seq=len(rows), prev=hashes[-1], at=when, actor=actor, kind=kind, body=body, sig=sig)
    else:
        data: dict[str, Any] = {
            "v": 1,
            "log": log_id,
            "seq": len(rows),
            "prev": hashes[-1],
            "at": when,
            "actor": actor,
            "kind": kind,
            "body": body,
        }
        if sig is not None:
            data["sig"] = sig
        for name, value in override.items():
            if value is None:
                data.pop(name, None)
            else:
                data[name] = value
        raw = canonical(data)
        item = Entry(
            len(rows),
            log_id,
            hashes[-1],
            when,
            actor,
            kind,
            body if isinstance(body, dict) else {},
            sig,
            raw,
            leaf(raw),
        )
    values: dict[str, Any] = {
        "log": log_id,
        "seq": item.seq,
        "hash": item.hash,
        "kind": kind,
        "actor": actor,
        "raw": item.raw,
    }
    columns = db.columns("signoff_entry")
    if "subject" in columns:
        values["subject"] = subject_of(body) if isinstance(body, dict) else None
    if "review" in columns:
        values["review"] = item.review
    if "nodes" in columns:
        values["nodes"] = b""  # rebuilt below
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    db.run((f"INSERT INTO signoff_entry ({names}) VALUES ({marks})", tuple(values.values())))
    rebuild_tree(db, [*hashes, item.hash])
    return item


def truncate(db: Db, size: int) -> None:
    """Remove every entry from ``size`` on and make the tree consistent again (undoes a forgery)."""
    hashes = [h for _s, h, _r in db.entries()][:size]
    rebuild_tree(db, hashes, [("DELETE FROM signoff_entry WHERE seq >= ?", (size,))])


def hash_hex(h: bytes) -> str:
    return format_hash(h)


# -- subprocesses --------------------------------------------------------------------


def python_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("SIGNOFF_STORE", None)
    env.pop("SIGNOFF_KEY", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def cli_argv(url: str | None, key: str | Path | None, *args: str) -> list[str]:
    argv = [sys.executable, "-m", "signoff.audit.cli"]
    if url is not None:
        argv += ["--store", url]
    if key is not None:
        argv += ["--key", str(key)]
    return argv + list(args)


def run_cli(
    url: str | None, key: str | Path | None, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m signoff.audit.cli`` in a real subprocess."""
    return subprocess.run(
        cli_argv(url, key, *args), capture_output=True, text=True, env=python_env(), cwd=cwd or ROOT, timeout=120
    )


def run_cli_many(
    jobs: Sequence[list[str]], *, cwd: Path | None = None, parallel: int = 3
) -> list[subprocess.CompletedProcess[str]]:
    """Run several ``audit`` command lines as subprocesses, a few at a time (2 shared cores)."""
    results: list[subprocess.CompletedProcess[str] | None] = [None] * len(jobs)
    running: list[tuple[int, subprocess.Popen[str]]] = []
    queue = list(enumerate(jobs))
    while queue or running:
        while queue and len(running) < parallel:
            index, argv = queue.pop(0)
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_env(), cwd=cwd or ROOT
            )
            running.append((index, proc))
        index, proc = running.pop(0)
        out, err = proc.communicate(timeout=120)
        results[index] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return [r for r in results if r is not None]


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Case:
    """A private copy of the pristine log at ``url``, with raw access for tampering."""

    def __init__(self, url: str, key: Path, meta: dict[str, Any], tmp: Path) -> None:
        self.url = url
        self.key = key
        self.meta = meta
        self.tmp = tmp
        self.backend = backend_of(url)

    def db(self) -> Db:
        return Db(self.url)

    def kept(self, which: str = "kept_end") -> Path:
        """The checkpoint the auditor kept, as a file."""
        import json

        path = self.tmp / f"{which}.json"
        path.write_text(json.dumps(self.meta[which], indent=2), encoding="utf-8")
        return path

    def open(self) -> Any:
        from signoff.audit import open_store

        return open_store(self.url)

    @property
    def store(self) -> Any:
        """One store kept open for the test (closed by the fixture)."""
        if getattr(self, "_store", None) is None:
            self._store = self.open()
        return self._store

    def close(self) -> None:
        if getattr(self, "_store", None) is not None:
            self._store.close()
            self._store = None


# -- a pristine log with every kind of entry, built once per backend and cloned per test -----


def build_pristine(url: str, key_path: Path) -> dict[str, Any]:
    """A small log that holds every entry kind: admin enrolments (a key, reviewers, a passkey by
    its one-time code, a revocation), signed decisions (an Ed25519 key file and a passkey),
    signed service entries, a pending review, an approved-but-not-run review, and three logged
    checkpoints, all stored; the auditor kept two of them (``kept_mid``, ``kept_end``). Returns
    what the tests need to know about it; ``seq`` maps the names below to their seqs (the tests
    name entries, they do not count them).

    seq  name            kind                actor     notes
    0    log_key         key.enrolled        log:      the log key, signed by itself
    1    log_configured  log.configured      log:      rules 2, signed decisions, admin:root's key
    2    service_key     key.enrolled        admin     service:signoff's key; every later service entry is signed
    3    alice_enrolled  reviewer.enrolled   admin     alice (teller, *) with her Ed25519 key
    4    bob_enrolled    reviewer.enrolled   admin     bob (intern, lookup*) with a one-time enrolment code
    5    bob_passkey     key.enrolled        bob       bob's own passkey (ES256), with the code's proof
    6,7  opened_r1/r2    review.opened       agent     frontier F1: r1 transfer, r2 lookup_account
    8    approve_r1      review.approved     alice     signed with her key file
    9    edit_r2         review.edited       bob       signed with his passkey (a WebAuthn assertion)
    10   resume_F1       run.resumed         agent     unsigned (no agent key); no projection holds its body
    11,12 exec_r1/r2     tool.executed       agent
    13   opened_r3       review.opened       agent     F2, deadline 10 min
    14   reject_r3       review.rejected     alice
    15   resume_F2       run.resumed         agent
    16   checkpoint_first log.checkpoint     log:      size 16, stored
    17   opened_r4       review.opened       agent     F3, deadline 60 s
    18   expire_r4       review.expired      service
    19   opened_r5       review.opened       agent     F4
    20   withdraw_r5     review.withdrawn    agent
    21   disable_bob     reviewer.disabled   admin
    22   opened_r6       review.opened       agent     F5: r6 stays pending (deadline 1 h)
    23   opened_r7       review.opened       agent     F6
    24   approve_r7      review.approved     alice
    25   checkpoint_mid  log.checkpoint      log:      size 25, stored; kept_mid
    26   resume_F6       run.resumed         agent     after kept_mid: r7 resumed, never run
    27   tail_0          key.enrolled        admin     agent:tail-0's key
    28   revoke_tail_0   key.revoked         admin     ... revoked again
    29   tail_1          key.enrolled        admin     agent:tail-1's key
    30   checkpoint_end  log.checkpoint      log:      size 30, stored; kept_end
    """
    from passkeys import SoftPasskey

    from signoff.audit import Policy, ReviewService, open_store

    clock = FakeClock()
    store = open_store(url, clock=clock)
    seq: dict[str, int] = {}
    try:
        store.init_log(key_path)
        seq["log_key"], seq["log_configured"] = 0, 1
        keys_ = Keys.for_log(key_path)
        admin, alice = keys_.admin, keys_.alice
        log_signer = read_private_key(key_path)
        service_key = Signer.generate()
        seq["service_key"] = ReviewService(store).enroll_key(SERVICE, service_key.public, admin=admin).seq
        svc = ReviewService(store, signer=service_key)
        seq["alice_enrolled"] = svc.enroll_reviewer(
            ALICE, roles=["teller"], tools=["*"], key=alice.public, admin=admin
        ).seq
        seq["bob_enrolled"] = svc.enroll_reviewer(
            BOB, roles=["intern"], tools=["lookup*"], code="bob-first-login", admin=admin
        ).seq
        bob = SoftPasskey("ES256")
        seq["bob_passkey"] = svc.enroll_passkey(BOB, bob.passkey, code="bob-first-login").seq
        f1 = svc.open_frontier(
            [
                call("c1", args={"amount": 250, "to": "carol"}, tool_schema=TRANSFER_SCHEMA),
                call("c2", tool="lookup_account", args={"account": "ACC-1"}),
            ],
            actor=AGENT,
        )
        r1, r2 = (r.id for r in f1.reviews)
        seq["opened_r1"], seq["opened_r2"] = (r.opened_seq for r in f1.reviews)
        done = svc.approve(r1, reviewer=ALICE, rationale="known payee", signer=alice)
        seq["approve_r1"] = int(done.decision_seq or 0)
        patch = [{"op": "replace", "path": "/account", "value": "ACC-2"}]
        prepared = decision.prepare_edit(svc.get(r2), patch, "typo")  # the body as the service records it
        done = svc.edit(
            r2,
            reviewer=BOB,
            patch=patch,
            rationale="typo",
            sig=sign_entry(store, bob, "review.edited", BOB, prepared.body),
            salts=prepared.salts,
        )
        seq["edit_r2"] = int(done.decision_seq or 0)
        seq["resume_F1"] = svc.claim_resume(f1.id, actor=AGENT).seq
        seq["exec_r1"] = svc.record_execution(r1, actor=AGENT, args={"amount": 250, "to": "carol"}).seq
        seq["exec_r2"] = svc.record_execution(r2, actor=AGENT, args={"account": "ACC-2"}).seq
        f2 = svc.open_frontier(
            [call("c3", args={"amount": 9000, "to": "mallory"})], actor=AGENT, policies=Policy(deadline_seconds=600)
        )
        r3 = f2.reviews[0].id
        seq["opened_r3"] = f2.reviews[0].opened_seq
        done = svc.reject(r3, reviewer=ALICE, reason="payee on a watch list", signer=alice)
        seq["reject_r3"] = int(done.decision_seq or 0)
        seq["resume_F2"] = svc.claim_resume(f2.id, actor=AGENT).seq
        seq["checkpoint_first"] = store.checkpoint(log_signer).size
        f3 = svc.open_frontier([call("c4")], actor=AGENT, policies=Policy(deadline_seconds=60))
        r4 = f3.reviews[0].id
        seq["opened_r4"] = f3.reviews[0].opened_seq
        clock.advance(120)
        expired = svc.expire_due()
        assert [r.id for r in expired] == [r4]
        seq["expire_r4"] = int(expired[0].decision_seq or 0)
        f4 = svc.open_frontier([call("c5")], actor=AGENT)
        r5 = f4.reviews[0].id
        seq["opened_r5"] = f4.reviews[0].opened_seq
        seq["withdraw_r5"] = int(svc.withdraw(r5, actor=AGENT, reason="run cancelled").decision_seq or 0)
        seq["disable_bob"] = svc.disable_reviewer(BOB, reason="left the team", admin=admin).seq
        f5 = svc.open_frontier(
            [call("c6", args={"amount": 5, "to": "dave"})], actor=AGENT, policies=Policy(deadline_seconds=3600)
        )
        r6 = f5.reviews[0].id
        seq["opened_r6"] = f5.reviews[0].opened_seq
        f6 = svc.open_frontier([call("c7", args={"amount": 7, "to": "erin"})], actor=AGENT)
        r7 = f6.reviews[0].id
        seq["opened_r7"] = f6.reviews[0].opened_seq
        seq["approve_r7"] = int(svc.approve(r7, reviewer=ALICE, signer=alice).decision_seq or 0)
        kept_mid = store.checkpoint(log_signer)
        seq["checkpoint_mid"] = kept_mid.size
        seq["resume_F6"] = svc.claim_resume(f6.id, actor=AGENT).seq
        tail_0 = Signer.generate()
        seq["tail_0"] = svc.enroll_key("agent:tail-0", tail_0.public, admin=admin).seq
        seq["revoke_tail_0"] = svc.revoke_key(
            "agent:tail-0", tail_0.fingerprint, reason="host retired", admin=admin
        ).seq
        seq["tail_1"] = svc.enroll_key("agent:tail-1", Signer.generate().public, admin=admin).seq
        kept_end = store.checkpoint(log_signer)
        seq["checkpoint_end"] = kept_end.size
        size = store.size()
    finally:
        store.close()
    assert list(seq.values()) == list(range(size)), seq
    return {
        "size": size,
        "seq": seq,
        "log_public_key": log_signer.public,
        "admin_public_key": admin.public,
        "keys": keys_,
        "bob_passkey": bob,
        "service_key": service_key,
        "reviews": {"r1": r1, "r2": r2, "r3": r3, "r4": r4, "r5": r5, "r6": r6, "r7": r7},
        "frontiers": {"F1": f1.id, "F2": f2.id, "F3": f3.id, "F4": f4.id, "F5": f5.id, "F6": f6.id},
        "kept_mid": kept_mid.to_json(),
        "kept_end": kept_end.to_json(),
        "stored_checkpoints": [seq["checkpoint_first"], seq["checkpoint_mid"], seq["checkpoint_end"]],
    }


def legacy_checkpoint(store: Any, signer: Signer) -> Any:
    """A checkpoint as Signoff recorded them before C2SP notes (issue 18): ``{"log", "size", "root", "at"}``
    signed by the log key as JSON, on the log and in the table. Logs that hold these keep verifying."""
    import json as _json

    from sqlalchemy import insert

    from signoff.audit.canonical import canonical
    from signoff.audit.entry import format_hash
    from signoff.audit.tables import CheckpointRow
    from signoff.audit.tree_head import Checkpoint

    def work(tx: Any) -> Any:
        root = format_hash(tx.compact.root())
        body = {"log": tx.log, "size": tx.size, "root": root, "at": tx.at}
        point = Checkpoint(tx.log, tx.size, root, tx.at, signer.sign(canonical(body)))
        recorded = {"size": point.size, "root": root, "at": point.at, "sig": point.sig}
        actor = f"log:{tx.log}"
        tx.append(actor, "log.checkpoint", recorded, tx.signature(actor, "log.checkpoint", recorded, None, signer))
        row = {"log": tx.log, "size": point.size, "root": root, "at": point.at, "signed": _json.dumps(point.to_json())}
        tx.conn.execute(insert(CheckpointRow), row)
        return point

    return store.transact(work)
