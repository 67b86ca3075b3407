"""The ``Signoff`` facade: one store, one review service, the plugin, the resumer, in-process waits.

Internal module, not public API; import from ``bridge``.

Over ~400 lines on purpose: it is the one object an app holds, so each thing an app or its plugin asks
of Signoff is a short method here that hands the work to the module that does it (``_gate``,
``_guard``, ``_resumer``, ``_rewind``, ``_answers``).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonpatch
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff.audit import CallSpec, Frontier, Review, ReviewService, Signer, Store, open_store
from signoff.audit.decided import TrustCache
from signoff.audit.errors import PatchFailed, ReviewClosed, UnknownReview
from signoff.audit.keys import read_private_key
from signoff.bridge import _telemetry as telemetry
from signoff.bridge._calls import KIND_INPUT, KIND_WORKFLOW_INPUT, PausedCall, agent_actor
from signoff.bridge._gate import FORCED_PAUSE_STATUS, ToolGate, plugin_of
from signoff.bridge._guard import resuming
from signoff.bridge._mapping import to_tool_confirmation
from signoff.bridge._plugin import SignoffPlugin
from signoff.bridge._policy import Policies, ToolPolicy
from signoff.bridge._resumer import Resumer, StepHook
from signoff.bridge._schema import check_args, tool_schema

if TYPE_CHECKING:
    from collections.abc import Callable

    from google.adk.agents.run_config import RunConfig
    from google.adk.events.event import Event
    from google.adk.runners import Runner

_DEFAULT: Signoff | None = None
_INSTANCES: weakref.WeakSet[Signoff] = weakref.WeakSet()  # every Signoff that agent callbacks may use
_CLAIMS_KEPT = 10_000  # a resumed frontier's calls run within moments; older claims need not be remembered


class Signoff:
    """Everything an ADK app needs to put a person in front of its tools.

    >>> signoff = Signoff("sqlite:///signoff.db", policies=[ToolPolicy("transfer_*", review=True)])
    >>> app = App(name="bank", root_agent=agent, plugins=[signoff.plugin()],
    ...           resumability_config=ResumabilityConfig(is_resumable=True))
    >>> await signoff.resumer(runner).serve()
    """

    def __init__(
        self,
        store: str | Store,
        *,
        policies: Sequence[ToolPolicy] = (),
        log_key: str | None = None,
        service_key: str | Path | Signer | None = None,
        default: bool = True,
        app: str | None = None,
        desk_url: str | None = None,
        requester: Callable[[str], str] | None = None,
        log: str | None = None,
    ) -> None:
        """Open the log named by ``store`` (create it first with ``audit init``, away from the agent).

        ``log_key`` pins the log's public key (``ed25519:…``, printed by ``audit init``): the gate then
        refuses every decision that does not chain up to it, even if the whole database was rewritten.
        ``service_key`` (optional) is this agent host's own key, enrolled by an admin, to sign the
        entries it writes. ``default`` makes this instance one that ``apply_reviewed_args`` may use:
        with several in one process (one ``adk api_server`` serving several apps), each agent's calls
        go to its own app's Signoff: the one whose ``app`` names the session's app, else the one created
        in that app's package (``bank/agent.py`` serves app ``bank``); see :func:`signoff_for`.
        The agent host needs nothing else: no admin key, no reviewer key.

        ``desk_url`` (default ``$SIGNOFF_DESK_URL``): where the desk is served, e.g.
        ``https://desk.example.org``. Each pause event then carries a link to its reviews
        (``custom_metadata["signoff"]["links"]``, shown in ``adk web``'s event view), and a confirmation
        answered elsewhere while the review is pending is refused with the link.

        ``requester`` maps the ADK ``user_id`` of a run to the person the agent acts for (``human:…``),
        e.g. ``lambda user_id: "human:" + user_id``. Each review records it as ``requested_by``, and that
        person may reject their own request but not approve or edit it (review rule 2a), unless the
        log's policy for the tool, set by the admin, says ``self_approval``.

        ``log``: the log of the store this app's reviews go to, where the store holds several (one per
        app, team or environment; ``audit logs`` lists them); by default the store's only log.
        """
        self.store = open_store(store, create=False, log=log) if isinstance(store, str) else store
        signer = read_private_key(service_key) if isinstance(service_key, str | Path) else service_key
        self.reviews = ReviewService(self.store, signer=signer)
        self.trust = TrustCache(log_key=log_key)
        self.policies = Policies(policies)
        self._tools: dict[tuple[str, str], BaseTool] = {}
        self._gate = ToolGate(self)
        self._by_confirmation: dict[tuple[str, str], str] = {}
        self._claims: collections.OrderedDict[str, None] = collections.OrderedDict()  # frontiers claimed here
        self._claims_lock = threading.Lock()
        self.app = app
        self.requester = requester
        self.desk_url = (desk_url or os.environ.get("SIGNOFF_DESK_URL") or "").rstrip("/") or None
        caller = sys._getframe(1).f_globals.get("__name__", "")
        self.package = str(caller).split(".", 1)[0]  # the app's package, for apply_reviewed_args
        telemetry.watch(self)  # its store feeds the pending and unwitnessed metrics (when an SDK collects them)
        if default:
            global _DEFAULT
            _DEFAULT = self
            _INSTANCES.add(self)

    # -- the two objects an app installs ------------------------------------------------

    def plugin(self, name: str = "signoff") -> SignoffPlugin:
        return SignoffPlugin(self, name=name)

    def ensure_plugin(self, runner: Runner) -> None:
        """Register this Signoff's plugin on ``runner`` unless its app already has it (callback-only apps)."""
        if plugin_of(runner.plugin_manager, self) is None:
            runner.plugin_manager.register_plugin(self.plugin(name=f"signoff-{id(self):x}"))

    def resumer(
        self,
        runner: Runner,
        *,
        actor: str | None = None,
        max_wait: float = 5.0,
        concurrency: int = 8,
        on_step: StepHook | None = None,
        on_event: Callable[[Event], Any] | None = None,
        takeover_after: float = 600.0,
        rewind_every: float = 1.0,
        run_config: RunConfig | None = None,
        tool_threads: int | None = None,
    ) -> Resumer:
        """A worker that sends every decided frontier of ``runner``'s app back to its run (see ``Resumer``)."""
        return Resumer(
            self,
            runner,
            actor=actor,
            max_wait=max_wait,
            concurrency=concurrency,
            on_step=on_step,
            on_event=on_event,
            takeover_after=takeover_after,
            rewind_every=rewind_every,
            run_config=run_config,
            tool_threads=tool_threads,
        )

    def close(self) -> None:
        _INSTANCES.discard(self)
        telemetry.unwatch(self)
        self.store.close()

    def note_claim(self, frontier_id: str) -> None:
        """This process claimed ``frontier_id`` (``run.resumed``): its answers may run its calls here."""
        with self._claims_lock:
            self._claims[frontier_id] = None
            while len(self._claims) > _CLAIMS_KEPT:
                self._claims.popitem(last=False)

    def claimed_here(self, frontier_id: str) -> bool:
        with self._claims_lock:
            return frontier_id in self._claims

    @staticmethod
    def resuming() -> Any:
        """``with signoff.resuming(): ...``: answers sent inside are Signoff's own, for an app that
        claimed a frontier itself (``reviews.claim_resume``) and sends its answers through a runner."""
        return resuming()

    # -- opening reviews ---------------------------------------------------------------

    def remember_tool(self, agent: str, tool: BaseTool) -> None:
        """Keep the tool object so a review opened for it carries its schema and description."""
        self._tools[(agent, tool.name)] = tool
        self._tools[("", tool.name)] = tool

    def call_spec(self, call: PausedCall) -> CallSpec:
        tool = self._tools.get((call.agent, call.tool)) or self._tools.get(("", call.tool))
        return CallSpec(
            app=call.app,
            user=call.user,
            session=call.session,
            invocation=call.invocation,
            confirmation_id=call.log_confirmation_id,
            call_id=call.call_id,
            tool=call.tool,
            args=call.args,
            hint=call.hint,
            payload=call.payload,
            agent=call.agent,
            node_path=call.node_path,
            context=dict(call.context),
            tool_description=(tool.description or "") if tool is not None else "",
            tool_schema=tool_schema(tool) if tool is not None else None,
            kind=call.kind,
            requested_by=self._requester_of(call.user),
        )

    def _requester_of(self, user_id: str) -> str:
        """The ``human:`` the agent acts for, by the app's ``requester`` mapping ("" without one)."""
        if self.requester is None:
            return ""
        found = self.requester(user_id)
        if not isinstance(found, str) or not found.startswith("human:"):
            raise ValueError(f"requester({user_id!r}): expected a human: actor, found {found!r}")
        return found

    def open_frontier(self, calls: Sequence[PausedCall]) -> Frontier:
        """Open one review per call, in one transaction (one frontier for one pause)."""
        if not calls:
            raise ValueError("a frontier needs at least one paused call, found none")
        specs = [self.call_spec(c) for c in calls]
        policies = [self.policies.for_tool(c.tool).to_audit() for c in calls]
        frontier = self.reviews.open_frontier(specs, actor=agent_actor(calls[0].agent), policies=policies)
        for review in frontier.reviews:
            self._by_confirmation[(review.call.session, review.call.confirmation_id)] = review.id  # as logged
        return frontier

    def wants_review(self, call: PausedCall) -> bool:
        """Whether a paused call opens a review: every gated call; a question (kind ``input``) unless a
        policy says ``review=False`` for its tool (the app answers those itself)."""
        return call.kind != KIND_INPUT or self.policies.for_tool(call.tool).review is not False

    def review_link(self, review_id: str) -> str | None:
        """The review's page in the desk (``None`` without a ``desk_url``)."""
        return f"{self.desk_url}/reviews/{review_id}" if self.desk_url else None

    def review_for(self, call: PausedCall | Review | str) -> Review | None:
        """The review opened for ``call`` (a paused call, a review, or a review id), if any."""
        if isinstance(call, Review):
            return self.reviews.get(call.id)
        if isinstance(call, str):
            return self.reviews.get(call)
        key = (call.session, call.log_confirmation_id)
        review_id = self._by_confirmation.get(key)
        if review_id is None:
            review_id = self.lookup_review_id(call.session, call.log_confirmation_id)
        if review_id is None:
            return None
        self._by_confirmation[key] = review_id
        return self.reviews.get(review_id)

    def lookup_review_id(self, session: str, value: str, *, by: str = "confirmation_id") -> str | None:
        """The review of this session's call, by confirmation id or original call id (an indexed lookup)."""
        found = self.reviews.find(session, **{by: value})
        return None if found is None else found.id

    # -- decisions from another UI -------------------------------------------------------

    def record_decision(
        self,
        call: PausedCall | Review | str,
        confirmation: ToolConfirmation,
        *,
        reviewer: str,
        rationale: str = "",
        signer: Signer | None = None,
        sig: dict[str, Any] | None = None,
    ) -> Review:
        """Record a decision made in another UI, by the same rules as any decision.

        ``confirmed=False`` is a rejection (``rationale``, else the confirmation's hint, is the
        reason). ``confirmed=True`` with ``payload={"args": ...}`` (and optionally ``"patch"``) on a
        tool that did not ask its own question is an edit; any other ``confirmed=True`` is an
        approval, whose payload is the person's answer to the tool's own question.
        An edit that breaks the tool's parameters raises ``SchemaViolation`` before anything is written.
        The reviewer signs it: ``signer`` is their key (signed here), or ``sig`` their signature over
        the decision statement (made elsewhere, e.g. a passkey assertion).
        """
        signed: dict[str, Any] = {"signer": signer, "sig": sig}
        review = self.review_for(call)
        if review is None:
            raise UnknownReview(call.confirmation_id if isinstance(call, PausedCall) else str(call))
        if not confirmation.confirmed:
            reason = rationale or confirmation.hint
            return self.reviews.reject(review.id, reviewer=reviewer, reason=reason, **signed)
        payload = confirmation.payload
        asked_own_question = review.call.payload is not None
        if not asked_own_question and isinstance(payload, dict) and isinstance(payload.get("args"), dict):
            new_args = payload["args"]
            patch = payload.get("patch")
            if not isinstance(patch, list):
                patch = jsonpatch.make_patch(review.call.args, new_args).patch
            patched = jsonpatch.apply_patch(copy.deepcopy(review.call.args), patch)
            check_args(review.call.tool_schema, patched)
            if patched != new_args:
                raise PatchFailed("payload.patch: expected it to turn the opened args into payload.args")
            if not patch:
                return self.reviews.approve(review.id, reviewer=reviewer, rationale=rationale, **signed)
            return self.reviews.edit(review.id, reviewer=reviewer, patch=patch, rationale=rationale, **signed)
        return self.reviews.approve(
            review.id,
            reviewer=reviewer,
            rationale=rationale,
            payload=payload if asked_own_question else None,
            **signed,
        )

    def edit(
        self,
        review_id: str,
        *,
        reviewer: str,
        patch: list[dict[str, Any]],
        rationale: str = "",
        signer: Signer | None = None,
        sig: dict[str, Any] | None = None,
    ) -> Review:
        """Record an edit; patched args that break the tool schema are refused, nothing written."""
        review = self.reviews.get(review_id)
        patched = jsonpatch.apply_patch(copy.deepcopy(review.call.args), patch)
        check_args(review.call.tool_schema, patched)
        return self.reviews.edit(review_id, reviewer=reviewer, patch=patch, rationale=rationale, signer=signer, sig=sig)

    # -- in-process waiting ---------------------------------------------------------------

    async def request_confirmation(self, call: PausedCall, *, timeout: float | None = None) -> ToolConfirmation:
        """Wait for a person's decision on ``call`` and return the ``ToolConfirmation`` answering it.

        The review is opened if the plugin has not opened it already (with ``timeout`` as its
        deadline). When ``timeout`` passes with no decision the review expires (never a rejection)
        and ``confirmed=False`` is returned. Cancelling the awaiting task withdraws the review.
        Send the answer through a runner with Signoff's plugin: it claims the frontier
        (``run.resumed``) when the message arrives, so no resumer sends it twice.
        """
        review = await asyncio.to_thread(self.review_for, call)
        if review is None:
            audit_policy = self.policies.for_tool(call.tool).to_audit()
            if timeout is not None:
                audit_policy = replace(audit_policy, deadline_seconds=timeout)
            spec = self.call_spec(call)
            frontier = await asyncio.to_thread(
                self.reviews.open_frontier, [spec], actor=agent_actor(call.agent), policies=[audit_policy]
            )
            review = frontier.reviews[0]
            self._by_confirmation[(call.session, call.log_confirmation_id)] = review.id
        deadline_at = time.monotonic() + timeout if timeout is not None else None
        try:
            review = await self._wait_final(review, deadline_at)
        except asyncio.CancelledError:
            await asyncio.to_thread(self._withdraw_quietly, review.id, call.agent, "the awaiting task was cancelled")
            raise
        if not review.final:
            review = await asyncio.to_thread(self._expire_or_withdraw, review)
        return to_tool_confirmation(review)

    async def _wait_final(self, review: Review, deadline_at: float | None) -> Review:
        while not review.final:
            remaining = 0.5 if deadline_at is None else min(0.5, deadline_at - time.monotonic())
            if remaining <= 0:
                break
            found = await asyncio.to_thread(self.reviews.wait_for_decision, review_id=review.id, timeout=remaining)
            review = found if isinstance(found, Review) else await asyncio.to_thread(self.reviews.get, review.id)
        return review

    def _expire_or_withdraw(self, review: Review) -> Review:
        self.reviews.expire_due()
        current = self.reviews.get(review.id)
        if current.final:
            return current
        # The review's own deadline (set by a policy when the plugin opened it) is later than this
        # wait: it cannot be expired early, so the waiting run gives it up instead.
        return self._withdraw_quietly(review.id, review.call.agent, "the in-process wait timed out")

    def _withdraw_quietly(self, review_id: str, agent: str, reason: str) -> Review:
        try:
            return self.reviews.withdraw(review_id, actor=agent_actor(agent), reason=reason)
        except ReviewClosed:
            return self.reviews.get(review_id)

    # -- the callbacks around a tool (see bridge._gate) ----------------------------------------

    async def before_tool(self, tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """Apply the reviewed args in place and return ``None``, or stop the call with the reason."""
        return await self._gate.before(tool, args, tool_context)

    async def after_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        """Record ``tool.executed`` with the digest of the args the tool ran with; note an edit."""
        return await self._gate.after(tool, args, tool_context, result)

    def busy_session(self, session_id: str) -> str | None:
        """A reviewed call of this session running in this process now (its review id), if any."""
        return self._gate.busy(session_id)

    async def apply_reviewed_args(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        """This Signoff's own ``before_tool_callback`` (the module's :func:`apply_reviewed_args`, bound to it)."""
        if _plugin_present(tool_context):
            return None
        return await self.before_tool(tool, args, tool_context)

    async def tool_failed(self, tool_context: Any, error: BaseException) -> None:
        """A reviewed call whose tool raised: no ``tool.executed``, and ``run.resume_failed`` (its outcome
        is unknown, so it never runs again by itself)."""
        await self._gate.failed(tool_context, error)


def default_signoff() -> Signoff:
    if _DEFAULT is None:
        raise RuntimeError("apply_reviewed_args: expected a Signoff to be created first, found none")
    return _DEFAULT


def signoff_for(tool_context: Any) -> Signoff:
    """The ``Signoff`` of the app whose agent is calling a tool, for the agent-level callbacks.

    The one whose plugin the runner carries; else the one created with ``app=`` the session's app; else
    the one created in the app's own package (``adk api_server`` serves ``agents/bank/agent.py`` as app
    ``bank``); else the only one there is. Several, none of them the app's: a ``RuntimeError`` that says
    what to do, never a guess.
    """
    manager = getattr(getattr(tool_context, "_invocation_context", None), "plugin_manager", None)
    if manager is not None:
        installed = next((p.signoff for p in manager.plugins if isinstance(p, SignoffPlugin)), None)
        if isinstance(installed, Signoff):
            return installed
    live = list(_INSTANCES)
    app = str(getattr(getattr(tool_context, "session", None), "app_name", "") or "")
    for choose in (
        lambda s: s.app is not None and s.app == app,
        lambda s: s.app is None and bool(app) and s.package == app,
    ):
        found = [s for s in live if choose(s)]
        if len(found) == 1:
            return found[0]
    if len(live) == 1:
        return live[0]
    if not live:
        raise RuntimeError("apply_reviewed_args: expected a Signoff to be created first, found none")
    raise RuntimeError(
        f"apply_reviewed_args: expected one Signoff for app {app!r}, found {len(live)} in this process and none "
        f"created for it; create it with Signoff(..., app={app!r}), or pass its own callback "
        "(before_tool_callback=signoff.apply_reviewed_args)"
    )


async def apply_reviewed_args(tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
    """Agent-level ``before_tool_callback``: the design card's one line, ``before_tool_callback=apply_reviewed_args``.

    Mutates ``args`` in place and returns ``None`` once a person approved or edited the call; returns
    the person's reason when they rejected it (or it expired or was withdrawn). The first call it
    sees registers its app's ``Signoff``'s plugin (:func:`signoff_for`) on the runner, which from then
    on opens a review for every pause (in frontiers), guards resume messages and records what ran;
    once a Signoff plugin is there this callback leaves the call to it (plugin callbacks run before
    agent ones).
    """
    if _plugin_present(tool_context):
        return None
    return await signoff_for(tool_context).before_tool(tool, args, tool_context)


async def record_tool_executed(
    tool: BaseTool, args: dict[str, Any], tool_context: Any, tool_response: Any
) -> dict[str, Any] | None:
    """Agent-level ``after_tool_callback`` recording ``tool.executed`` (see :func:`apply_reviewed_args`).

    Optional: the plugin that ``apply_reviewed_args`` registers records it too (once, whoever runs first)."""
    return await signoff_for(tool_context).after_tool(tool, args, tool_context, tool_response)


def _plugin_present(tool_context: Any) -> bool:
    """A Signoff plugin (any Signoff's) is on this runner: it gates the call, so the callback must not."""
    manager = getattr(getattr(tool_context, "_invocation_context", None), "plugin_manager", None)
    return manager is not None and any(isinstance(p, SignoffPlugin) for p in manager.plugins)


__all__ = [
    "FORCED_PAUSE_STATUS",
    "KIND_WORKFLOW_INPUT",
    "Signoff",
    "apply_reviewed_args",
    "record_tool_executed",
    "signoff_for",
]
