"""The log's witnesses, on the log (DESIGN.md "Vouched for outside the operator"; SPEC.md "Witnesses").

An admin names each witness with a signed ``witness.added`` (its key name, cosignature/v1 vkey and
submission URL), removes one with ``witness.removed`` and sets how many must cosign with
``witness.quorum``. Each cosignature a witness returns is recorded as ``log.cosigned`` (signed by the
log key), in the same transaction as the stored checkpoint's note gains its line, so a deleted or
added cosignature shows in ``audit verify``. Everything here decides from the entries; the only row it
writes is the stored checkpoint (a projection of the log). Pushing checkpoints is
:mod:`signoff.audit.publisher`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.audit import c2sp
from signoff.audit.c2sp import Witness
from signoff.audit.entry import Entry
from signoff.audit.errors import InvalidEntry, StoreError
from signoff.audit.keys import Signer
from signoff.audit.reader import LogReader, parse_entry
from signoff.audit.store import Store, Tx

# The witnesses' range of the subject index (witness:<name>, witness:* for the quorum).
_CONFIG = (
    "SELECT seq, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'witness:' AND subject < 'witness;' "
    "ORDER BY seq"
)
_LAST_COSIGNED = "SELECT seq, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq DESC LIMIT 1"
_CHECKPOINT_ROW = "SELECT signed FROM signoff_checkpoint WHERE log = ? AND size = ?"
_UPDATE_ROW = "UPDATE signoff_checkpoint SET signed = ? WHERE log = ? AND size = ?"


@dataclass(frozen=True)
class WitnessConfig:
    """The witnesses on the log and the quorum, as the admin's entries so far say."""

    witnesses: dict[str, Witness]
    quorum: int


def replay(entries: Iterable[Entry]) -> WitnessConfig:
    """The configuration the witness entries (oldest first; each already checked on its write) give."""
    active: dict[str, Witness] = {}
    quorum = 0
    for item in entries:
        if item.kind in c2sp.WITNESS_KINDS:
            quorum = c2sp.apply_witness_entry(item.kind, item.body, active, quorum)
    return WitnessConfig(active, quorum)


def config(store: LogReader) -> WitnessConfig:
    return replay(parse_entry(bytes(row.raw)) for row in store.read_rows(_CONFIG, store.log_id))


def _config_in(tx: Tx) -> WitnessConfig:
    found = [parse_entry(bytes(row.raw)) for row in tx.rows(_CONFIG, tx.log)]
    return replay([*found, *(e for e in tx.appended if e.kind in c2sp.WITNESS_KINDS)])


def last_cosigned(store: LogReader, name: str) -> Entry | None:
    """The newest ``log.cosigned`` of witness ``name``: the size it cosigned last, as far as the log knows."""
    found = store.read_rows(_LAST_COSIGNED, f"cosigned:{name}", store.log_id)
    return parse_entry(bytes(found[0].raw)) if found else None


# -- the admin's entries ---------------------------------------------------------------------------


def _admin_entry(store: Store, kind: str, body: dict[str, Any], admin: Signer, actor: str | None) -> Entry:
    writer = actor or store.admin_actor(admin)

    def work(tx: Tx) -> Entry:
        current = _config_in(tx)
        try:
            c2sp.check_witness_body(kind, body, current.witnesses, current.quorum)
        except ValueError as exc:
            raise InvalidEntry(str(exc)) from None
        return tx.append(writer, kind, body, tx.signature(writer, kind, body, None, admin))

    return store.transact(work)


def add_witness(store: Store, url: str, vkey: str, *, admin: Signer, actor: str | None = None) -> Entry:
    """``witness.added``: checkpoints are pushed to ``url`` (its submission prefix), cosigned by ``vkey``."""
    name = vkey.split("+", 1)[0]
    return _admin_entry(store, "witness.added", {"witness": name, "vkey": vkey, "url": url}, admin, actor)


def remove_witness(store: Store, name: str, *, reason: str, admin: Signer, actor: str | None = None) -> Entry:
    return _admin_entry(store, "witness.removed", {"witness": name, "reason": reason}, admin, actor)


def set_quorum(store: Store, quorum: int, *, admin: Signer, actor: str | None = None) -> Entry:
    return _admin_entry(store, "witness.quorum", {"quorum": quorum}, admin, actor)


