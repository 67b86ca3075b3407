'''Notifications that reach people: the notifier follows the log and tells people when a review needs them.

Events, derived from log entries (each with an id stable across restarts, ``<log>-<seq>-<type>``):

=========================  ==================================================================
``review.opened``          a tool call waits for a person (``review.opened``)
``review.deadline_near``   a review is still pending a lead time before its deadline
``review.escalated``       a review was handed to another role (``review.escalated``)
``review.decided``         approved, edited or rejected, by whom (``outcome``, ``actor``)
``review.expired``         the deadline passed without a decision
``review.withdrawn``       the run was cancelled or abandoned
``review.ran``             the approved call ran (``tool.executed``)
``review.refused``         the approved call will not run (``run.resume_failed``, with why)
=========================  ==================================================================

``review.ran`` and ``review.refused`` go to an endpoint only when it lists them (``--event ran``),
and to every Slack app endpoint, so that a receiver made before them sees nothing new.

Endpoints live in the store's database (``desk notify add webhook|slack|email``); each may keep
only some tools (globs), roles and event names. A notifier runs as ``desk notify serve`` or inside
``desk serve --notify``; several may run, and one at a time delivers. Delivery is **at least
once**: a receiver drops a repeat by its event id. Links point at ``{desk_url}/reviews/{id}`` and
carry no credential; the desk asks the reader to sign in.

Webhooks
--------
``POST`` with a JSON body (``id``, ``type``, ``log``, ``seq``, ``at``, ``actor``, ``summary``,
``review`` {``id``, ``url``, ``tool``, ``agent``, ``app``, ``session``, ``role``, ``deadline``,
``args``}, and ``outcome``, ``reason``, ``rationale``, ``lead_seconds`` where they apply) and
these headers::

    Signoff-Event-Id: log_3f2a…-42-review.opened     (the same on every attempt)
    Signoff-Event: review.opened
    Signoff-Attempt: 1
    Signoff-Signature: t=1764547200,v1=5d41402abc4b2a76b9719d911017c592…

``v1`` is HMAC-SHA256 (RFC 2104), keyed with the endpoint's secret, over the ASCII timestamp, a
``.``, and the raw body bytes. ``t`` is the time of this attempt, so a receiver that refuses a
timestamp more than five minutes off also refuses a replay. A receiver checks it like this
(standard library only; :func:`verify` does the same and says what failed)::

    import hashlib, hmac, time

    def signoff_signature_ok(secret: str, header: str, body: bytes, tolerance: int = 300) -> bool:
        """header: the Signoff-Signature value; body: the raw request body, before parsing it."""
        fields = [part.strip().split("=", 1) for part in header.split(",") if "=" in part]
        stamps = [value for key, value in fields if key == "t"]
        macs = [value for key, value in fields if key == "v1"]
        if len(stamps) != 1 or not stamps[0].isdigit() or abs(time.time() - int(stamps[0])) > tolerance:
            return False
        expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + body, hashlib.sha256).hexdigest()
        return any(hmac.compare_digest(expected, mac) for mac in macs)

Answer 2xx once the event is stored. 408, 425, 429 and 5xx (and network errors) are retried with
exponential backoff (capped; ``Retry-After`` is honoured up to the cap); any other status is final.

Slack and e-mail
----------------
A Slack incoming webhook gets Block Kit: the summary, the review's details and an "Open the review"
button (text from the agent is escaped, so it can make no link or mention). E-mail goes over SMTP
(no TLS, STARTTLS or implicit TLS; user and password from the config or an environment variable)
as plain text with the link; its ``Message-ID`` is fixed per event and endpoint.

A Slack app endpoint (``desk notify add slack-app``) posts each review with the bot token
(``chat.postMessage``: the channel, and a direct message to each reviewer who may decide it,
found with ``users.lookupByEmail``), one thread per frontier, and redraws each message from the
log as the review goes (``chat.update``); see :mod:`signoff.desk.notify._slack_app`.
'''

from signoff.desk.notify._endpoints import Endpoint, Endpoints
from signoff.desk.notify._errors import ConfigError, NotifyError, SignatureError
from signoff.desk.notify._events import EVENT_NAMES, Event
from signoff.desk.notify._runner import Notifier, NotifierOptions, running
from signoff.desk.notify._signing import EVENT_ID_HEADER, SIGNATURE_HEADER, sign, verify
from signoff.desk.notify._tables import Engines

__all__ = [
    "EVENT_ID_HEADER",
    "EVENT_NAMES",
    "SIGNATURE_HEADER",
    "ConfigError",
    "Endpoint",
    "Endpoints",
    "Engines",
    "Event",
    "Notifier",
    "NotifierOptions",
    "NotifyError",
    "SignatureError",
    "running",
    "sign",
    "verify",
]
