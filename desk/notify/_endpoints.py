"""Endpoints: where notifications go, which events each one wants, and where they are stored. Not public."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parseaddr
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col

from signoff.audit.entry import format_time
from signoff.desk.notify._errors import ConfigError
from signoff.desk.notify._events import AFTER, AFTER_EVENTS, EVENT_NAMES, REMINDER, Event
from signoff.desk.notify._tables import Engines, NotifyCursor, NotifyEndpoint, NotifyJob

KINDS = ("webhook", "slack", "slack-app", "email")
TLS_MODES = ("none", "starttls", "tls")
DEFAULT_PORTS = {"none": 25, "starttls": 587, "tls": 465}
DEFAULT_LEAD = 600.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SECRET_KEYS = ("secret", "password")  # settings never shown by `desk notify list`


@dataclass(frozen=True)
class Endpoint:
    """One destination and its filters. Empty filters let everything through."""

    name: str
    kind: str
    settings: Mapping[str, Any]
    tools: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    deadline_lead: float = DEFAULT_LEAD
    redact_args: bool = False
    enabled: bool = True
    created_at: str = field(default="", compare=False)

    def wants(self, event: Event) -> bool:
        """Does this endpoint take ``event``? Tool globs match like reviewers' (``fnmatchcase``)."""
        if not self.enabled:
            return False
        if event.type == REMINDER and not self.reminds(event.variant):
            return False
        if self.events and event.name not in self.events:
            return False
        if not self.events and event.name in AFTER_EVENTS and self.kind != "slack-app":
            return False
        if self.tools and not any(fnmatch.fnmatchcase(event.tool, glob) for glob in self.tools):
            return False
        return not self.roles or event.role in self.roles

    def reminds(self, variant: str) -> bool:
        """Whether this endpoint sends a reminder of this variant: it has the setting, and sends reminders to
        each person (a Slack app with DMs, e-mail) or lists the ``reminder`` event (a webhook, Slack)."""
        setting = self.settings.get("remind_after" if variant == AFTER else "remind_before")
        if not setting:
            return False
        if self.kind == "slack-app":
            return bool(self.settings.get("dm", True))
        return self.kind == "email" or "reminder" in self.events

    def remind_due(self, event: Event) -> float | None:
        """When this endpoint sends the reminder ``event`` (unix seconds), or None: never (a deadline too
        close, or no deadline for a reminder before it)."""
        from signoff.audit.entry import parse_time

        at = parse_time(event.at).timestamp()
        if event.variant == AFTER:
            return at + float(self.settings["remind_after"])
        if event.facts.deadline is None:
            return None
        due = parse_time(event.facts.deadline).timestamp() - float(self.settings["remind_before"])
        return due if due > at else None

    def public(self) -> dict[str, Any]:
        """What ``desk notify list`` shows: secrets and secret-bearing URLs left out."""
        shown: dict[str, Any] = {}
        for key, value in self.settings.items():
            if key in SECRET_KEYS:
                shown[key] = "(set)" if value else ""
            elif key == "url" and self.kind == "slack":
                parts = urlsplit(str(value))
                shown[key] = f"{parts.scheme}://{parts.netloc}/…"  # the path is Slack's token
            else:
                shown[key] = value
        return {
            "name": self.name,
            "kind": self.kind,
            "settings": shown,
            "tools": list(self.tools),
            "roles": list(self.roles),
            "events": list(self.events),
            "deadline_lead": self.deadline_lead,
            "redact_args": self.redact_args,
            "enabled": self.enabled,
            "created_at": self.created_at,
        }


def _url(value: Any, what: str) -> str:
    text = str(value or "")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: expected an http:// or https:// URL, found {text[:80]!r}")
    if parts.username or parts.password:
        raise ConfigError(f"{what}: expected a URL without user:password@, found credentials in it")
    return text


def _address(value: Any, what: str) -> str:
    text = str(value or "").strip()
    _name, addr = parseaddr(text)
    if not addr or "@" not in addr or any(ch in text for ch in "\r\n"):
        raise ConfigError(f"{what}: expected an e-mail address, found {text[:80]!r}")
    return text


