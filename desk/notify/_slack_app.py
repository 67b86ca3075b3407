"""A Slack app endpoint: each review posted with ``chat.postMessage`` and kept current with ``chat.update``.

Slack Web API methods used, each with the bot token (``Authorization: Bearer xoxb-…``):

* ``chat.postMessage`` (https://api.slack.com/methods/chat.postMessage): a new review goes to the
  configured channel and, as a direct message, to each enrolled reviewer who may decide it (their
  reviewer id's e-mail address found with ``users.lookupByEmail``). The reviews of one frontier go
  into one thread per channel: the frontier's first review is the thread's parent.
* ``chat.update`` (https://api.slack.com/methods/chat.update): every later event of the review
  (decided, escalated, expired, withdrawn, ran, refused) redraws each of its messages from the
  review's state on the log: who decided, what an edit changed, what ran. The **Review** button goes
  once nothing is left to decide.

Nothing in Slack decides: the button is a link to the review in the desk, where the person signs
with their passkey (or key file). Requests Slack sends to the desk (interactivity: a click on the
link button) are checked with the app's signing secret (:func:`check_request`) and decide nothing.

The messages posted are kept beside the jobs (``notify_slack_message``). A job is delivered at least
once, like every notification: a notifier killed after Slack took a message and before it wrote
that down posts it again on its next attempt.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import insert, select
from sqlmodel import col

from signoff.audit import ReviewService, UnknownReview
from signoff.audit.entry import format_time
from signoff.audit.review_types import Review
from signoff.desk import signin_links
from signoff.desk.notify._channels import ERROR_CHARS, SLACK_TEXT, USER_AGENT, Outcome, _env, _retry_after, mrkdwn
from signoff.desk.notify._endpoints import Endpoint
from signoff.desk.notify._events import clean, key_args, review_url, when
from signoff.desk.notify._tables import Engines, NotifyJob, NotifySlackMessage
from signoff.desk.summary import changed_names

API_URL = "https://slack.com/api"
TOLERANCE = 300  # seconds: Slack's own advice for X-Slack-Request-Timestamp
WAIT_FOR_POST = 0.5  # seconds before an update (or a thread reply) looks again for the message it needs
WAIT_FOR_POSTING = 10.0  # seconds an update waits for its review's post under way in this process
POSTED_KEPT = 10_000  # reviews whose post this process remembers finishing
RETRY_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"})
ARGS_CHARS = 2500
STATE = {
    "pending": ":hourglass_flowing_sand: Waiting for a decision",
    "approved": ":white_check_mark: Approved",
    "edited": ":pencil2: Approved with changes",
    "auto_approved": ":white_check_mark: Approved by policy",
    "rejected": ":no_entry: Rejected",
    "expired": ":x: Expired without a decision",
    "withdrawn": ":leftwards_arrow_with_hook: Withdrawn",
}


class SlackCallFailed(Exception):
    """A Web API call answered ``ok: false`` or failed on the way: its :class:`Outcome`."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.error)
        self.outcome = outcome


@dataclass(frozen=True)
class Target:
    """Where a review's message goes: the channel, or a reviewer's direct messages."""

    name: str  # the channel as configured, or the reviewer (human:…)
    channel: str  # what chat.postMessage takes: a channel id or name, or a Slack user id


def check_request(secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None) -> str:
    """Why a request said to come from Slack is refused ("" when it is Slack's): the ``v0`` signature,
    HMAC-SHA256 keyed with the signing secret over ``v0:{timestamp}:{body}``, and a timestamp no more
    than 5 minutes off (Slack API, "Verifying requests from Slack")."""
    lowered = {k.lower(): v for k, v in headers.items()}
    stamp = lowered.get("x-slack-request-timestamp", "")
    signature = lowered.get("x-slack-signature", "")
    if not stamp.isdigit():
        return "X-Slack-Request-Timestamp: expected unix seconds, found " + (repr(stamp[:20]) if stamp else "none")
    skew = abs((time.time() if now is None else now) - int(stamp))
    if skew > TOLERANCE:
        return f"X-Slack-Request-Timestamp: expected within {TOLERANCE} s of now, found {int(skew)} s off (a replay?)"
    if not signature.startswith("v0="):
        return "X-Slack-Signature: expected v0=<hex>, found " + (repr(signature[:20]) if signature else "none")
    expected = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest("v0=" + expected, signature):
        return "X-Slack-Signature: does not match the body under the app's signing secret"
    return ""


