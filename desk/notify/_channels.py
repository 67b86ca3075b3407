"""Sending one payload to one endpoint: a signed webhook, a Slack message or an e-mail. Not public.

Each send returns a :class:`Outcome`; it never raises for the receiver's sake. A network
error, a timeout, HTTP 408/425/429/5xx and SMTP 4xx replies are worth retrying; any other
refusal is final. The body of a job never changes between attempts, only the signature's
timestamp does.
"""

from __future__ import annotations

import hashlib
import json
import os
import smtplib
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

import httpx

from signoff.desk.notify._endpoints import Endpoint
from signoff.desk.notify._events import clean
from signoff.desk.notify._signing import EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER, sign

USER_AGENT = "signoff-notifier/1"
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
ERROR_CHARS = 300
SLACK_TEXT = 3000  # Block Kit: a section's text holds at most 3000 characters
EMOJI = {
    "review.opened": ":raising_hand:",
    "review.deadline_near": ":hourglass_flowing_sand:",
    "review.escalated": ":arrow_double_up:",
    "review.decided": ":white_check_mark:",
    "review.expired": ":x:",
    "review.withdrawn": ":leftwards_arrow_with_hook:",
}


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    retry: bool = False
    status: int | None = None
    error: str = ""
    retry_after: float | None = None
    skipped: bool = False  # nothing to send any more (a reminder of a review decided meanwhile)


def body_bytes(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent (and signed): compact JSON, keys sorted, UTF-8."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise LookupError(f"environment variable {name}: expected it set (it holds a secret), found it unset")
    return value


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _http(client: httpx.Client, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Outcome:
    try:
        response = client.post(url, content=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        return Outcome(False, retry=True, error=clean(f"{type(exc).__name__}: {exc}", ERROR_CHARS))
    if 200 <= response.status_code < 300:
        return Outcome(True, status=response.status_code)
    text = clean(response.text, 200) if response.content else ""
    return Outcome(
        False,
        retry=response.status_code in RETRY_STATUSES,
        status=response.status_code,
        error=f"HTTP {response.status_code}{': ' + text if text else ''}",
        retry_after=_retry_after(response),
    )


def send_webhook(
    endpoint: Endpoint, payload: Mapping[str, Any], client: httpx.Client, timeout: float, attempt: int
) -> Outcome:
    s = endpoint.settings
    try:
        url = s.get("url") or _env(s["url_env"])
        secret = s.get("secret") or _env(s["secret_env"])
    except LookupError as exc:
        return Outcome(False, retry=True, error=str(exc))
    body = body_bytes(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_ID_HEADER: str(payload["id"]),
        EVENT_TYPE_HEADER: str(payload["type"]),
        "Signoff-Attempt": str(attempt),
        SIGNATURE_HEADER: sign(secret, body, int(time.time())),
    }
    return _http(client, url, body, headers, timeout)


# -- Slack ------------------------------------------------------------------------------------


def mrkdwn(text: str) -> str:
    """Text from an agent, safe in Slack mrkdwn: ``&``, ``<`` and ``>`` escaped, so it can make no
    link and mention nobody (Slack API, "Formatting text for app surfaces": escaping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An incoming-webhook message: ``text`` (the notification's fallback) and Block Kit blocks with
    the summary, the review's details and a button that opens the review in the desk."""
    review = payload.get("review") or {}
    summary = str(payload.get("summary", ""))
    details = [f"review `{mrkdwn(clean(str(review.get('id', '')), 80))}`"]
    if review.get("app"):
        details.append(f"app {mrkdwn(clean(str(review['app']), 80))}")
    if review.get("role"):
        details.append(f"role {mrkdwn(clean(str(review['role']), 80))}")
    if review.get("deadline"):
        details.append(f"deadline {mrkdwn(str(review['deadline']))}")
    head = f"{EMOJI.get(str(payload.get('type')), ':bell:')} *Signoff*: {mrkdwn(summary)}"
    return {
        "text": summary[:SLACK_TEXT],
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": head[:SLACK_TEXT]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(details)[:SLACK_TEXT]}]},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open the review"},
                        "url": str(review.get("url", "")),
                        "action_id": "signoff_open_review",
                    }
                ],
            },
        ],
        "unfurl_links": False,
        "unfurl_media": False,
    }


