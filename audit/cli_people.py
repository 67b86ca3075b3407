"""Who an ``audit`` verb acts as: a reviewer's actor from their e-mail, their own key file, and whom they
decide for. Below :mod:`signoff.audit.cli_review`, :mod:`signoff.audit.cli_delegate` and
:mod:`signoff.audit.cli_answer`, which all need these (so that none of them imports another).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.audit.errors import NotAllowed, UnusableInput

if TYPE_CHECKING:
    from signoff.audit.keys import Signer
    from signoff.audit.review_types import Review
    from signoff.audit.reviews import ReviewService


def human(name: str) -> str:
    """``alice@example.org`` → ``human:alice@example.org``; another actor prefix is refused."""
    prefix = name.split(":", 1)[0] if ":" in name else ""
    if prefix in ("agent", "service", "log", "admin"):
        raise UnusableInput(f"reviewer: expected a person (an e-mail, or human:…), found {name!r}")
    return name if prefix == "human" else f"human:{name}"


def check_own_key(svc: ReviewService, actor: str, signer: Signer, key_file: str) -> None:
    """``--reviewer-key`` must be one of ``actor``'s enrolled keys: else say whose key it is, and what to pass.

    The log refuses such a decision anyway (:func:`signoff.audit.trust.check_signature`); this says why in
    the terms of the command line, before anything is sent."""
    enrolled = svc.keys(actor)
    if signer.fingerprint in {key.fingerprint for key in enrolled} or svc.reviewer(actor) is None:
        return  # their own key; or no reviewer at all, which the service says in its own words
    files = [key.fingerprint for key in enrolled if key.passkey is None]  # a passkey signs in the desk only
    owners = sorted({who for fingerprint, who in svc.store.key_owners() if fingerprint == signer.fingerprint} - {actor})
    if owners:
        whose = f"which is enrolled for {', '.join(owners)}"
        instead = f"pass --as {owners[0].removeprefix('human:')} if you are them, or {actor}'s own key file"
    else:
        whose = "which is enrolled for nobody on this log (never enrolled, or revoked)"
        instead = f"pass {actor}'s own key file"
    if files:
        instead += f" (key {', '.join(files)})"
    else:
        instead += f"; {actor} has no key file enrolled: an admin enrolls one with `audit enroll-key {actor} KEY.pub`"
    raise NotAllowed(
        f"--reviewer-key: expected a key enrolled for {actor}, found {key_file} with key {signer.fingerprint}, "
        f"{whose}; {instead}"
    )


def acting_for(svc: ReviewService, actor: str, review: Review, given: str | None) -> str | None:
    """Whom a decision from the command line is made for: ``--for`` when given, else the delegator whose
    delegation in force covers the review when the reviewer's own roles do not (None: their own)."""
    if given:
        return human(given)
    roles = (review.policy.role,) if review.escalated_role is None else (review.policy.role, review.escalated_role)
    return svc.acting_for(actor, review.tool, roles)