def sign_request(secret: str, body: bytes, stamp: int) -> str:
    """The ``X-Slack-Signature`` Slack sends with ``body`` at ``stamp`` (for tests and tools)."""
    return "v0=" + hmac.new(secret.encode(), b"v0:%d:" % stamp + body, hashlib.sha256).hexdigest()


# -- the message -------------------------------------------------------------------------------


def _changes(review: Review) -> str:
    """What an edit changed, as the desk counts a change (:func:`signoff.desk.summary.changed_names`)."""
    before, after = review.call.args, review.final_args or {}
    parts = []
    for name in changed_names(before, after):
        old = "—" if name not in before else clean(json.dumps(before[name], ensure_ascii=False), 60)
        new = "removed" if name not in after else clean(json.dumps(after[name], ensure_ascii=False), 60)
        parts.append(f"{clean(name, 40)}: {old} → {new}")
    return "; ".join(parts) or "no change to the arguments"


def _state(review: Review) -> str:
    """One line on where the review stands, from the log: the decision, and what ran or will not."""
    line = STATE.get(review.status, clean(review.status, 40))
    who = review.decided_by.removeprefix("human:") if review.decided_by else ""
    if review.status in ("approved", "edited", "rejected") and who:
        line += f" by {mrkdwn(clean(who, 120))}"
        lent_by = review.acting_for(review.decision_seq)  # a delegate decided (rule 2b)
        if lent_by:
            line += f", for {mrkdwn(clean(lent_by.removeprefix('human:'), 120))}"
    if review.status == "edited":
        line += f": {mrkdwn(_changes(review))}"
    if review.reason and review.status in ("rejected", "withdrawn"):
        line += f": {mrkdwn(clean(review.reason, 300))}"
    if review.status == "pending":
        role = review.escalated_role or review.policy.role
        line += f" (role {mrkdwn(clean(role, 80))})" if role else ""
    if review.executed:
        ran = review.final_args if review.final_args is not None else review.call.args
        line += f"\n:gear: Ran with {mrkdwn(key_args(ran))}"
    elif review.resume_failed:
        line += f"\n:warning: Will not run: {mrkdwn(clean(review.resume_failed, 300))}"
    return line


def message(review: Review, url: str, *, redact: bool = False) -> dict[str, Any]:
    """The review as Block Kit: what is asked, the args, the deadline, its state, and while it is
    pending a **Review** button (a link to the desk). Text from the agent is escaped (:func:`mrkdwn`)."""
    call = review.call
    head = f"*Signoff*: `{mrkdwn(clean(call.tool, 80))}` from {mrkdwn(clean(call.agent or 'an agent', 80))}"
    if review.problem:
        args_text = "values withheld: they do not match the log"
    elif redact:
        args_text = mrkdwn(key_args(call.args, redact=True))
    else:
        shown = json.dumps(call.args, indent=1, ensure_ascii=False, sort_keys=True)
        args_text = "```" + mrkdwn(shown[:ARGS_CHARS] + ("…" if len(shown) > ARGS_CHARS else "")) + "```"
    details = [f"review `{mrkdwn(review.id)}`"]
    if call.app:
        details.append(f"app {mrkdwn(clean(call.app, 80))}")
    if call.requested_by:
        details.append(f"on behalf of {mrkdwn(clean(call.requested_by.removeprefix('human:'), 120))}")
    details.append(f"deadline {when(format_time(review.deadline) if review.deadline else None)}")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": head[:SLACK_TEXT]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": args_text[:SLACK_TEXT]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(details)[:SLACK_TEXT]}]},
        {"type": "section", "text": {"type": "mrkdwn", "text": _state(review)[:SLACK_TEXT]}},
    ]
    if review.status == "pending":
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": "Review"},
            "url": url,
            "action_id": "signoff_review",
            "style": "primary",
        }
        blocks.append({"type": "actions", "elements": [button]})
    text = f"{STATE.get(review.status, review.status).split(' ', 1)[-1]}: {clean(call.tool, 80)} ({review.id})"
    return {"text": text[:SLACK_TEXT], "blocks": blocks}


