"""What the Account page shows (templates/account.html): the reviewer's passkeys, key files and API tokens,
and the Delegations card. Both the sign-in routes (desk/routes/signin.py) and the delegation routes
(desk/routes/delegations.py) render that page, so its context lives here, below both.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from signoff.audit.entry import format_time
from signoff.audit.rules import OBSERVER
from signoff.desk import passkeys
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.web import log_context, me


def account_ctx(request: Request, desk: Desk, who: SignedIn, **extra: Any) -> dict[str, Any]:
    rp = passkeys.relying_party(request, desk.rp_id, desk.origin)
    keys = desk.svc.keys(who.reviewer)
    return {
        **log_context(request, desk, who),  # several logs: the page (and its forms) is about one of them
        **delegations_ctx(request, desk, who),
        "me": me(desk, who),
        "csrf": who.csrf,
        "nav": "account",
        "tokens": desk.accounts.tokens(who.reviewer),
        "new_token": None,
        "passkeys": [k for k in keys if k.passkey is not None],
        "key_files": [k for k in keys if k.passkey is None],
        "rp": rp,
        **extra,
    }


def delegations_ctx(request: Request, desk: Desk, who: SignedIn) -> dict[str, Any]:
    """What the Account page's Delegations card shows, and what its script signs with."""
    now = format_time(desk.store.clock())
    mine = desk.svc.delegations(reviewer=who.reviewer)
    info = who.info if who.info is not None else desk.svc.reviewer(who.reviewer)
    rp = passkeys.relying_party(request, desk.rp_id, desk.origin)
    keys = desk.svc.keys(who.reviewer)
    others = [r.id for r in desk.svc.reviewers() if r.enabled and r.id != who.reviewer and r.id.startswith("human:")]
    return {
        "delegations_in_force": [d for d in mine if d.active(now)],
        "delegations_past": [d for d in reversed(mine) if not d.active(now)][:10],
        "lendable": [r for r in (info.roles if info else ()) if r != OBSERVER],
        "delegates": others,
        "delegation_data": {
            "log": desk.store.log_id,
            "actor": who.reviewer,
            "sign": {
                "must": desk.signed_decisions or bool(keys),
                "rp_id": rp.id,
                "passkeys": [passkeys.credential_json(p) for p in passkeys.passkeys_of(keys) if p.rp_id == rp.id],
            },
        },
    }
