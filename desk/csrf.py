"""CSRF protection for every form (OWASP synchronizer token pattern).

Signed-in forms carry the session's token (a page script's JSON request sends it in a header);
the sign-in form, which has no session yet, uses a double-submit cookie.
A POST without a valid token is refused with 403 and nothing happens.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.datastructures import FormData

from signoff.desk.auth import SignedIn, same
from signoff.desk.deps import PRE_CSRF_COOKIE, PageReviewer
from signoff.desk.web import Refused

REFUSED = "This form was missing its security token (CSRF). Nothing was done. Reload the page and try again."


async def checked_form(request: Request, who: PageReviewer) -> FormData:
    form = await request.form()
    token = form.get("csrf")
    if not isinstance(token, str) or not same(token, who.csrf):
        raise Refused(403, "Form refused", REFUSED)
    return form


CsrfForm = Annotated[FormData, Depends(checked_form)]


async def checked_header(request: Request, who: PageReviewer) -> SignedIn:
    """The same token in an ``X-CSRF-Token`` header, for the JSON requests a page's script sends."""
    token = request.headers.get("x-csrf-token")
    if not token or not same(token, who.csrf):
        raise HTTPException(403, REFUSED)
    return who


CsrfReviewer = Annotated[SignedIn, Depends(checked_header)]


def check_sign_in_form(request: Request, form: FormData) -> None:
    token = form.get("csrf")
    if not isinstance(token, str) or not same(token, request.cookies.get(PRE_CSRF_COOKIE, "")):
        raise Refused(403, "Form refused", "The sign-in form was missing its security token. Reload and try again.")
