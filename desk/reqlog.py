"""Structured request logs: one JSON object per line on the ``desk.access`` logger, plus
security headers on every response. A pure ASGI middleware, so SSE streams pass through.

Warnings for the operator (:func:`warn`, such as a decision whose signed page and the server's copy of
the review differ) are JSON lines too, on the ``desk.alert`` logger, at WARNING: they reach stderr even
under ``--quiet`` (which only silences the per-request lines). So are the notes of the desk's scheduled
work (:func:`note`, such as what a retention pass erased), on ``desk.note`` at INFO."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from signoff.desk.metrics import Metrics

log = logging.getLogger("desk.access")
alerts = logging.getLogger("desk.alert")
notes = logging.getLogger("desk.note")

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def setup_logging(level: int = logging.INFO) -> None:
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.setLevel(level)
        log.propagate = False


class _Stderr(logging.StreamHandler):
    """Lines to whatever ``sys.stderr`` is when each is written (a test that captures it sees them)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


if not alerts.handlers:  # the operator's warnings: JSON lines on stderr, whatever else logs where
    alerts.addHandler(_Stderr(sys.stderr))
    alerts.setLevel(logging.WARNING)
    alerts.propagate = False
if not notes.handlers:  # what the desk's scheduled work did, the same way
    notes.addHandler(_Stderr(sys.stderr))
    notes.setLevel(logging.INFO)
    notes.propagate = False


def warn(event: str, **fields: Any) -> None:
    """One JSON line for the operator on ``desk.alert`` at WARNING: ``{"ts", "level", "event", …fields}``.
    Always written to stderr (``--quiet`` silences the per-request lines only)."""
    line = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "warning", "event": event, **fields}
    alerts.warning(json.dumps(line, ensure_ascii=False, default=str))


def note(event: str, **fields: Any) -> None:
    """One JSON line for the operator on ``desk.note`` at INFO: ``{"ts", "level", "event", …fields}``."""
    line = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "info", "event": event, **fields}
    notes.info(json.dumps(line, ensure_ascii=False, default=str))


class AccessLog:
    def __init__(self, app: Any, metrics: Metrics, enabled: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.enabled = enabled

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def wrapped(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.extend(SECURITY_HEADERS)
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, wrapped)
        finally:
            took = time.perf_counter() - start
            if scope["path"] != "/events":
                self.metrics.request(took)
            if self.enabled and log.isEnabledFor(logging.INFO):
                log.info(
                    json.dumps(
                        {
                            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "method": scope["method"],
                            "path": scope["path"],
                            "status": status,
                            "ms": round(took * 1000, 2),
                            "client": (scope.get("client") or ("", 0))[0],
                        }
                    )
                )