def send_slack(endpoint: Endpoint, payload: Mapping[str, Any], client: httpx.Client, timeout: float) -> Outcome:
    s = endpoint.settings
    try:
        url = s.get("url") or _env(s["url_env"])
    except LookupError as exc:
        return Outcome(False, retry=True, error=str(exc))
    body = json.dumps(slack_message(payload), ensure_ascii=False).encode()
    return _http(client, url, body, {"Content-Type": "application/json", "User-Agent": USER_AGENT}, timeout)


# -- e-mail -----------------------------------------------------------------------------------


def email_message(endpoint: Endpoint, payload: Mapping[str, Any]) -> EmailMessage:
    """A plain-text message (RFC 5322). Its Message-ID comes from the event id and the endpoint,
    so every attempt sends the same id and a mail system can drop a repeat."""
    s = endpoint.settings
    review = payload.get("review") or {}
    msg = EmailMessage()
    msg["Subject"] = "[Signoff] " + clean(str(payload.get("summary", "")), 150)
    msg["From"] = s["from"]
    msg["To"] = ", ".join(s["to"])
    msg["Date"] = formatdate(usegmt=True)
    tag = hashlib.sha256(f"{endpoint.name}\n{payload['id']}".encode()).hexdigest()[:32]
    msg["Message-ID"] = f"<{tag}@signoff.notify>"
    msg["Signoff-Event-Id"] = str(payload["id"])
    lines = [str(payload.get("summary", "")), ""]
    lines.append(f"Open the review: {review.get('url', '')}")
    lines.append("(the desk asks you to sign in; this message holds no credential)")
    lines.append("")
    labels = (("Tool", "tool"), ("Agent", "agent"), ("App", "app"), ("Role", "role"), ("Deadline", "deadline"))
    for label, key in labels:
        if review.get(key):
            lines.append(f"{label}: {clean(str(review[key]))}")
    if payload.get("outcome"):
        lines.append(f"Outcome: {payload['outcome']} by {clean(str(payload.get('actor', '')))}")
    if payload.get("reason"):
        lines.append(f"Reason: {clean(str(payload['reason']), 2000)}")
    if "args" in review:
        lines.append("")
        lines.append("Arguments:")
        lines.append(json.dumps(review["args"], indent=2, ensure_ascii=False, sort_keys=True)[:4000])
    lines += ["", f"Review {review.get('id', '')}, log {payload.get('log', '')} entry {payload.get('seq', '')}."]
    msg.set_content("\n".join(lines) + "\n")
    return msg


def send_email(endpoint: Endpoint, payload: Mapping[str, Any], timeout: float) -> Outcome:
    s = endpoint.settings
    try:
        password = s.get("password") or (_env(s["password_env"]) if s.get("password_env") else "")
    except LookupError as exc:
        return Outcome(False, retry=True, error=str(exc))
    msg = email_message(endpoint, payload)
    context = ssl.create_default_context(cafile=s.get("ca_file") or None)
    host, port, tls = s["host"], int(s["port"]), s.get("tls", "starttls")
    try:
        smtp: smtplib.SMTP
        if tls == "tls":
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            if tls == "starttls":
                smtp.starttls(context=context)
            if s.get("user"):
                smtp.login(s["user"], password)
            smtp.send_message(msg)
    except smtplib.SMTPResponseException as exc:
        code = int(exc.smtp_code)
        detail = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        error = clean(f"SMTP {code}: {detail}", ERROR_CHARS)
        return Outcome(False, retry=not 500 <= code < 600, status=code, error=error)
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        error = clean(f"SMTP recipients refused: {exc.recipients}", ERROR_CHARS)
        return Outcome(False, retry=all(400 <= c < 500 for c in codes), status=codes[0] if codes else None, error=error)
    except (OSError, smtplib.SMTPException) as exc:  # refused, timed out, TLS failed, connection dropped
        return Outcome(False, retry=True, error=clean(f"{type(exc).__name__}: {exc}", ERROR_CHARS))
    return Outcome(True, status=250)
