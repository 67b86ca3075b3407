"""One write transaction on the log (:class:`Tx`): entries placed at the head, signatures checked.

:meth:`signoff.audit.store.Store.transact` opens it at the locked head and moves the head
when the work returns; ``key.enrolled`` is written here because its rules need only the keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert

from signoff.audit import entry as entries
from signoff.audit import merkle
from signoff.audit.driver import dbapi_cursor, fetch
from signoff.audit.entry import Entry, format_time, parse_hash
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.keys import Signer, decode_public, fingerprint, verify_signature
from signoff.audit.reader import LogReader
from signoff.audit.tables import KeyRow

_ACTOR_KEYS = "SELECT fingerprint, public_key FROM signoff_key WHERE log = ? AND actor = ?"


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
        self._entries.append((self.log, item.seq, item.hash, kind, actor, _subject(body), item.raw, nodes))
        self.size += 1
        self.head = item.hash
        self.appended.append(item)
        return item

    def rows(self, sql: str, *params: Any) -> list[Any]:
        """Run driver-level SQL (``?`` placeholders) in this transaction; rows with named fields."""
        return fetch(dbapi_cursor(self.conn), self.store.backend, sql, params)

    def signature(
        self,
        actor: str,
        kind: str,
        body: dict[str, Any],
        sig: dict[str, str] | None = None,
        signer: Signer | None = None,
    ) -> dict[str, str] | None:
        """The entry's signature, checked in its transaction.

        An actor with an enrolled key signs every later entry, so a forger cannot drop a
        signature. A given ``sig`` must verify against a key enrolled for the actor;
        otherwise ``signer`` signs when its key is enrolled for the actor.
        """
        keys = {row[0]: row[1] for row in self.rows(_ACTOR_KEYS, self.log, actor)}
        message = entries.statement(kind, actor, body)
        if sig is None and signer is not None and signer.fingerprint in keys:
            sig = signer.sign(message)
        if sig is None:
            if keys:
                raise NotAllowed(f"sig: expected a signature by {actor}'s enrolled key, found none")
            return None
        public = keys.get(str(sig.get("key")))
        if public is None:
            raise NotAllowed(f"sig.key: expected a key enrolled for {actor}, found {sig.get('key')!r}")
        if not verify_signature(public, sig, message):
            raise NotAllowed(f"sig.value: expected a valid Ed25519 signature by {sig.get('key')}, found an invalid one")
        return sig

    def enroll_key(
        self,
        actor: str,
        owner: str,
        key: str,
        sig: dict[str, str] | None = None,
        signer: Signer | None = None,
        body: dict[str, Any] | None = None,
    ) -> Entry:
        """``key.enrolled``: bind a public Ed25519 key to ``owner``; from now on ``owner`` signs its entries.

        ``actor`` is the owner itself or a ``service:`` (ReviewService also lets an admin enroll).
        """
        entries.check_actor(owner, "body.actor")
        decode_public(key)
        fp = fingerprint(key)
        if any(row[0] == fp for row in self.rows(_ACTOR_KEYS, self.log, owner)):
            raise InvalidEntry(f"key: expected a key not yet enrolled for {owner}, found {fp} enrolled already")
        body = body if body is not None else {"actor": owner, "key": key, "alg": "Ed25519"}
        entry = self.append(actor, "key.enrolled", body, self.signature(actor, "key.enrolled", body, sig, signer))
        self.conn.execute(
            insert(KeyRow),
            {"log": self.log, "fingerprint": fp, "actor": owner, "public_key": key, "enrolled_seq": entry.seq},
        )
        return entry


def _subject(body: dict[str, Any]) -> str | None:
    """What an entry is about, for the subject index: a review, frontier, reviewer or actor."""
    for name in ("review", "frontier", "reviewer", "actor"):
        value = body.get(name)
        if isinstance(value, str):
            return value
    return None