# -- sending ------------------------------------------------------------------------------------


class SlackApp:
    """Delivers the jobs of ``slack-app`` endpoints (see the module docstring)."""

    def __init__(self, engines: Engines, log_id: str, svc: ReviewService, client: httpx.Client, desk_url: str) -> None:
        self.engines = engines
        self.log_id = log_id
        self.svc = svc
        self.client = client
        self.desk_url = desk_url
        self._users: dict[tuple[str, str], tuple[float, str | None]] = {}  # (endpoint, email) -> (when, id)
        # (endpoint, review) whose post is under way in this process, and those it finished (the job's
        # own row says so only once the runner writes its outcome, a few ms later).
        self._posting: dict[tuple[str, str], threading.Event] = {}
        self._posted: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def deliver(self, endpoint: Endpoint, event: str, review_id: str, *, timeout: float) -> Outcome:
        s = endpoint.settings
        try:
            token = _env(s["bot_token_env"])
        except LookupError as exc:
            return Outcome(False, retry=True, error=str(exc))
        try:
            review = self.svc.get(review_id)
        except UnknownReview:
            return Outcome(False, error=f"review {review_id}: not on the log")
        api = WebApi(self.client, str(s.get("api_url") or API_URL), token, timeout)
        try:
            if event == "review.opened":
                return self._posting_here(endpoint.name, review.id, lambda: self._post(endpoint, api, review))
            return self._update(endpoint, api, review)
        except SlackCallFailed as failed:
            return failed.outcome

    def _targets(self, endpoint: Endpoint, api: WebApi, review: Review) -> list[Target]:
        s = endpoint.settings
        found = [Target(str(s["channel"]), str(s["channel"]))] if s.get("channel") else []
        if not s.get("dm", True) or review.status != "pending":
            return found
        for reviewer in self.svc.reviewers():
            email = reviewer.id.removeprefix("human:")
            if not reviewer.enabled or "@" not in email or not self.svc.may_decide(reviewer.id, review):
                continue  # (a delegate may: the desk shows them the review, for whom they act)
            if review.call.requested_by == reviewer.id:
                continue  # they may not approve their own agent's call (rule 2a): nothing to ask them
            user = self.user(endpoint, api, email)
            if user is not None:
                found.append(Target(reviewer.id, user))
        return found

    def user(self, endpoint: Endpoint, api: WebApi, email: str) -> str | None:
        """The Slack user id of ``email`` (``users.lookupByEmail``), remembered for an hour."""
        known = self._users.get((endpoint.name, email))
        if known is not None and time.monotonic() - known[0] < 3600:
            return known[1]
        try:
            answer = api.call("users.lookupByEmail", params={"email": email})
            user: str | None = str(answer["user"]["id"])
        except SlackCallFailed as failed:
            if "users_not_found" not in failed.outcome.error:
                raise
            user = None  # not in this workspace: the channel still tells them
        self._users[(endpoint.name, email)] = (time.monotonic(), user)
        return user

    def link(self, endpoint: Endpoint, review: str, person: str | None) -> str:
        """The review's URL in a message to ``person`` (None: a channel): with ``sign_in_links``, a one-time
        sign-in link for them (desk/signin_links.py), minted now; otherwise the plain review page."""
        if person is None or not endpoint.settings.get("sign_in_links"):
            return review_url(self.desk_url, review)
        ttl = float(endpoint.settings.get("link_ttl") or signin_links.DEFAULT_TTL)
        with self.engines.write.begin() as conn:
            token = signin_links.mint(conn, self.log_id, person, review, ttl)
        return signin_links.url(self.desk_url, token)

    def _post(self, endpoint: Endpoint, api: WebApi, review: Review) -> Outcome:
        posted = {row.target for row in self._messages(endpoint.name, review.id)}
        first = self.svc.frontier(review.frontier).reviews[0].id
        for target in self._targets(endpoint, api, review):
            if target.name in posted:
                continue  # an earlier attempt posted it
            thread = ""
            if first != review.id:
                posted_first = self._posted_here(endpoint.name, first)  # waits for its post under way here
                parent = [row for row in self._messages(endpoint.name, first) if row.target == target.name]
                if parent:
                    thread = parent[0].thread_ts or parent[0].ts
                elif not posted_first and self._job_pending(endpoint.name, first, "review.opened"):
                    why = "its thread's first message is not posted yet"
                    return Outcome(False, retry=True, error=why, retry_after=WAIT_FOR_POST)
            person = target.name if target.name.startswith("human:") else None
            body = message(review, self.link(endpoint, review.id, person), redact=endpoint.redact_args)
            sent = {"channel": target.channel, **body, "unfurl_links": False, "unfurl_media": False}
            if thread:
                sent["thread_ts"] = thread
            answer = api.call("chat.postMessage", json_body=sent)
            self._keep(endpoint.name, review, target.name, str(answer["channel"]), str(answer["ts"]), thread)
        return Outcome(True, status=200)

    def _posting_here(self, endpoint: str, review: str, post: Callable[[], Outcome]) -> Outcome:
        """Run ``post``, marked as under way here; remembered as done here when it delivered."""
        key = (endpoint, review)
        done = threading.Event()
        with self._lock:
            self._posting[key] = done
        delivered = False
        try:
            outcome = post()
            delivered = outcome.delivered
            return outcome
        finally:
            with self._lock:
                del self._posting[key]
                if delivered:
                    self._posted[key] = None
                    while len(self._posted) > POSTED_KEPT:
                        self._posted.popitem(last=False)
            done.set()

    def _posted_here(self, endpoint: str, review: str) -> bool:
        """Whether this process posted the review's messages, waiting for a post under way here."""
        key = (endpoint, review)
        with self._lock:
            under_way = self._posting.get(key)
        if under_way is not None:
            under_way.wait(WAIT_FOR_POSTING)
        with self._lock:
            return key in self._posted

    def _update(self, endpoint: Endpoint, api: WebApi, review: Review) -> Outcome:
        if not self._posted_here(endpoint.name, review.id) and self._job_pending(
            endpoint.name, review.id, "review.opened"
        ):  # to be retried (or posted by a notifier before this one)
            return Outcome(False, retry=True, error="its messages are not all posted yet", retry_after=WAIT_FOR_POST)
        rows = self._messages(endpoint.name, review.id)
        if not rows:
            return Outcome(True, status=204, error="no message of this review to update")
        body = message(review, review_url(self.desk_url, review.id), redact=endpoint.redact_args)
        for row in rows:
            api.call("chat.update", json_body={"channel": row.channel, "ts": row.ts, **body})
        return Outcome(True, status=200)

    # -- the messages kept -------------------------------------------------------------------

    def _messages(self, endpoint: str, review: str) -> list[Any]:
        with self.engines.read.connect() as conn:
            return list(
                conn.execute(
                    select(NotifySlackMessage).where(
                        col(NotifySlackMessage.log) == self.log_id,
                        col(NotifySlackMessage.endpoint) == endpoint,
                        col(NotifySlackMessage.review) == review,
                    )
                ).all()
            )

    def _keep(self, endpoint: str, review: Review, target: str, channel: str, ts: str, thread: str) -> None:
        row = {
            "log": self.log_id,
            "endpoint": endpoint,
            "review": review.id,
            "channel": channel,
            "target": target,
            "frontier": review.frontier,
            "ts": ts,
            "thread_ts": thread,
        }
        with self.engines.write.begin() as conn:
            conn.execute(insert(NotifySlackMessage), row)

    def _job_pending(self, endpoint: str, review: str, event: str) -> bool:
        with self.engines.read.connect() as conn:
            found = conn.execute(
                select(col(NotifyJob.id)).where(
                    col(NotifyJob.log) == self.log_id,
                    col(NotifyJob.endpoint) == endpoint,
                    col(NotifyJob.review) == review,
                    col(NotifyJob.event) == event,
                    col(NotifyJob.state) == "pending",
                )
            ).first()
        return found is not None


