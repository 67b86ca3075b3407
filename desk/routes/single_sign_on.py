"""Sign-in through the OpenID Provider (desk/sso.py): ``GET /signin/oidc`` sends the browser there, and
``GET /signin/oidc/callback`` takes it back.

The provider says who someone is; the log says what they may do. A person signs in only if the claim
names a reviewer enrolled (and not disabled) on a log this desk serves, and the provider puts them in one
of the groups each of their roles there needs (``sso.required``, signed by the log's admin). Every request
after asks the provider again (desk/deps.py).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from signoff.audit import sso_required
from signoff.desk import sso
from signoff.desk.auth import token_hash
from signoff.desk.context import Desk
from signoff.desk.deps import DesksDep
from signoff.desk.logs import Desks
from signoff.desk.routes.signin import signed_in
from signoff.desk.web import Refused, safe_next

router = APIRouter(include_in_schema=False)
CALLBACK = "/signin/oidc/callback"


def _provider(desks: Desks) -> sso.Provider:
    provider = desks.default.sso
    if provider is None:
        raise Refused(404, "No single sign-on", "This desk signs people in with its own passwords only.")
    return provider


def redirect_uri(request: Request, desk: Desk) -> str:
    """Where the provider sends the browser back: the desk's configured origin, else the request's own."""
    origin = desk.origin or f"{request.url.scheme}://{request.url.netloc}"
    return origin.rstrip("/") + CALLBACK


@router.get("/signin/oidc")
async def begin(request: Request, desks: DesksDep, next: str = "/queue") -> Response:
    provider = _provider(desks)
    desk = desks.default
    url = await run_in_threadpool(provider.begin, desk.accounts.engine, redirect_uri(request, desk), safe_next(next))
    return RedirectResponse(url, status_code=303)


def admitted(desks: Desks, identity: sso.Identity) -> tuple[Desk | None, str]:
    """The first served log where the person the provider named is an enabled reviewer whose roles' groups
    (``sso.required``) the provider gives them; else (None, why not)."""
    why = f"{identity.reviewer.removeprefix('human:')} is not a reviewer here (ask an administrator to enroll you)"
    for desk in desks:
        info = desk.svc.reviewer(identity.reviewer)
        if info is None or not info.enabled:
            continue
        needed = sso_required.requirements(desk.store)
        lacking = sso_required.missing(needed, info.roles, identity.groups)
        if not lacking:
            return desk, ""
        why = "; ".join(f"role {role} needs one of the groups {', '.join(needed[role])}" for role in lacking)
    return None, why


@router.get(CALLBACK)
async def callback(request: Request, desks: DesksDep) -> Response:
    """The authorization response: check it, validate the ID token, and open a session on the person's log."""
    provider = _provider(desks)
    params = dict(request.query_params)
    try:
        identity, access_token, target = await run_in_threadpool(
            provider.finish, desks.default.accounts.engine, redirect_uri(request, desks.default), params
        )
    except sso.SignInFailed as exc:
        raise Refused(401, "Sign-in refused", f"The identity provider's answer signs nobody in: {exc}") from None
    desk, why = await run_in_threadpool(admitted, desks, identity)
    if desk is None:
        raise Refused(403, "Not allowed", f"Signed in at the identity provider, but {why}.")
    # "lax": the provider's redirect back is a cross-site navigation, which a "strict" cookie would miss
    resp, cookie = signed_in(request, desk, identity.reviewer, safe_next(target), samesite="lax")
    sso.remember(desk.accounts.engine, token_hash(cookie), identity, access_token)
    return resp
