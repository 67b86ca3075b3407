"""One write transaction on the log (:class:`Tx`): entries placed at the head, signatures checked.

:meth:`signoff.audit.store.Store.transact` opens it at the locked head and moves the head
when the work returns. Who may write and sign what is :mod:`signoff.audit.trust`, checked here
against the state read after the head lock; ``key.enrolled`` and ``key.revoked`` are written
here because their rules need only the keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert

from signoff.audit import entry as entries
from signoff.audit import merkle, trust
from signoff.audit.driver import dbapi_cursor, fetch
from signoff.audit.entry import Entry, format_time, parse_hash, subject_of
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.keys import Signer
from signoff.audit.reader import LogReader, parse_entry
from signoff.audit.tables import KeyRow
from signoff.audit.trust import PublicKey

_ACTOR_KEYS = "SELECT fingerprint, public_key, enrolled_seq FROM signoff_key WHERE log = ? AND actor = ?"
_KEY_OWNERS = "SELECT actor FROM signoff_key WHERE log = ? AND fingerprint = ?"
_REVOKE_KEY = "DELETE FROM signoff_key WHERE log = ? AND actor = ? AND fingerprint = ?"
_NEWEST_ABOUT = "SELECT max(seq) AS seq FROM signoff_entry WHERE subject = ? AND log = ?"
_REVIEWER_ENROLLED = "SELECT enrolled_seq FROM signoff_reviewer WHERE log = ? AND id = ?"
_ENTRY_RAW = "SELECT raw FROM signoff_entry WHERE log = ? AND seq = ?"
_OWN_KEYS_SINCE = (
    "SELECT raw FROM signoff_entry WHERE subject = ? AND log = ? AND kind = 'key.enrolled' AND seq > ? ORDER BY seq"
)


@dataclass
class Tx:
    """One write transaction on the log. ``append`` places an entry at the head."""

    store: LogReader  # the Store that opened it (a Tx reads only its backend)
    conn: Connection
    log: str
    now: datetime
    size: int
    head: str
    compact: merkle.CompactRange
    _entries: list[tuple[Any, ...]] = field(default_factory=list)
    appended: list[Entry] = field(default_factory=list)

    at: str = ""

    def __post_init__(self) -> None:
        self.at = format_time(self.now)

    def append(self, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None) -> Entry:
        item = entries.build(
            log=self.log, seq=self.size, prev=self.head, at=self.at, actor=actor, kind=kind, body=body, sig=sig
        )
        completed = self.compact.append(parse_hash(item.hash))
        nodes = b"".join(digest for _level, _index, digest in completed)
        self._entries.append((self.log, item.seq, item.hash, kind, actor, subject_of(body), item.raw, nodes))
        self.size += 1
        self.head = item.hash
        self.appended.append(item)
        return item

    # -- group commit (:mod:`signoff.audit.group_commit`): several writers' work in this transaction --

    def restamp(self, now: datetime) -> None:
        """The next writer's own clock reading (never earlier than the entries before it)."""
        if format_time(now) > self.at:
            self.now = now
            self.at = format_time(now)

    def mark(self) -> tuple[int, str, merkle.CompactRange, int]:
        """Where the head stands before a writer's work, to :meth:`reset` to if it raises."""
        return self.size, self.head, self.compact.copy(), len(self._entries)

    def reset(self, mark: tuple[int, str, merkle.CompactRange, int]) -> None:
        self.size, self.head, self.compact, count = mark
        del self._entries[count:]
        del self.appended[count:]

    def rows(self, sql: str, *params: Any) -> list[Any]:
        """Run driver-level SQL (``?`` placeholders) in this transaction; rows with named fields."""
        return fetch(dbapi_cursor(self.conn), self.store.backend, sql, params)

    @property
    def rules(self) -> trust.LogRules:
        return self.store.rules

    def keys_of(self, actor: str) -> dict[str, PublicKey]:
        """``actor``'s active keys by fingerprint, as the key projection holds them."""
        return {
            row.fingerprint: PublicKey.from_stored(actor, row.public_key, row.enrolled_seq)
            for row in self.rows(_ACTOR_KEYS, self.log, actor)
        }

    def check_key_free(self, owner: str, fingerprint: str) -> None:
        """:func:`signoff.audit.trust.check_key_owner` against the key projection."""
        trust.check_key_owner(owner, fingerprint, (str(r.actor) for r in self.rows(_KEY_OWNERS, self.log, fingerprint)))

    def signature(
        self,
        actor: str,
        kind: str,
        body: dict[str, Any],
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        *,
        legacy_admin: bool = False,
    ) -> dict[str, Any] | None:
        """Check who may write this entry, and its signature, in its transaction (:mod:`signoff.audit.trust`).

        An actor with an enrolled key signs every later entry, so a forger cannot drop a
        signature; a log that requires signed decisions refuses an unsigned one. A given ``sig``
        must verify against a key enrolled for the actor; otherwise ``signer`` signs when its key
        is enrolled for the actor.
        """
        own = self.keys_of(actor)
        rules = self.rules
        live_code = self._live_code(actor) if trust.by_code(kind, actor, body) else None
        trust.check_authority(
            rules, self.size, kind, actor, body, actor_keyed=bool(own), live_code=live_code, legacy_admin=legacy_admin
        )
        keys = trust.signing_keys(kind, actor, body, own, live_code)
        if sig is None and signer is not None and signer.fingerprint in keys:
            sig = signer.sign(trust.statement(rules, kind, actor, body))
        trust.check_signature(rules, kind, actor, body, sig, keys)
        used = own.get(str(sig.get("key"))) if isinstance(sig, dict) else None
        if used is not None:
            self.prove_key(actor, used)
        return sig

    def prove_key(self, actor: str, key: PublicKey) -> None:
        """The key a signature was checked with is one the log enrolled for ``actor`` under an admin's
        signature, and has not revoked: the key projection (``signoff_key``) is only an index, and a row
        added behind the service's back is refused here as the gate refuses it
        (:func:`signoff.audit.decided.key_on_log`). Proven once per process until the actor's entries
        change; a key enrolled earlier in this very transaction was written through this checked path."""
        if self.pending_entry(key.seq) is not None:
            return
        newest = self.rows(_NEWEST_ABOUT, actor, self.log)
        mark = int(newest[0].seq) if newest and newest[0].seq is not None else -1
        cache = getattr(self.store, "proven_keys", None)
        if cache is not None and cache.get((actor, key.fingerprint)) == mark:
            return
        from signoff.audit.decided import DecisionNotProven, key_on_log  # the gate's own proof

        try:
            key_on_log(self.store, actor, key.fingerprint, self.size)
        except DecisionNotProven as exc:  # a refused writer, as any other signature the log does not back
            raise NotAllowed(str(exc)) from None
        if cache is not None:
            cache[(actor, key.fingerprint)] = mark

    def _live_code(self, reviewer: str) -> PublicKey | None:
        """The reviewer's unused enrolment code key: on their latest ``reviewer.enrolled``, with no key
        enrolled by code since."""
        found = self.rows(_REVIEWER_ENROLLED, self.log, reviewer)
        if not found:
            return None
        enrolled_seq = found[0].enrolled_seq
        raw = self.rows(_ENTRY_RAW, self.log, enrolled_seq)
        enrolment = parse_entry(bytes(raw[0].raw)) if raw else self.pending_entry(enrolled_seq)
        committed = enrolment.body.get("code_key") if enrolment is not None else None
        if not isinstance(committed, str):
            return None
        since = [parse_entry(bytes(row.raw)) for row in self.rows(_OWN_KEYS_SINCE, reviewer, self.log, enrolled_seq)]
        since += [e for e in self.appended if e.kind == "key.enrolled" and e.seq > enrolled_seq]
        if any(trust.by_code("key.enrolled", reviewer, e.body) and e.body.get("actor") == reviewer for e in since):
            return None  # one code, one key
        return PublicKey.enrolled(reviewer, {"alg": "Ed25519", "key": committed}, enrolled_seq)

    def pending_entry(self, seq: int) -> Entry | None:
        """An entry appended earlier in this transaction, not in the table yet: group commit inserts a
        batch's entries only at its commit (:mod:`signoff.audit.group_commit`)."""
        return next((e for e in self.appended if e.seq == seq), None)

    def enroll_key(
        self,
        actor: str,
        owner: str,
        body: dict[str, Any],
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        *,
        legacy_admin: bool = False,
    ) -> Entry:
        """``key.enrolled``: bind a public key (Ed25519, or a passkey) to ``owner``; from now on
        ``owner`` signs its entries. Who may (an admin, or the owner with an enrolment code) is
        :func:`signoff.audit.trust.check_authority`."""
        entries.check_actor(owner, "body.actor")
        if body.get("actor") != owner:
            raise InvalidEntry(f"body.actor: expected {owner!r}, found {body.get('actor')!r}")
        try:
            key = PublicKey.enrolled(owner, body, self.size)
        except NotAllowed as exc:  # a malformed key is bad input (a ValueError), not a refusal of the writer
            raise InvalidEntry(str(exc)) from None
        if key.fingerprint in self.keys_of(owner):
            raise InvalidEntry(
                f"key: expected a key not yet enrolled for {owner}, found {key.fingerprint} enrolled already"
            )
        self.check_key_free(owner, key.fingerprint)
        signed = self.signature(actor, "key.enrolled", body, sig, signer, legacy_admin=legacy_admin)
        entry = self.append(actor, "key.enrolled", body, signed)
        self.add_key_row(key, entry.seq)
        return entry

    def add_key_row(self, key: PublicKey, seq: int) -> None:
        self.conn.execute(
            insert(KeyRow),
            {
                "log": self.log,
                "fingerprint": key.fingerprint,
                "actor": key.actor,
                "public_key": key.stored(),
                "enrolled_seq": seq,
            },
        )

    def revoke_key(self, actor: str, owner: str, fingerprint: str, reason: str, signer: Signer | None = None) -> Entry:
        """``key.revoked``: from now on ``owner`` can no longer sign with this key (an admin's act)."""
        if fingerprint not in self.keys_of(owner):
            raise InvalidEntry(f"key: expected a key enrolled for {owner}, found {fingerprint!r} not enrolled")
        body = {"actor": owner, "key": fingerprint, "reason": reason}
        entry = self.append(actor, "key.revoked", body, self.signature(actor, "key.revoked", body, None, signer))
        self.rows(_REVOKE_KEY, self.log, owner, fingerprint)
        return entry
