"""Webhook signatures: HMAC-SHA256 (RFC 2104, FIPS 198-1) over ``<timestamp>.<body>``.

Not public: :mod:`signoff.desk.notify` re-exports :func:`sign` and :func:`verify`.

The header is ``Signoff-Signature: t=<unix seconds>,v1=<hex>``. The timestamp is the time of
the attempt (each retry signs afresh), so a receiver that refuses stale timestamps refuses a
replayed request. Several ``v1=`` values may appear (a sender rotating secrets signs with both);
one match is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from signoff.desk.notify._errors import SignatureError

SIGNATURE_HEADER = "Signoff-Signature"
EVENT_ID_HEADER = "Signoff-Event-Id"
EVENT_TYPE_HEADER = "Signoff-Event"
TOLERANCE_SECONDS = 300


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The ``Signoff-Signature`` header value for ``body`` sent at ``timestamp`` (default: now)."""
    if not secret:
        raise SignatureError("secret: expected a non-empty webhook secret, found none")
    at = int(time.time()) if timestamp is None else int(timestamp)
    return f"t={at},v1={_mac(secret, at, body)}"


def verify(
    secret: str, header: str | None, body: bytes, *, tolerance: float = TOLERANCE_SECONDS, now: float | None = None
) -> int:
    """Check a ``Signoff-Signature`` header against the raw request body; return its timestamp.

    Raises :class:`SignatureError` naming what was expected and what was found: a missing or
    malformed header, a timestamp more than ``tolerance`` seconds from ``now``, or no ``v1``
    value that matches (compared in constant time).
    """
    if not header:
        raise SignatureError("Signoff-Signature: expected 't=<unix>,v1=<hex>', found no header")
    stamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            try:
                stamp = int(value)
            except ValueError:
                raise SignatureError(f"Signoff-Signature: expected an integer t=, found {value[:20]!r}") from None
        elif key == "v1":
            macs.append(value)
    if stamp is None or not macs:
        raise SignatureError(f"Signoff-Signature: expected 't=<unix>,v1=<hex>', found {header[:120]!r}")
    current = time.time() if now is None else now
    if abs(current - stamp) > tolerance:
        raise SignatureError(
            f"Signoff-Signature: expected a timestamp within {tolerance:g} s of now, "
            f"found one {current - stamp:+.0f} s off"
        )
    wanted = _mac(secret, stamp, body)
    if not any(hmac.compare_digest(wanted, mac) for mac in macs):
        raise SignatureError("Signoff-Signature: expected an HMAC-SHA256 by this secret, found none that matches")
    return stamp