_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def _seconds(value: Any, what: str) -> float:
    """A reminder's time: seconds, or ``90s``, ``30m``, ``4h``, ``1d``."""
    text = str(value).strip()
    try:
        seconds = float(text[:-1]) * _UNITS[text[-1]] if text[-1:] in _UNITS else float(text)
    except (ValueError, IndexError):
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"{what}: expected a time > 0 (seconds, or 30m, 4h, 1d), found {text[:40]!r}")
    return seconds


def check(endpoint: Endpoint) -> Endpoint:
    """Refuse an endpoint the notifier could not use; return it with its settings normalised."""
    if not NAME.match(endpoint.name):
        raise ConfigError(f"name: expected letters, digits, '.', '_' or '-' (at most 64), found {endpoint.name!r}")
    if endpoint.kind not in KINDS:
        raise ConfigError(f"kind: expected one of {', '.join(KINDS)}, found {endpoint.kind!r}")
    unknown = [name for name in endpoint.events if name not in EVENT_NAMES]
    if unknown:
        raise ConfigError(f"events: expected some of {', '.join(EVENT_NAMES)}, found {', '.join(unknown)}")
    if not endpoint.deadline_lead > 0:
        raise ConfigError(f"deadline_lead: expected seconds > 0, found {endpoint.deadline_lead}")
    s = dict(endpoint.settings)
    for key in ("remind_after", "remind_before", "link_ttl"):
        if key in s:
            s[key] = _seconds(s[key], key)
    if s.get("sign_in_links") and endpoint.kind not in ("slack-app", "email"):
        raise ConfigError(
            f"sign_in_links: expected a Slack app or e-mail endpoint (a link goes to one person), found {endpoint.kind}"
        )
    if endpoint.kind in ("webhook", "slack"):
        if s.get("url_env"):
            s.pop("url", None)
        else:
            s["url"] = _url(s.get("url"), f"{endpoint.kind} url")
    if endpoint.kind == "slack-app":
        if not s.get("bot_token_env"):
            raise ConfigError("slack-app: expected --bot-token-env (the variable with the xoxb- bot token), found none")
        if not s.get("channel") and not s.get("dm", True):
            raise ConfigError("slack-app: expected a --channel, direct messages, or both; found neither")
        if s.get("api_url"):
            s["api_url"] = _url(s["api_url"], "slack-app api_url")
        s["dm"] = bool(s.get("dm", True))
    if endpoint.kind == "webhook" and not (s.get("secret") or s.get("secret_env")):
        raise ConfigError("webhook: expected a secret (or the name of an environment variable holding it), found none")
    if endpoint.kind == "email":
        if not s.get("host"):
            raise ConfigError("email: expected an SMTP host, found none")
        tls = s.setdefault("tls", "starttls")
        if tls not in TLS_MODES:
            raise ConfigError(f"email tls: expected one of {', '.join(TLS_MODES)}, found {tls!r}")
        s["port"] = int(s.get("port") or DEFAULT_PORTS[tls])
        s["from"] = _address(s.get("from"), "email from")
        to = s.get("to") or []
        if isinstance(to, str):
            to = [to]
        if not to:
            raise ConfigError("email to: expected at least one address, found none")
        s["to"] = [_address(addr, "email to") for addr in to]
        if (s.get("password") or s.get("password_env")) and not s.get("user"):
            raise ConfigError("email: expected an SMTP user with the password, found none")
    return replace(endpoint, settings=s, events=tuple(dict.fromkeys(endpoint.events)))


def _now() -> str:
    return format_time(datetime.now(UTC))


def _row(log: str, endpoint: Endpoint) -> dict[str, Any]:
    return {
        "log": log,
        "name": endpoint.name,
        "kind": endpoint.kind,
        "settings": json.dumps(dict(endpoint.settings), sort_keys=True),
        "tools": json.dumps(list(endpoint.tools)),
        "roles": json.dumps(list(endpoint.roles)),
        "events": json.dumps(list(endpoint.events)),
        "deadline_lead": endpoint.deadline_lead,
        "redact_args": endpoint.redact_args,
        "enabled": endpoint.enabled,
        "created_at": endpoint.created_at or _now(),
    }