# -- cosignatures ---------------------------------------------------------------------------------


def record_cosignatures(store: Store, size: int, lines: Sequence[str], log_key: Signer) -> list[Entry]:
    """``log.cosigned`` for each cosignature line of a witness on the log over the stored note checkpoint of
    ``size``, and the line added to that checkpoint's stored note, in one transaction. A line from a key
    not on the log is ignored (c2sp.org/tlog-witness: "The client MUST ignore any cosignatures from unknown
    keys"); one that fails to verify raises ``InvalidEntry``; one already recorded is skipped."""
    if log_key.public != store.public_key:
        raise StoreError(f"log key: expected the log's key {store.public_key}, found {log_key.public}")

    def work(tx: Tx) -> list[Entry]:
        current = _config_in(tx)
        found = tx.rows(_CHECKPOINT_ROW, tx.log, size)
        if not found:
            raise StoreError(f"size {size}: expected a stored checkpoint of that size, found none")
        stored = json.loads(found[0].signed)
        note = stored.get("note")
        if not isinstance(note, str):
            raise StoreError(f"size {size}: expected a C2SP note checkpoint, found a JSON one (made before notes)")
        text = c2sp.note_text(note)
        have = {line.split(" ", 2)[1] for line in note.split("\n\n", 1)[1].splitlines()}
        written: list[Entry] = []
        actor = f"log:{tx.log}"
        for line in lines:
            name = line[2:].split(" ", 1)[0] if line.startswith("\u2014 ") else ""
            witness = current.witnesses.get(name)
            if witness is None or name in have:
                continue
            try:
                timestamp = c2sp.check_cosignature(witness, text, line)
            except ValueError as exc:
                raise InvalidEntry(str(exc)) from None
            body = {"witness": name, "size": size, "cosignature": line, "timestamp": timestamp}
            sig = tx.signature(actor, "log.cosigned", body, None, log_key)
            written.append(tx.append(actor, "log.cosigned", body, sig))
            note += line + "\n"
            have.add(name)
        if written:
            tx.rows(_UPDATE_ROW, json.dumps({**stored, "note": note}), tx.log, size)
        return written

    return store.transact(work)


# -- what is covered -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    """How far the log is vouched for: per witness the size it cosigned last, and the newest checkpoint
    cosigned by a quorum of the witnesses on the log (``None`` if none is)."""

    size: int
    quorum: int
    witnesses: dict[str, int | None]  # name -> the size it cosigned last
    covered: int | None

    @property
    def unwitnessed(self) -> int:
        """Entries after the newest quorum-cosigned checkpoint (all of them if none is)."""
        return self.size - (self.covered or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "quorum": self.quorum,
            "witnesses": self.witnesses,
            "covered": self.covered,
            "unwitnessed": self.unwitnessed,
        }


def coverage(store: Store) -> Coverage:
    current = config(store)
    last: dict[str, int | None] = {}
    for name in current.witnesses:
        found = last_cosigned(store, name)
        last[name] = int(found.body["size"]) if found is not None else None
    need = max(1, current.quorum)  # a quorum of 0 asks no witness to vouch; coverage still counts one
    covered = _quorum_size(store, list(current.witnesses), need) if len(current.witnesses) >= need else None
    return Coverage(store.size(), current.quorum, last, covered)


def _quorum_size(store: Store, names: Sequence[str], need: int) -> int | None:
    """The newest stored note checkpoint with cosignatures of at least ``need`` of ``names``."""
    rows = store.read_rows(
        "SELECT size, signed FROM signoff_checkpoint WHERE log = ? ORDER BY size DESC LIMIT 200", store.log_id
    )
    wanted = set(names)
    for row in rows:
        note = json.loads(row.signed).get("note")
        if not isinstance(note, str):
            continue
        signers = {line.split(" ", 2)[1] for line in note.split("\n\n", 1)[1].splitlines()}
        if len(signers & wanted) >= need:
            return int(row.size)
    return None


__all__ = [
    "Coverage",
    "WitnessConfig",
    "add_witness",
    "config",
    "coverage",
    "last_cosigned",
    "record_cosignatures",
    "remove_witness",
    "replay",
    "set_quorum",
]
