"""Two checks before any route runs: the request body's size, and where a state-changing request came from.

A pure ASGI middleware (it passes the event stream through untouched):

* **Body size.** A request whose body is larger than ``max_body`` bytes (default 1 MB,
  ``desk serve --max-body``) is answered 413 before the app reads any of it, whether it says its
  length (``Content-Length``) or streams it (chunked): the body is read up to the limit, then
  handed to the app, so nothing reaches the log from an oversized request.
* **Origin.** Every state-changing request (anything but GET, HEAD and OPTIONS) must come from
  the desk's own origin or one on the allow-list (OWASP CSRF Prevention Cheat Sheet, "Verifying
  Origin With Standard Headers"): its ``Origin`` header, or failing that its ``Referer``, must be
  the desk's origin (``--origin``; without it, the request's own scheme, host and port) or one of
  ``--allow-origin`` (for proxies or another UI). A request that carries neither header is
  refused when it carries a desk cookie (a browser always sends ``Origin`` on a POST); a script
  that authenticates with an API token and no cookie need not send one. A refusal is 403, and
  the app never runs, so nothing is recorded. This is the second layer: the CSRF token and
  ``SameSite=Strict`` cookies remain the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

DEFAULT_MAX_BODY = 1024 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DESK_COOKIES = ("desk_session=", "desk_csrf=")

ORIGIN_REFUSED = (
    "This request came from another site ({found}); the desk only takes changes from its own pages "
    "({expected}). Nothing was done."
)
TOO_LARGE = "The request is larger than this desk accepts ({limit:,} bytes). Nothing was recorded."


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL, lower-case, default ports dropped; None when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def own_origin(scope: dict[str, Any]) -> str | None:
    host = _header(scope, b"host")
    if not host:
        return None
    return origin_of(f"{scope.get('scheme', 'http')}://{host}")


class Guard:
    def __init__(
        self,
        app: Any,
        *,
        origin: str | None = None,
        allowed_origins: Iterable[str] = (),
        max_body: int = DEFAULT_MAX_BODY,
        refuse_page: Any = None,
    ) -> None:
        self.app = app
        self.origin = origin_of(origin) if origin else None
        self.allowed = {o for o in (origin_of(x) for x in allowed_origins) if o}
        self.max_body = max_body
        self.refuse_page = refuse_page  # (status, title, message) -> HTML bytes, for page requests

    def expected(self, scope: dict[str, Any]) -> set[str]:
        found = set(self.allowed)
        if self.origin is not None:
            found.add(self.origin)
        else:
            own = own_origin(scope)
            if own:
                found.add(own)
        return found

    def origin_problem(self, scope: dict[str, Any]) -> str | None:
        """Why this state-changing request is refused, or None."""
        expected = self.expected(scope)
        raw = _header(scope, b"origin")
        if raw is not None and raw.strip() and raw.strip() != "null":
            found = origin_of(raw)
        else:
            referer = _header(scope, b"referer")
            found = origin_of(referer) if referer else None
            if found is None:
                if raw is not None and raw.strip() == "null":
                    return ORIGIN_REFUSED.format(found="an opaque origin", expected=", ".join(sorted(expected)))
                cookies = _header(scope, b"cookie") or ""
                if any(c in cookies for c in DESK_COOKIES):
                    return ORIGIN_REFUSED.format(
                        found="no Origin or Referer header", expected=", ".join(sorted(expected))
                    )
                return None
        if found in expected:
            return None
        return ORIGIN_REFUSED.format(found=found or raw, expected=", ".join(sorted(expected)) or "none")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method not in SAFE_METHODS:
            problem = self.origin_problem(scope)
            if problem is not None:
                await self.refuse(scope, send, 403, "Request refused", problem)
                return
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if declared < 0:
                await self.refuse(scope, send, 400, "Bad request", "The Content-Length header is not a number.")
                return
            if declared > self.max_body:
                await self.refuse(scope, send, 413, "Request too large", TOO_LARGE.format(limit=self.max_body))
                return
        if method in SAFE_METHODS and length is None and _header(scope, b"transfer-encoding") is None:
            await self.app(scope, receive, send)
            return
        # Read the body up to the limit before the app sees any of it.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:
                await self.refuse(scope, send, 413, "Request too large", TOO_LARGE.format(limit=self.max_body))
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole = b"".join(chunks)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            message: dict[str, Any] = await receive()
            return message

        await self.app(scope, replay, send)

    async def refuse(self, scope: dict[str, Any], send: Any, status: int, title: str, message: str) -> None:
        path = str(scope.get("path") or "")
        accept = _header(scope, b"accept") or ""
        wants_json = path.startswith("/api/") or path.startswith("/account/passkeys") or "application/json" in accept
        if wants_json or self.refuse_page is None:
            body = json.dumps({"detail": message, "recorded": False}).encode()
            kind = b"application/json"
        else:
            body = self.refuse_page(status, title, message)
            kind = b"text/html; charset=utf-8"
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        if status == 413:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


__all__ = ["DEFAULT_MAX_BODY", "Guard", "origin_of"]
