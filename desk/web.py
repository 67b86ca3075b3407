"""Shared helpers for the HTML pages: rendering, refusals, who is signed in."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk

PAGE_SIZE = 50


class Refused(Exception):
    """Refuse a page request with a status and a message a person can act on."""

    def __init__(self, status: int, title: str, message: str) -> None:
        self.status = status
        self.title = title
        self.message = message


def secure_cookies(request: Request, desk: Desk) -> bool:
    if desk.secure_cookies is not None:
        return desk.secure_cookies
    return request.url.scheme == "https"


def to_sign_in(request: Request) -> Response:
    if request.url.path == "/events":
        return Response("sign in first", status_code=401)
    nxt = request.url.path if request.method == "GET" else "/queue"
    return RedirectResponse(f"/signin?next={quote(nxt)}", status_code=303)


def render(request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
    desk: Desk = request.app.state.desk
    ctx.setdefault("me", None)
    ctx.setdefault("csrf", "")
    ctx.setdefault("nav", "")
    ctx.setdefault("signed_log", desk.signed_decisions)  # the banner and footer say what the log requires
    return desk.templates.TemplateResponse(request, name, ctx, status_code=status)


def refusal_html(desk: Desk, title: str, message: str) -> bytes:
    """The error page, outside a request (a refusal by desk/guard.py before any route runs)."""
    template = desk.templates.env.get_template("error.html")
    ctx = {"title": title, "message": message, "me": None, "csrf": "", "nav": "", "signed_log": desk.signed_decisions}
    return template.render(ctx).encode()


def refusal_page(request: Request, exc: Refused) -> HTMLResponse:
    return render(request, "error.html", {"title": exc.title, "message": exc.message}, exc.status)


def safe_next(value: str | None) -> str:
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/queue"


def log_context(request: Request, desk: Desk, who: SignedIn) -> dict[str, Any]:
    """On a desk serving several logs (desk/logs.py), a page about one log (Account, Log): which log it is
    (``page_log``), the others where the person reviews (``seats``, log -> name, a link away), and the
    query that keeps its forms and links on it (``log_q``). Nothing on a desk serving one log."""
    desks = request.app.state.desks
    if not desks.many:
        return {}
    from signoff.desk import across

    seats = {seat.log: desks.label(seat.log) for seat in across.seats(desks, who)}
    return {"seats": seats, "page_log": desk.store.log_id, "log_q": f"?log={quote(desk.store.log_id)}"}


def me(desk: Desk, who: SignedIn) -> dict[str, Any]:
    info = who.info if who.info is not None else desk.svc.reviewer(who.reviewer)
    return {"id": who.reviewer, "roles": list(info.roles) if info else [], "tools": list(info.tools) if info else []}