def post_test(endpoint: Endpoint, payload: Mapping[str, Any], client: httpx.Client, timeout: float) -> Outcome:
    """``desk notify test``: the payload's summary posted to the endpoint's channel."""
    s = endpoint.settings
    if not s.get("channel"):
        return Outcome(False, error="slack-app: a test is posted to --channel, and this endpoint has none")
    try:
        api = WebApi(client, str(s.get("api_url") or API_URL), _env(s["bot_token_env"]), timeout)
        text = mrkdwn(str(payload.get("summary", "")))
        api.call("chat.postMessage", json_body={"channel": s["channel"], "text": text[:SLACK_TEXT]})
    except LookupError as exc:
        return Outcome(False, error=str(exc))
    except SlackCallFailed as failed:
        return failed.outcome
    return Outcome(True, status=200)


def web_api(endpoint: Endpoint, client: httpx.Client, timeout: float) -> WebApi:
    """The Web API of a ``slack-app`` endpoint, with its bot token (``LookupError`` when its variable is unset)."""
    s = endpoint.settings
    return WebApi(client, str(s.get("api_url") or API_URL), _env(s["bot_token_env"]), timeout)


class WebApi:
    """One endpoint's Web API calls: HTTP errors, 429 and ``ok: false`` as :class:`SlackCallFailed`."""

    def __init__(self, client: httpx.Client, base: str, token: str, timeout: float) -> None:
        self.client, self.base, self.timeout = client, base.rstrip("/"), timeout
        self.headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}

    def call(
        self, method: str, *, json_body: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> Any:
        url = f"{self.base}/{method}"
        try:
            if json_body is not None:
                headers = {**self.headers, "Content-Type": "application/json; charset=utf-8"}
                data = json.dumps(json_body, ensure_ascii=False).encode()
                response = self.client.post(url, content=data, headers=headers, timeout=self.timeout)
            else:
                response = self.client.get(url, params=params, headers=self.headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise SlackCallFailed(
                Outcome(False, retry=True, error=clean(f"{method}: {type(exc).__name__}: {exc}", ERROR_CHARS))
            ) from None
        if response.status_code == 429 or response.status_code >= 500:
            error = f"{method}: HTTP {response.status_code}"
            raise SlackCallFailed(
                Outcome(False, retry=True, status=response.status_code, error=error, retry_after=_retry_after(response))
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise SlackCallFailed(
                Outcome(
                    False,
                    status=response.status_code,
                    error=f"{method}: expected a JSON object, found HTTP {response.status_code}",
                )
            )
        if not answer.get("ok"):
            error = str(answer.get("error") or "unknown_error")
            raise SlackCallFailed(
                Outcome(
                    False,
                    retry=error in RETRY_ERRORS,
                    status=response.status_code,
                    error=clean(f"{method}: {error}", ERROR_CHARS),
                )
            )
        return answer
