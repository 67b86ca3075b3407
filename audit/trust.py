"""Who may write and sign what on a log (DESIGN.md "Who holds which key"), as pure functions.

A log made by ``audit init`` states its rules in entry 1, ``log.configured``, signed by the log
key: rules version 2, whether decisions must be signed, and the first administrator's key. From
then on:

* only an administrator (an ``admin:`` actor signing with an enrolled key) enrolls or disables a
  reviewer, enrolls or revokes a key, and sets a review policy (``policy.set``), except that a
  reviewer may enroll a key of their own
  (a passkey) with the one-time enrolment code the administrator gave them: the admin puts the
  public half of a key derived from the code on the log (``code_key``), and the reviewer's
  ``key.enrolled`` is signed with that derived key, once. The code never appears on the log, and
  nobody without it can enroll, or swap, a key in that entry;
* every entry by an actor with an active key carries that actor's signature, so nobody can
  drop one; every decision carries the deciding person's signature when the log requires it;
* the log's own actor writes only its key (entry 0), its rules (entry 1) and checkpoints.

A statement is ``canonical({"log", "kind", "actor", "body"})`` (RFC 8785): it names the log,
so a signature made for one log is worth nothing on another (entries 0 and 1, which set the
rules up and are signed by the log's own key, use the version 1 statement). Logs made before rules version 2
(no ``log.configured`` at entry 1) keep version 1: a ``service:`` actor or an admin reviewer
enrolls, decisions may be unsigned, and statements leave the log id out.

The write transaction (:mod:`signoff.audit.reviews`), ``audit verify`` and the gate before a
tool runs all call these same functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit import keys as ed25519
from signoff.audit import webauthn
from signoff.audit.entry import statement as entry_statement
from signoff.audit.errors import NotAllowed
from signoff.audit.webauthn import Passkey, SignatureError

RULES_VERSION = 2
DECISIONS = frozenset({"review.approved", "review.edited", "review.rejected"})
ENROLMENT = frozenset({"reviewer.enrolled", "reviewer.disabled", "key.enrolled", "key.revoked"})
WITNESS_KINDS = frozenset({"witness.added", "witness.removed", "witness.quorum"})
ADMIN_KINDS = (
    ENROLMENT | {"policy.set", "policy.declined", "sso.required"} | WITNESS_KINDS
)  # only an admin writes these (a key by code aside)
DELEGATIONS = frozenset({"delegation.granted", "delegation.revoked"})
PROPOSED = "policy.proposed"  # a reviewer's proposal of a standing rule; an admin's policy.set makes it so
# What a person writes with their own key (an admin may write a delegation too): each is signed when the
# log requires signed decisions, like a decision.
BY_PEOPLE = DECISIONS | DELEGATIONS | {PROPOSED}
ERASED = "data.erased"  # values beside the log deleted (audit erase, retention); never an entry rewritten
RETENTION = "retention"  # the reason of an erasure that a retention policy made
LOG_KINDS = frozenset({"key.enrolled", "log.configured", "log.checkpoint", "log.cosigned"})
ALGORITHMS = (ed25519.ALG, webauthn.ALG)


@dataclass(frozen=True)
class LogRules:
    """The rules a log lives by, from its ``log.configured`` entry (or version 1 without one)."""

    log: str
    version: int = 1
    signed_decisions: bool = False
    configured_origin: str | None = None  # log.configured's origin (logs made since C2SP checkpoints)
    sealed_values: bool = False  # log.configured's "values": "sealed" (logs made since values beside the log)

    @property
    def log_actor(self) -> str:
        return f"log:{self.log}"

    @property
    def origin(self) -> str:
        """The log's C2SP origin (c2sp.org/tlog-checkpoint): the one ``audit init --origin`` set, else one
        derived from the log id (:func:`default_origin`), for logs made before origins existed."""
        return self.configured_origin or default_origin(self.log)

    @classmethod
    def configured(cls, log: str, body: Mapping[str, Any]) -> LogRules:
        """Rules from a ``log.configured`` body; raises ``NotAllowed`` naming a bad field."""
        version = body.get("rules")
        if version != RULES_VERSION:
            raise NotAllowed(f"body.rules: expected {RULES_VERSION}, found {version!r}")
        decisions = body.get("decisions")
        if decisions not in ("signed", "unsigned-allowed"):
            raise NotAllowed(f"body.decisions: expected 'signed' or 'unsigned-allowed', found {decisions!r}")
        admin = body.get("admin")
        if not isinstance(admin, Mapping) or not str(admin.get("actor", "")).startswith("admin:"):
            raise NotAllowed(f"body.admin: expected the first admin's actor (admin:…) and key, found {admin!r}")
        PublicKey.enrolled(str(admin["actor"]), admin, 1)
        origin = body.get("origin")
        if origin is not None:
            try:
                check_origin(origin)
            except ValueError as exc:
                raise NotAllowed(f"body.origin: {exc}") from None
        values = body.get("values", "in-entries")
        if values not in ("sealed", "in-entries"):
            raise NotAllowed(f"body.values: expected 'sealed' or 'in-entries', found {values!r}")
        return cls(log, RULES_VERSION, decisions == "signed", origin, values == "sealed")


def configured_body(
    signed_decisions: bool,
    admin_actor: str,
    admin_public: str,
    origin: str | None = None,
    *,
    sealed_values: bool = False,
) -> dict[str, Any]:
    """The body of entry 1 on a new log; ``origin`` names the log in its C2SP checkpoints;
    ``sealed_values``: personal data lives beside the log, under commitments (:mod:`.sealing`)."""
    body: dict[str, Any] = {
        "rules": RULES_VERSION,
        "decisions": "signed" if signed_decisions else "unsigned-allowed",
        "admin": {"actor": admin_actor, "key": admin_public, "alg": ed25519.ALG},
    }
    if origin is not None:
        body["origin"] = check_origin(origin)
    if sealed_values:
        body["values"] = "sealed"
    return body


DEFAULT_ORIGIN_HOST = "signoff.invalid"  # RFC 2606 §2: a name that can never be a real, reachable host


def default_origin(log_id: str) -> str:
    """The origin of a log made without ``--origin`` (and of every log made before origins existed):
    ``signoff.invalid/<log id>``. Unique per log, stable for its life; choose a real one for new logs."""
    return f"{DEFAULT_ORIGIN_HOST}/{log_id}"


def check_origin(origin: Any) -> str:
    """An origin as ``audit init --origin`` takes it: a schema-less URL with no spaces and no ``+``
    (c2sp.org/tlog-checkpoint "Note text" 1, and signed-note's key names, since it names the log key)."""
    from signoff.audit.tlog_checkpoint import check_origin as c2sp_check

    if not isinstance(origin, str):
        raise ValueError(f"origin: expected text, found {type(origin).__name__}")
    return c2sp_check(origin)  # a CheckpointFormatError (a ValueError) names the rule broken


def statement(rules: LogRules, kind: str, actor: str, body: Mapping[str, Any]) -> bytes:
    """The bytes an actor signs for an entry (no seq, prev or at: it may be signed before it is placed)."""
    return entry_statement(kind, actor, dict(body), rules.log if rules.version >= RULES_VERSION else None)


@dataclass(frozen=True)
class PublicKey:
    """One key enrolled for one actor: an Ed25519 key file's public half, or a passkey."""

    actor: str
    fingerprint: str
    alg: str
    public: str  # Ed25519: "ed25519:<base64>"; WebAuthn: the COSE key in base64
    passkey: Passkey | None = None
    seq: int = 0

    @classmethod
    def enrolled(cls, actor: str, body: Mapping[str, Any], seq: int) -> PublicKey:
        """The key a ``key.enrolled`` (or ``log.configured`` admin) body names; ``NotAllowed`` if malformed."""
        alg = body.get("alg", ed25519.ALG)
        try:
            if alg == ed25519.ALG:
                public = str(body.get("key"))
                return cls(actor, ed25519.fingerprint(public), alg, public, None, seq)
            if alg == webauthn.ALG:
                passkey = Passkey.from_body(body)
                return cls(actor, passkey.fingerprint, alg, str(body.get("key")), passkey, seq)
        except (ValueError, SignatureError) as exc:
            raise NotAllowed(f"body.key: expected a usable {alg} public key, found: {exc}") from None
        raise NotAllowed(f"body.alg: expected one of {list(ALGORITHMS)}, found {alg!r}")

    def stored(self) -> str:
        """The key as the ``signoff_key`` projection stores it (Ed25519 text, or a passkey's JSON)."""
        if self.passkey is None:
            return self.public
        return json.dumps(self.passkey.to_body(), sort_keys=True)

    @classmethod
    def from_stored(cls, actor: str, stored: str, seq: int = 0) -> PublicKey:
        if stored.startswith("{"):
            return cls.enrolled(actor, json.loads(stored), seq)
        return cls.enrolled(actor, {"alg": ed25519.ALG, "key": stored}, seq)

    def verify(self, sig: Mapping[str, Any], message: bytes) -> None:
        """Raise :class:`SignatureError` unless ``sig`` is this key's signature over ``message``.

        Inside :func:`deferred_signatures` the check is handed to its callback instead (``audit
        verify`` on all cores checks it in a worker process and reports a failure by ``seq``)."""
        defer = _DEFERRED.get()
        if defer is not None:
            defer(self, sig, message)
            return
        self.check_now(sig, message)

    def check_now(self, sig: Mapping[str, Any], message: bytes) -> None:
        """:meth:`verify`, never deferred."""
        if self.passkey is not None:
            webauthn.verify_assertion(self.passkey, sig, message)
        elif not ed25519.verify_signature(self.public, dict(sig), message):
            raise SignatureError(
                f"sig.value: expected a valid Ed25519 signature by {self.fingerprint}, found an invalid one"
            )


Deferred = Callable[[PublicKey, Mapping[str, Any], bytes], None]
_DEFERRED: ContextVar[Deferred | None] = ContextVar("signoff_deferred_signatures", default=None)


@contextlib.contextmanager
def deferred_signatures(callback: Deferred) -> Iterator[None]:
    """Within this block, :meth:`PublicKey.verify` hands ``(key, sig, message)`` to ``callback``
    instead of checking it: the key was resolved from the state before the entry, as always, and
    the caller must check every handed signature before it reports the log intact."""
    token = _DEFERRED.set(callback)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def code_signer(code: str) -> ed25519.Signer:
    """The Ed25519 key derived from a one-time enrolment code (SHA-256 of a fixed label and the code,
    as the RFC 8032 seed). Whoever holds the code can sign with it; the log only sees its public half."""
    seed = hashlib.sha256(b"signoff enrolment code v1\x00" + code.encode("utf-8")).digest()
    return ed25519.Signer(Ed25519PrivateKey.from_private_bytes(seed))


def by_code(kind: str, actor: str, body: Mapping[str, Any]) -> bool:
    """A reviewer's own ``key.enrolled``, authorised by their enrolment code (not by an admin)."""
    return kind == "key.enrolled" and body.get("actor") == actor and body.get("enrolment") == "code"


def signing_keys(
    kind: str, actor: str, body: Mapping[str, Any], own: Mapping[str, PublicKey], live_code: PublicKey | None
) -> Mapping[str, PublicKey]:
    """The keys that may sign this entry: the code key for an enrolment by code, else the actor's own."""
    if by_code(kind, actor, body):
        return {live_code.fingerprint: live_code} if live_code is not None else {}
    return own


def check_signature(
    rules: LogRules,
    kind: str,
    actor: str,
    body: Mapping[str, Any],
    sig: Mapping[str, Any] | None,
    keys: Mapping[str, PublicKey],
) -> None:
    """Every entry by an actor with an active key is signed by one of them; decisions are signed
    when the log requires it. ``keys`` are the actor's active keys by fingerprint."""
    if by_code(kind, actor, body):
        code_key = next(iter(keys.values()), None)
        if sig is None or code_key is None or not isinstance(sig, Mapping) or sig.get("key") != code_key.fingerprint:
            raise NotAllowed(
                f"code: expected the enrolment signed with the key of the code an admin gave {actor}, "
                f"found {'no signature' if sig is None else 'another code or key'}"
            )
    if sig is None:
        if keys:
            raise NotAllowed(f"sig: expected a signature by one of {actor}'s enrolled keys, found none")
        if kind in BY_PEOPLE and rules.signed_decisions:
            what = "decision" if kind in DECISIONS else kind
            raise NotAllowed(
                f"sig: expected {actor}'s own signature on the {what} (this log requires signed decisions), "
                "found none; enroll a passkey or key for them first"
            )
        return
    if not isinstance(sig, Mapping):
        raise NotAllowed(f"sig: expected a signature object, found {type(sig).__name__}")
    key = keys.get(str(sig.get("key")))
    if key is None:
        raise NotAllowed(f"sig.key: expected a key enrolled for {actor}, found {sig.get('key')!r}")
    try:
        key.verify(sig, statement(rules, kind, actor, body))
    except SignatureError as exc:
        raise NotAllowed(str(exc)) from None


def check_authority(
    rules: LogRules,
    seq: int,
    kind: str,
    actor: str,
    body: Mapping[str, Any],
    *,
    actor_keyed: bool,
    live_code: PublicKey | None = None,
    legacy_admin: bool = False,
) -> None:
    """Who may write an entry of this kind. ``actor_keyed``: the actor has an active key (so the entry
    is signed, :func:`check_signature`); ``live_code``: the reviewer's unused enrolment code key;
    ``legacy_admin``: (rules 1) the actor is an enabled reviewer with the admin role. A reviewer's
    enrolment by code is authorised by its signature with the code key (see :func:`signing_keys`)."""
    if actor.startswith("log:"):
        allowed = (
            (seq == 0 and kind == "key.enrolled")
            or (seq == 1 and kind == "log.configured")
            or kind in ("log.checkpoint", "log.cosigned")
        )
        if not allowed or actor != rules.log_actor:
            raise NotAllowed(
                f"actor: expected the log's own entries only from {rules.log_actor}, found {kind} by {actor}"
            )
        if kind == "log.configured" and seq != 1:
            raise NotAllowed(f"log.configured: expected it at seq 1, found it at seq {seq}")
        return
    if kind in ("log.configured", "log.checkpoint", "log.cosigned"):
        raise NotAllowed(f"actor: expected {rules.log_actor} for {kind}, found {actor}")
    if kind == ERASED:
        # an admin erases for any reason (signed with the admin key); a service only what a retention
        # policy made due (audit verify checks that each value it names was)
        retention = body.get("reason") == RETENTION and actor.startswith(("service:", "agent:"))
        if not retention and not (actor.startswith("admin:") and actor_keyed):
            raise NotAllowed(
                f"actor: expected an admin: actor signing with an enrolled admin key for {kind} (or a service: "
                f"actor with reason {RETENTION!r}), found {actor!r}"
            )
        return
    if kind in DELEGATIONS or kind == PROPOSED:
        # a person's own (signed as a decision is, check_signature); a delegation also an admin's, with its key
        if actor.startswith("human:") or (kind in DELEGATIONS and actor.startswith("admin:") and actor_keyed):
            return
        who = "a human: reviewer" + (
            " or an admin: actor signing with an enrolled admin key" if kind in DELEGATIONS else ""
        )
        raise NotAllowed(f"actor: expected {who} for {kind}, found {actor!r} (agents and services never do)")
    if kind not in ADMIN_KINDS:
        return
    if rules.version < RULES_VERSION:
        own_key = kind == "key.enrolled" and body.get("actor") == actor
        if not (own_key or actor.startswith("service:") or legacy_admin):
            raise NotAllowed(f"enroller: expected a service: actor or an enabled admin, found {actor!r}")
        return
    if by_code(kind, actor, body) and actor.startswith("human:"):
        if live_code is None:
            raise NotAllowed(
                f"enrolment: expected {actor} to hold an unused enrolment code from an admin, found none "
                "(ask an admin to reset it)"
            )
        return
    if not actor.startswith("admin:") or not actor_keyed:
        raise NotAllowed(
            f"actor: expected an admin: actor signing with an enrolled admin key for {kind}, found {actor!r} "
            "(agents, services and the desk never enroll anyone)"
        )


def check_key_owner(owner: str, fingerprint: str, owners: Iterable[str]) -> None:
    """A person's key is theirs alone: a key enrolled for a ``human:`` actor is enrolled for no other
    actor, so that N approvals are N people, each with their own key (services and agents of one
    host may share a key)."""
    others = sorted(set(owners) - {owner})
    if others and (owner.startswith("human:") or any(o.startswith("human:") for o in others)):
        raise NotAllowed(f"key: expected a key of {owner}'s own, found {fingerprint} enrolled for {others[0]} already")


@dataclass
class Keyring:
    """Active keys and live enrolment codes, replayed from the log entry by entry.

    The verifier replays the whole log; the gate replays the entries about one actor and the admins.
    """

    rules: LogRules
    keys: dict[str, dict[str, PublicKey]] = field(default_factory=dict)
    codes: dict[str, PublicKey] = field(default_factory=dict)  # reviewer -> unused enrolment code key

    def of(self, actor: str) -> dict[str, PublicKey]:
        return self.keys.get(actor, {})

    def check(
        self, seq: int, kind: str, actor: str, body: Mapping[str, Any], sig: Any, *, legacy_admin: bool = False
    ) -> None:
        """Authority and signature of one entry, against the state before it."""
        own = self.of(actor)
        if seq == 0 and kind == "key.enrolled" and body.get("actor") == actor:
            # Entry 0 enrolls the log's own key and is signed by it; whoever trusts the log trusts this key
            # (pin it: ``audit verify --log-key``, ``Signoff(log_key=...)``).
            key = PublicKey.enrolled(actor, body, 0)
            own = {key.fingerprint: key}
        live_code = self.codes.get(actor)
        check_authority(
            self.rules, seq, kind, actor, body, actor_keyed=bool(own), live_code=live_code, legacy_admin=legacy_admin
        )
        check_signature(self.rules, kind, actor, body, sig, signing_keys(kind, actor, body, own, live_code))

    def apply(self, seq: int, kind: str, actor: str, body: Mapping[str, Any]) -> PublicKey | None:
        """Update the state for one entry that passed :meth:`check`; returns a newly enrolled key."""
        if kind == "log.configured":
            self.rules = LogRules.configured(self.rules.log, body)
            admin = body["admin"]
            return self.add(PublicKey.enrolled(str(admin["actor"]), admin, seq))
        if kind == "key.enrolled":
            owner = str(body.get("actor"))
            if by_code(kind, actor, body):
                self.codes.pop(owner, None)  # one code, one key
            return self.add(PublicKey.enrolled(owner, body, seq))
        if kind == "key.revoked":
            self.keys.get(str(body.get("actor")), {}).pop(str(body.get("key")), None)
        elif kind == "reviewer.enrolled":
            reviewer = str(body.get("reviewer"))
            if isinstance(body.get("code_key"), str):
                self.codes[reviewer] = PublicKey.enrolled(reviewer, {"alg": ed25519.ALG, "key": body["code_key"]}, seq)
            else:
                self.codes.pop(reviewer, None)  # a new enrolment without a code ends an unused one
            if isinstance(body.get("key"), str):
                return self.add(PublicKey.enrolled(reviewer, {"alg": ed25519.ALG, "key": body["key"]}, seq))
        return None

    def add(self, key: PublicKey) -> PublicKey:
        check_key_owner(key.actor, key.fingerprint, (a for a, keys in self.keys.items() if key.fingerprint in keys))
        mine = self.keys.setdefault(key.actor, {})
        if key.fingerprint in mine:
            raise NotAllowed(f"key: expected a key not yet enrolled for {key.actor}, found {key.fingerprint}")
        mine[key.fingerprint] = key
        return key
