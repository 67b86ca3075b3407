"""Events derived from log entries, and the payload each endpoint is sent. Not public.

One entry yields at most two events: ``review.opened`` also schedules ``review.deadline_near``
when the review has a deadline. An event's id is ``<log>-<seq>-<type>``: the log, the ``seq``
of the entry it follows from and its type, so a restarted notifier derives the same id again
and a receiver can drop a repeat (delivery is at least once).

On a sealed log the args a summary names are revealed from beside the log and checked against their
commitments (``values``, desk/reveal.py); a review whose values do not check is sent with none of them
and a ``problem`` instead. A notification is a copy sent out: erasing the values later cannot reach it.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

from signoff.audit import sealing
from signoff.audit.entry import Entry, parse_time
from signoff.audit.sealing import Lookup

# The event types, by their short names (the CLI's ``--event``) and as sent (``review.<name>``).
EVENT_NAMES = ("opened", "deadline_near", "escalated", "decided", "expired", "withdrawn", "ran", "refused", "reminder")
# What happened after the decision: the tool ran (``tool.executed``), or the call never will
# (``run.resume_failed``). A Slack app endpoint takes them to update its messages; another endpoint
# only when it lists them (``--event ran``), so that receivers made before them see nothing new.
AFTER_EVENTS = frozenset({"ran", "refused"})
# A reminder to the approvers a review still needs (desk/notify/_reminders.py): an endpoint that has
# ``remind_after`` (or ``remind_before``) set sends one; a Slack app's DMs and e-mail go to each person,
# other endpoints take it only when they list it (``--event reminder``).
REMINDER = "review.reminder"
AFTER, BEFORE = "after", "before"  # a reminder's two times: some time after opening (or escalating), and
# some time before the deadline
DECIDED = {"review.approved": "approved", "review.edited": "edited", "review.rejected": "rejected"}

SUMMARY_ARGS = 4  # key arguments shown in a summary
ARG_CHARS = 60  # characters of one argument's value in a summary
TEXT_CHARS = 300  # characters of a reason, tool or agent name in a summary


@dataclass(frozen=True)
class ReviewFacts:
    """What a summary says about the review an entry names (from ``review.opened``)."""

    tool: str = ""
    agent: str = ""
    app: str = ""
    session: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    role: str | None = None
    deadline: str | None = None
    problem: str = ""  # sealed log: its values do not check, and none is sent


WITHHELD = "values withheld: they do not match the log"


@dataclass(frozen=True)
class Event:
    """One thing a person may need to hear about, derived from the log entry at ``seq``."""

    id: str
    type: str  # review.opened, review.deadline_near, review.escalated, review.decided, ...
    log: str
    seq: int
    at: str  # the entry's time
    review: str
    facts: ReviewFacts
    actor: str  # who wrote the entry
    outcome: str | None = None  # approved / edited / rejected (review.decided)
    reason: str = ""  # of a rejection, an escalation or a withdrawal
    rationale: str = ""  # of an approval or an edit
    role: str | None = None  # the role it needs now: the review's, or the one it was escalated to
    variant: str = ""  # a reminder's: AFTER (opened or escalated) or BEFORE (the deadline)

    @property
    def name(self) -> str:
        return self.type.removeprefix("review.")

    @property
    def tool(self) -> str:
        return self.facts.tool


def event_id(log: str, seq: int, type_: str) -> str:
    return f"{log}-{seq}-{type_}"


def facts_of_opened(body: dict[str, Any], values: Lookup | None = None) -> ReviewFacts:
    """What ``review.opened`` says of its call; ``values``: the values beside a sealed log, its args revealed
    and checked (none when they do not check); without them, the args as the entry holds them."""
    call = body.get("call") or {}
    policy = body.get("policy") or {}
    args = call.get("args")
    problem = ""
    if isinstance(args, dict) and values is not None and sealing.any_sealed(call):
        try:
            args = sealing.reveal_args(args, values, f"review {body.get('review')}: args")
        except sealing.ValueProblem as exc:
            args, problem = {}, str(exc)
    return ReviewFacts(
        tool=str(call.get("tool") or ""),
        agent=str(call.get("agent") or ""),
        app=str(call.get("app") or ""),
        session=str(call.get("session") or ""),
        args=args if isinstance(args, dict) else {},
        role=policy.get("role") if isinstance(policy.get("role"), str) else None,
        deadline=body.get("deadline") if isinstance(body.get("deadline"), str) else None,
        problem=problem,
    )


def events_of(
    entry: Entry,
    lookup: Callable[[str], ReviewFacts | None],
    closes: Callable[[str, int], bool] | None = None,
    values: Lookup | None = None,
) -> list[Event]:
    """The events ``entry`` yields; ``lookup`` finds the facts of a review opened earlier. On a review
    that needs several people (its decisions name a ``round``), an approval is "decided" only when
    ``closes(review, seq)`` says it completed the quorum; the approvals before it yield nothing.
    ``values``: the values beside a sealed log (:func:`facts_of_opened`)."""
    body = entry.body if isinstance(entry.body, dict) else {}
    if entry.kind == "run.resume_failed":  # names several reviews: one event each
        refused: list[Event] = []
        for named in body.get("reviews") or []:
            if not isinstance(named, str):
                continue
            facts = lookup(named) or ReviewFacts()
            refused.append(
                Event(
                    f"{event_id(entry.log, entry.seq, 'review.refused')}-{named}",
                    "review.refused",
                    entry.log,
                    entry.seq,
                    entry.at,
                    named,
                    facts,
                    entry.actor,
                    reason=_text(body.get("reason")),
                    role=facts.role,
                )
            )
        return refused
    review = body.get("review")
    if not isinstance(review, str):
        return []

    def make(type_: str, facts: ReviewFacts, **extra: Any) -> Event:
        extra.setdefault("role", facts.role)
        return Event(
            event_id(entry.log, entry.seq, type_),
            type_,
            entry.log,
            entry.seq,
            entry.at,
            review,
            facts,
            entry.actor,
            **extra,
        )

    def reminder(variant: str, facts: ReviewFacts, role: str | None) -> Event:
        made = make(REMINDER, facts, role=role, variant=variant)
        return replace(made, id=event_id(entry.log, entry.seq, f"{REMINDER}.{variant}"))

    if entry.kind == "review.opened":
        facts = facts_of_opened(body, values)
        found = [make("review.opened", facts), reminder(AFTER, facts, facts.role)]
        if facts.deadline is not None:
            found += [make("review.deadline_near", facts), reminder(BEFORE, facts, facts.role)]
        return found
    if entry.kind not in (*DECIDED, "review.expired", "review.withdrawn", "review.escalated", "tool.executed"):
        return []
    facts = lookup(review) or ReviewFacts()
    reason = _text(body.get("reason"))
    if entry.kind in DECIDED:
        if "round" in body and entry.kind != "review.rejected" and closes is not None and not closes(review, entry.seq):
            return []  # one approval toward a quorum: the review is still open
        return [
            make(
                "review.decided",
                facts,
                outcome=DECIDED[entry.kind],
                reason=reason,
                rationale=_text(body.get("rationale")),
            )
        ]
    if entry.kind == "tool.executed":
        return [make("review.ran", facts)]
    if entry.kind == "review.escalated":
        role = body.get("role")
        to = role if isinstance(role, str) else facts.role
        return [make("review.escalated", facts, reason=reason, role=to), reminder(AFTER, facts, to)]
    return [make(entry.kind, facts, reason=reason)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# -- what is sent ---------------------------------------------------------------------------


def clean(text: str, limit: int = TEXT_CHARS) -> str:
    """One line of at most ``limit`` characters: control and format characters become spaces."""
    flat = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def key_args(args: dict[str, Any], *, redact: bool = False, problem: str = "") -> str:
    """``amount=5000, to="acct-x"``: the first few arguments, each value cut short."""
    if problem:
        return WITHHELD
    if not args:
        return "no arguments"
    names = list(args)
    shown = names[:SUMMARY_ARGS]
    if redact:
        parts = [clean(name, 40) for name in shown]
    else:
        parts = [f"{clean(name, 40)}={clean(json.dumps(args[name], ensure_ascii=False), ARG_CHARS)}" for name in shown]
    if len(names) > len(shown):
        parts.append(f"… {len(names) - len(shown)} more")
    return ", ".join(parts)


def when(stamp: str | None) -> str:
    """``2026-11-30 14:00 UTC`` from a log time."""
    if not stamp:
        return "no deadline"
    try:
        return parse_time(stamp).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return clean(stamp, 40)


def span(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def summary(event: Event, *, redact: bool = False, lead: float | None = None) -> str:
    """A short line a person reads: what, by whom, with which key arguments, and when it is due."""
    f = event.facts
    what = f"{clean(f.tool or 'a tool', 80)} from {clean(f.agent, 80) if f.agent else 'an agent'}"
    call = f"{what} ({key_args(f.args, redact=redact, problem=f.problem)})"
    due = f"deadline {when(f.deadline)}" if f.deadline else "no deadline"
    if event.type == "review.opened":
        role = f", role {clean(event.role, 80)}" if event.role else ""
        return f"Review needed: {call}{role}; {due}"
    if event.type == "review.deadline_near":
        left = f"in {span(lead)}" if lead is not None else "soon"
        return f"Deadline {left}: {call} still waits for a decision ({due})"
    if event.type == "review.escalated":
        because = f": {clean(event.reason)}" if event.reason else ""
        return f"Escalated to role {clean(event.role or '?', 80)}: {call}; {due}{because}"
    if event.type == "review.decided":
        because = f": {clean(event.reason)}" if event.reason else ""
        return f"{(event.outcome or 'decided').capitalize()} by {clean(event.actor, 120)}: {call}{because}"
    if event.type == "review.expired":
        return f"Expired without a decision: {call}"
    if event.type == "review.ran":
        return f"Ran: {call}"
    if event.type == REMINDER:
        return f"Reminder: {call} still waits for a decision ({due})"
    if event.type == "review.refused":
        because = f": {clean(event.reason)}" if event.reason else ""
        return f"Will not run: {call}{because}"
    because = f": {clean(event.reason)}" if event.reason else ""
    return f"Withdrawn: {call}{because}"


def review_url(desk_url: str, review: str) -> str:
    """The review's page in the desk. It carries no credential: the desk asks the reader to sign in."""
    return f"{desk_url.rstrip('/')}/reviews/{quote(review, safe='')}"


def payload(event: Event, *, desk_url: str, redact: bool = False, lead: float | None = None) -> dict[str, Any]:
    """The JSON object one endpoint is sent for ``event`` (webhooks send it as is)."""
    f = event.facts
    review: dict[str, Any] = {
        "id": event.review,
        "url": review_url(desk_url, event.review),
        "tool": f.tool,
        "agent": f.agent,
        "app": f.app,
        "session": f.session,
        "role": event.role,
        "deadline": f.deadline,
    }
    if f.problem:
        review["problem"] = f.problem
    elif not redact:
        review["args"] = f.args
    data: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "log": event.log,
        "seq": event.seq,
        "at": event.at,
        "actor": event.actor,
        "summary": summary(event, redact=redact, lead=lead),
        "review": review,
    }
    if event.outcome is not None:
        data["outcome"] = event.outcome
    if event.reason:
        data["reason"] = event.reason
    if event.rationale:
        data["rationale"] = event.rationale
    if event.type == "review.deadline_near" and lead is not None:
        data["lead_seconds"] = lead
    return data


def deadline_of(event: Event) -> datetime | None:
    return parse_time(event.facts.deadline) if event.facts.deadline else None