def from_row(row: Any) -> Endpoint:
    return Endpoint(
        name=row.name,
        kind=row.kind,
        settings=json.loads(row.settings),
        tools=tuple(json.loads(row.tools)),
        roles=tuple(json.loads(row.roles)),
        events=tuple(json.loads(row.events)),
        deadline_lead=float(row.deadline_lead),
        redact_args=bool(row.redact_args),
        enabled=bool(row.enabled),
        created_at=row.created_at,
    )


def load(conn: Connection, log: str) -> list[Endpoint]:
    rows = conn.execute(
        select(NotifyEndpoint).where(col(NotifyEndpoint.log) == log).order_by(col(NotifyEndpoint.name))
    ).all()
    return [from_row(row) for row in rows]


class Endpoints:
    """The endpoints of one log, in the store's database."""

    def __init__(self, engines: Engines, log: str) -> None:
        self.engines = engines
        self.log = log

    def all(self) -> list[Endpoint]:
        with self.engines.read.connect() as conn:
            return load(conn, self.log)

    def get(self, name: str) -> Endpoint:
        for endpoint in self.all():
            if endpoint.name == name:
                return endpoint
        raise ConfigError(f"endpoint: expected one named {name!r}, found none (see `desk notify list`)")

    def add(self, endpoint: Endpoint, *, replace: bool = False, head: int) -> Endpoint:
        """Store ``endpoint`` (``replace`` an existing one of that name). The first endpoint of a log
        also sets the cursor at ``head`` (the log's size), so the notifier tells of what happens
        from now on: nothing before, and nothing between this and its first start, is dropped."""
        endpoint = check(endpoint)
        with self.engines.write.begin() as conn:
            exists = conn.execute(
                select(col(NotifyEndpoint.name)).where(
                    col(NotifyEndpoint.log) == self.log, col(NotifyEndpoint.name) == endpoint.name
                )
            ).first()
            if exists is not None and not replace:
                raise ConfigError(f"endpoint: expected a new name, found {endpoint.name!r} already (use --replace)")
            values = _row(self.log, endpoint)
            if exists is None:
                conn.execute(insert(NotifyEndpoint), values)
            else:
                values.pop("created_at")
                conn.execute(
                    update(NotifyEndpoint)
                    .where(col(NotifyEndpoint.log) == self.log, col(NotifyEndpoint.name) == endpoint.name)
                    .values(**values)
                )
            ensure_cursor(conn, self.engines.backend, self.log, head)
        return self.get(endpoint.name)

    def remove(self, name: str) -> int:
        """Remove an endpoint and its undelivered jobs; its delivery history stays. Returns the jobs dropped."""
        with self.engines.write.begin() as conn:
            gone = conn.execute(
                delete(NotifyEndpoint).where(col(NotifyEndpoint.log) == self.log, col(NotifyEndpoint.name) == name)
            ).rowcount
            if not gone:
                raise ConfigError(f"endpoint: expected one named {name!r}, found none (see `desk notify list`)")
            dropped = conn.execute(
                delete(NotifyJob).where(
                    col(NotifyJob.log) == self.log, col(NotifyJob.endpoint) == name, col(NotifyJob.state) == "pending"
                )
            ).rowcount
        return int(dropped)


def ensure_cursor(conn: Connection, backend: str, log: str, position: int) -> None:
    """Make the log's cursor at ``position`` unless it has one (never moves an existing cursor)."""
    maker = sqlite.insert if backend == "sqlite" else postgresql.insert
    conn.execute(
        maker(NotifyCursor)
        .values(log=log, position=position, updated_at=_now())
        .on_conflict_do_nothing(index_elements=["log"])
    )


def endpoint_from_options(
    kind: str,
    name: str,
    settings: Mapping[str, Any],
    *,
    tools: Iterable[str] = (),
    roles: Iterable[str] = (),
    events: Iterable[str] = (),
    deadline_lead: float = DEFAULT_LEAD,
    redact_args: bool = False,
    enabled: bool = True,
) -> Endpoint:
    clean = {key: value for key, value in settings.items() if value not in (None, "", [], ())}
    names = tuple(e.removeprefix("review.") for e in events)
    return check(
        Endpoint(name, kind, clean, tuple(tools), tuple(roles), names, float(deadline_lead), redact_args, enabled)
    )
