"""Reminders to the approvers a review still needs (issue 22 §6). Not public.

A ``review.reminder`` job is made from the log like every notification, in the transaction that moves the
notifier's cursor past the ``review.opened`` (or ``review.escalated``) it follows from: one due
``remind_after`` seconds later, and one ``remind_before`` seconds before the deadline, per endpoint that
sets them. When it falls due, the notifier reads the review from the log and reminds the people it still
needs: enabled reviewers who may decide it (their own roles, or a delegation in force), who have not
approved its current round (in person or through a delegate), and who did not ask for the call. A review
decided by then reminds nobody.

A Slack app sends each of them a direct message (``conversations.open``, then ``chat.postMessage`` with
message metadata naming the reminder); an e-mail endpoint writes to each one's own address (the reviewer
id's). Each person's reminder is marked ``sending`` in a commit before it goes out and ``sent`` in one
after (``notify_sent``), so a job retried after a crash or a failure skips whoever has theirs:

* a Slack DM cut off by a crash between the two commits is looked for in the DM's history
  (``conversations.history`` with ``include_all_metadata``) before it is sent again: sent once;
* an e-mail cut off there is sent again with the same Message-ID (SMTP offers no way to ask), which mail
  systems take as the same message, and the row counts it (``resent``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col

from signoff.audit import ReviewService, UnknownReview
from signoff.audit.review_types import Review
from signoff.desk.notify._channels import SLACK_TEXT, Outcome, mrkdwn, send_email
from signoff.desk.notify._endpoints import Endpoint
from signoff.desk.notify._events import BEFORE, clean, key_args, when
from signoff.desk.notify._slack_app import SlackApp, SlackCallFailed, WebApi, web_api
from signoff.desk.notify._tables import Engines, NotifySent

METADATA_TYPE = "signoff_reminder"  # Slack message metadata: event_type of a reminder DM
FOUND = "found in the DM's history"  # the ref of a reminder a crash cut off after Slack took it
HISTORY_SLACK = 60.0  # seconds before a cut-off send's start that its DM's history is searched from


def needed(svc: ReviewService, review: Review) -> list[str]:
    """The people ``review`` still needs, as the log says now: enabled reviewers who may decide it (by their
    own roles, or a delegation in force), less those who approved its current round (a delegate sits in
    their delegator's seat) and the person who asked for the call."""
    if review.status != "pending":
        return []
    lent = dict(review.delegated)
    done = {by for by, _seq in review.approvals} | {lent[seq] for _by, seq in review.approvals if seq in lent}
    out = []
    for info in svc.reviewers():
        who = info.id
        if not info.enabled or not who.startswith("human:") or who in done or who == review.call.requested_by:
            continue
        if svc.may_decide(who, review):
            giver = svc.acting_for(who, review.tool, _roles(review))
            if giver is None or giver not in done:  # a delegate whose delegator approved already: no seat left
                out.append(who)
    return sorted(out)


def _roles(review: Review) -> tuple[str | None, ...]:
    return (review.policy.role,) if review.escalated_role is None else (review.policy.role, review.escalated_role)


def text_of(review: Review, url: str) -> tuple[str, list[dict[str, Any]]]:
    """A reminder as Slack text and blocks: what waits, since when, until when, and the Review link."""
    call = review.call
    what = f"`{mrkdwn(clean(call.tool, 80))}` from {mrkdwn(clean(call.agent or 'an agent', 80))}"
    args = mrkdwn(key_args(call.args, problem=review.problem))
    due = when(review.deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ")) if review.deadline else "no deadline"
    more = review.approvals_needed - len(review.approvals)
    quorum = f" It needs {more} more approval{'s' if more != 1 else ''}." if review.approvals_needed > 1 else ""
    head = f":bell: *Reminder*: {what} still waits for your decision ({args}); deadline {mrkdwn(due)}.{quorum}"
    button = {"type": "button", "text": {"type": "plain_text", "text": "Review"}, "url": url, "style": "primary"}
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": head[:SLACK_TEXT]}},
        {"type": "actions", "elements": [{**button, "action_id": "signoff_review"}]},
    ]
    return f"Reminder: {clean(call.tool, 80)} ({review.id}) waits for your decision"[:SLACK_TEXT], blocks


class Reminders:
    """Sends the reminders of ``slack-app`` and ``email`` endpoints (see the module docstring)."""

    def __init__(
        self, engines: Engines, log_id: str, svc: ReviewService, slack: SlackApp, client: httpx.Client, desk_url: str
    ) -> None:
        self.engines = engines
        self.log_id = log_id
        self.svc = svc
        self.slack = slack
        self.client = client
        self.desk_url = desk_url

    def deliver(
        self, endpoint: Endpoint, event_id: str, review_id: str, payload: dict[str, Any], *, timeout: float
    ) -> Outcome:
        """Remind each person the review still needs, once; ``skipped`` when nobody is left to remind."""
        try:
            review = self.svc.get(review_id)
        except UnknownReview:
            return Outcome(False, error=f"review {review_id}: not on the log")
        if review.status != "pending":
            return Outcome(False, skipped=True, error=f"{review.status} before the reminder was due: nobody to remind")
        if event_id.endswith(BEFORE) and review.deadline is not None and review.deadline <= datetime.now(UTC):
            return Outcome(False, skipped=True, error="its deadline passed before the reminder went out")
        people = needed(self.svc, review)
        if not people:
            return Outcome(False, skipped=True, error="nobody left to remind: every approver it needs decided")
        rows = self._rows(endpoint.name, event_id)
        try:
            api = web_api(endpoint, self.client, timeout) if endpoint.kind == "slack-app" else None
        except LookupError as exc:
            return Outcome(False, retry=True, error=str(exc))
        reminded = 0
        for person in people:
            row = rows.get(person)
            if row is not None and row.state in ("sent", "absent"):
                continue
            key = f"{event_id}/{person}"
            try:
                if api is not None:
                    outcome = self._slack_dm(endpoint, api, review, person, key, row)
                else:
                    outcome = self._email(endpoint, payload, person, key, row, timeout)
            except SlackCallFailed as failed:
                outcome = failed.outcome
            if not outcome.delivered:
                return outcome  # retried later: whoever has theirs is skipped then
            reminded += 1
        return Outcome(True, status=200, error=f"reminded {reminded} of {len(people)}")

    # -- one person ------------------------------------------------------------------------------

    def _slack_dm(self, endpoint: Endpoint, api: WebApi, review: Review, person: str, key: str, row: Any) -> Outcome:
        user = self.slack.user(endpoint, api, person.removeprefix("human:"))
        if user is None:  # not in the workspace: nothing can reach them here
            self._mark(endpoint.name, key, person, "absent")
            return Outcome(True, status=204)
        channel = str(api.call("conversations.open", json_body={"users": user})["channel"]["id"])
        if row is not None and row.state == "sending" and self._in_history(api, channel, key, float(row.started)):
            self._mark(endpoint.name, key, person, "sent", ref=FOUND)  # Slack took it before the crash: not again
            return Outcome(True, status=200)
        self._mark(endpoint.name, key, person, "sending")
        text, blocks = text_of(review, self.slack.link(endpoint, review.id, person))
        metadata = {"event_type": METADATA_TYPE, "event_payload": {"reminder": key}}
        sent = {"channel": channel, "text": text, "blocks": blocks, "metadata": metadata, "unfurl_links": False}
        answer = api.call("chat.postMessage", json_body=sent)
        self._mark(endpoint.name, key, person, "sent", ref=f"{answer['channel']}:{answer['ts']}")
        return Outcome(True, status=200)

    def _in_history(self, api: WebApi, channel: str, key: str, started: float) -> bool:
        """Whether the DM channel holds the reminder ``key`` (its message metadata), posted since ``started``."""
        params = {
            "channel": channel,
            "oldest": f"{max(0.0, started - HISTORY_SLACK):.6f}",
            "include_all_metadata": "true",
            "limit": "200",
        }
        answer = api.call("conversations.history", params=params)
        return any(
            (m.get("metadata") or {}).get("event_type") == METADATA_TYPE
            and ((m.get("metadata") or {}).get("event_payload") or {}).get("reminder") == key
            for m in answer.get("messages") or []
        )

    def _email(
        self, endpoint: Endpoint, payload: dict[str, Any], person: str, key: str, row: Any, timeout: float
    ) -> Outcome:
        address = person.removeprefix("human:")
        if "@" not in address:
            self._mark(endpoint.name, key, person, "absent")
            return Outcome(True, status=204)
        again = row is not None and row.state == "sending"  # cut off by a crash: the same message again
        self._mark(endpoint.name, key, person, "sending", resent=again)
        mine = replace(endpoint, settings={**endpoint.settings, "to": [address]})
        review = {
            **(payload.get("review") or {}),
            "url": self.slack.link(endpoint, str(payload["review"]["id"]), person),
        }
        outcome = send_email(mine, {**payload, "id": key, "review": review}, timeout)
        if outcome.delivered:
            tag = hashlib.sha256(f"{endpoint.name}\n{key}".encode()).hexdigest()[:32]  # _channels.email_message's
            self._mark(endpoint.name, key, person, "sent", ref=f"<{tag}@signoff.notify>")
        return outcome

    # -- the rows --------------------------------------------------------------------------------

    def _rows(self, endpoint: str, event_id: str) -> dict[str, Any]:
        prefix = f"{event_id}/"
        with self.engines.read.connect() as conn:
            rows = conn.execute(
                select(NotifySent).where(
                    col(NotifySent.log) == self.log_id,
                    col(NotifySent.endpoint) == endpoint,
                    col(NotifySent.event_id).startswith(prefix),
                )
            ).all()
        return {row.recipient: row for row in rows}

    def _mark(self, endpoint: str, key: str, person: str, state: str, *, ref: str = "", resent: bool = False) -> None:
        """One durable commit of a person's reminder state (the notifier's tables commit without waiting
        for a disk flush, but a commit survives the notifier's own crash)."""
        now = time.time()
        values: dict[str, Any] = {"state": state, "ref": ref}
        if state == "sending":
            values = {"state": state, "started": now}
        with self.engines.write.begin() as conn:
            maker = sqlite.insert if self.engines.backend == "sqlite" else postgresql.insert
            row = {"log": self.log_id, "endpoint": endpoint, "event_id": key, "recipient": person, "started": now}
            conn.execute(maker(NotifySent).values(**{**row, **values}).on_conflict_do_nothing())
            change = update(NotifySent).where(
                col(NotifySent.log) == self.log_id,
                col(NotifySent.endpoint) == endpoint,
                col(NotifySent.event_id) == key,
            )
            extra = {"resent": col(NotifySent.resent) + 1} if resent else {}
            conn.execute(change.values(**values, **extra))
