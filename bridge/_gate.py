"""The gate around each tool call: the reviewed args go in, what ran is recorded.

Internal module, not public API; import from ``bridge``.

DESIGN.md "The bridge" and "Who holds which key": before a gated tool runs, the gate reads the
review's decision from the log and proves it (:func:`signoff.audit.decided.prove_decision`: the
entry belongs to this review, its hash and link hold, the person's signature verifies against the
key the log enrolled for them under an admin's signature). Only then are the args set, in place,
to the signed final args (``None`` is returned: a returned dict would skip the tool), and the
tool's own question answered with the signed answer. Nothing in the resume message or in a
projection row is trusted. A rejection, expiry or withdrawal stops the tool with the reason as the
result the model sees; a decision the log does not prove stops it with what failed.

A confirmation that arrives while the review is still open never stops the call: the gate raises
:class:`DecisionPending`, so ADK records no answer and the call stays paused until the person's
decision resumes it (the plugin's guard, :mod:`signoff.bridge._guard`, refuses such messages
before they reach the session at all).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import Any, Protocol

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff.audit import CallSpec, Review, ReviewService, Store
from signoff.audit.decided import DecisionNotProven, TrustCache, prove_decision
from signoff.audit.errors import AlreadyResumed, AuditError, FrontierNotReady
from signoff.bridge import _telemetry as telemetry
from signoff.bridge._calls import WORKFLOW_CONFIRMATION_PREFIX, PausedCall, agent_actor, binding_for
from signoff.bridge._guard import ConfirmationRefused
from signoff.bridge._mapping import EDITED, RUNS, STOPS, edit_note, stop_result, to_tool_confirmation
from signoff.bridge._plugin import SignoffPlugin
from signoff.bridge._policy import Policies

FORCED_PAUSE_STATUS = "awaiting review"
AUTO_PREFIX = "auto:"  # the confirmation id of an auto-approved call (it never paused, so ADK gave it none)
IN_FLIGHT_SECONDS = 600.0
MAX_ERROR = 800  # characters of a tool's error kept in its run.resume_failed reason
_WF_PREFIX = WORKFLOW_CONFIRMATION_PREFIX
log = logging.getLogger("signoff.bridge")


class DecisionPending(AuditError):
    """A confirmation reached a gated call before the person decided it. Raised, not answered, so that
    ADK consumes nothing and the real decision can still resume the call."""


class NoReview(AuditError):
    """A confirmation reached a gated call that has no review on the log (nothing opened it)."""


class GateHost(Protocol):
    """What the gate needs of its ``Signoff``."""

    store: Store
    reviews: ReviewService
    policies: Policies
    trust: TrustCache

    def plugin(self, name: str = "signoff") -> SignoffPlugin: ...

    def claimed_here(self, frontier_id: str) -> bool: ...

    def note_claim(self, frontier_id: str) -> None: ...

    def remember_tool(self, agent: str, tool: BaseTool) -> None: ...

    def call_spec(self, call: PausedCall) -> CallSpec: ...

    def lookup_review_id(self, session: str, value: str, *, by: str = "confirmation_id") -> str | None: ...


class ToolGate:
    """``before``/``after`` for one ``Signoff``; shared by the plugin and the agent callbacks."""

    def __init__(self, signoff: GateHost) -> None:
        self.signoff = signoff
        self._running: dict[str, Review] = {}
        # run key -> (review id, session id, when it started): from the gate until after or forget. A run cancelled
        # without either (a disconnected client) stops counting after IN_FLIGHT_SECONDS.
        self._in_flight: dict[str, tuple[str, str, float]] = {}

    async def before(self, tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """Apply the reviewed args in place and return ``None``, or stop the call with the reason.

        Before a decision exists this never answers the call (that would skip the review), except
        to ask ADK for a confirmation on a tool that a policy gates but ADK does not.
        """
        agent = tool_context.agent_name
        self.signoff.remember_tool(agent, tool)
        self.install_plugin(tool_context)
        confirmation: ToolConfirmation | None = tool_context.tool_confirmation
        if confirmation is None:
            policy = self.signoff.policies.for_tool(tool.name)
            if _in_workflow_node(tool_context):
                return None
            adk_gates = await tool.check_require_confirmation(args, tool_context) is True
            if adk_gates or policy.review:
                handled, result = await self._auto_approved(tool, args, tool_context)
                if handled:  # the log's policy let this call through (it runs as asked), or its proof failed
                    return result
            if policy.review and not adk_gates:
                tool_context.request_confirmation(
                    hint=policy.hint or f"Signoff: a person must approve {tool.name}() before it runs."
                )
                tool_context.actions.skip_summarization = True
                return {"status": FORCED_PAUSE_STATUS}
            return None
        review_id = await self._review_id(tool, tool_context)
        try:
            proven = await asyncio.to_thread(prove_decision, self.signoff.store, review_id, cache=self.signoff.trust)
        except DecisionNotProven as exc:
            telemetry.not_proven(review_id, self.signoff.store.log_id, str(exc))
            return {
                "error": f"The call {tool.name}() was not run: its decision is not proven by the log ({exc}).",
                "signoff": {"review": review_id, "status": "not_proven"},
            }
        review = proven.review
        if review.status not in RUNS and review.status not in STOPS:
            raise DecisionPending(
                f"{tool.name}(): review {review.id} is still pending; this confirmation did not come from a "
                "person's decision, so the call stays paused until one resumes it"
            )
        await asyncio.to_thread(self._own_the_resume, review)
        events = tool_context.session.events
        log_id = self.signoff.store.log_id
        if review.status in STOPS:
            telemetry.reached_call(review, log_id, events)
            return stop_result(review)
        if review.executed:
            telemetry.reached_call(review, log_id, events, not_run="already_executed")
            return {
                "error": f"The call {tool.name}() was not run again: the log shows it already ran.",
                "signoff": {"review": review.id, "status": "already_executed"},
            }
        if review.resume_failed:
            telemetry.reached_call(review, log_id, events, not_run="resume_failed")
            return {
                "error": f"The call {tool.name}() was not run: the log says it never runs ({review.resume_failed}).",
                "signoff": {"review": review.id, "status": "resume_failed", "reason": review.resume_failed},
            }
        now = time.monotonic()
        if any(
            rid == review.id and now - started < IN_FLIGHT_SECONDS for rid, _sid, started in self._in_flight.values()
        ):
            # Another run in this process is inside this very call (a re-drive of the invocation while
            # the tool runs): raised, so that nothing is consumed and it does not run twice.
            raise ConfirmationRefused(f"{tool.name}(): review {review.id} is running now; not run twice")
        # What was signed, and nothing else: the args, and the answer to the tool's own question.
        args.clear()
        args.update(copy.deepcopy(review.final_args or {}))
        tool_context.tool_confirmation = to_tool_confirmation(review)
        telemetry.reached_call(review, log_id, events)
        self._running[_run_key(tool_context)] = review
        self._in_flight[_run_key(tool_context)] = (review.id, tool_context.session.id, now)
        return None

    async def _auto_approved(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any
    ) -> tuple[bool, dict[str, Any] | None]:
        """A gated call that the policy an admin set on the log for this tool lets through, by its
        ``review_when`` rule (evaluated in the same transaction as the ``review.auto_approved`` it writes):
        no pause, no person; the call runs with its own args and ``tool.executed`` follows. Like a
        person's decision, the auto-approval is proven before the call runs (the policy is an admin's,
        signed, in force, and its rule lets the call through). Returns (handled, what to return)."""
        in_force = await asyncio.to_thread(self.signoff.reviews.policy_for, tool.name)
        if in_force is None or in_force.review_when is None:
            return False, None
        session = tool_context.session
        call_id = tool_context.function_call_id or ""
        paused = PausedCall(
            app=session.app_name,
            user=session.user_id,
            session=session.id,
            invocation=tool_context.invocation_id,
            confirmation_id=AUTO_PREFIX + call_id,
            call_id=call_id,
            tool=tool.name,
            args=copy.deepcopy(args),
            agent=tool_context.agent_name,
        )
        spec = self.signoff.call_spec(paused)
        review, why = await asyncio.to_thread(
            self.signoff.reviews.auto_approve, spec, actor=agent_actor(tool_context.agent_name)
        )
        if review is None:
            log.info("%s(): policy %s asks a person to review this call: %s", tool.name, in_force.name, why)
            return False, None
        try:
            await asyncio.to_thread(prove_decision, self.signoff.store, review.id, cache=self.signoff.trust)
        except DecisionNotProven as exc:
            telemetry.not_proven(review.id, self.signoff.store.log_id, str(exc))
            return True, {
                "error": f"The call {tool.name}() was not run: its auto-approval is not proven by the log ({exc}).",
                "signoff": {"review": review.id, "status": "not_proven"},
            }
        if review.executed:  # a re-driven invocation: this call's auto-approval already ran
            telemetry.reached_call(review, self.signoff.store.log_id, (), not_run="already_executed")
            return True, {
                "error": f"The call {tool.name}() was not run again: the log shows it already ran.",
                "signoff": {"review": review.id, "status": "already_executed"},
            }
        tool_context.tool_confirmation = ToolConfirmation(confirmed=True)
        telemetry.reached_call(review, self.signoff.store.log_id, ())
        self._running[_run_key(tool_context)] = review
        self._in_flight[_run_key(tool_context)] = (review.id, session.id, time.monotonic())
        return True, None

    def _own_the_resume(self, review: Review) -> None:
        """The answer reaching this call must be the one resume of its frontier: one this process
        claimed (the resumer, or the guard for a client), or, for an answer that came past the guard,
        a claim made now. A frontier another party resumed is refused (raised, so that ADK consumes
        nothing and that party's answer still runs the call, once)."""
        if self.signoff.claimed_here(review.frontier):
            return
        try:
            self.signoff.reviews.claim_resume(
                review.frontier, actor=f"agent:client-of-{review.call.app}", via=f"unguarded:{review.call.user}"
            )
        except FrontierNotReady:
            raise DecisionPending(
                f"{review.call.tool}(): another call paused with it is still pending; the call stays paused"
            ) from None
        except AlreadyResumed:
            raise ConfirmationRefused(
                f"{review.call.tool}(): frontier {review.frontier} was resumed by another party; this answer "
                "did not come from it, so it is not used"
            ) from None
        self.signoff.note_claim(review.frontier)

    async def _review_id(self, tool: BaseTool, tool_context: Any) -> str:
        """The review the plugin bound this call to on its pause event, else the one the log has for it."""
        node_path = getattr(tool_context, "node_path", "") or ""
        in_node = _in_workflow_node(tool_context)
        binding = binding_for(
            tool_context.session.events, tool_context.function_call_id or "", node_path if in_node else ""
        )
        if binding is not None:
            return binding[0]
        call_key = _WF_PREFIX + node_path if in_node else tool_context.function_call_id or ""
        review_id = await asyncio.to_thread(
            self.signoff.lookup_review_id, tool_context.session.id, call_key, by="call_id"
        )
        if review_id is None:
            raise NoReview(
                f"{tool.name}(): a confirmation arrived, but no Signoff review is on the log for this call "
                "(was the Signoff plugin, or apply_reviewed_args, installed when it paused?); not run"
            )
        return review_id

    async def after(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        """Record ``tool.executed`` with the digest of the args the tool ran with; note an edit."""
        review = self._running.pop(_run_key(tool_context), None)
        if review is None:
            return None
        try:
            return await self._record(review, args, tool_context, result)
        finally:
            self._in_flight.pop(_run_key(tool_context), None)

    async def _record(
        self, review: Review, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        """``tool.executed``; when the log refuses it (the tool ran with other args than the signed ones,
        or ran again), the run goes on with the tool's result and a note, and the refusal is on the log
        as ``run.resume_failed`` where it can be (the call then never runs again) and in the log output.
        Raising here would leave the call's answer unconsumed, for a later pass to run it again."""
        try:
            recorded = await asyncio.to_thread(
                self.signoff.reviews.record_execution,
                review.id,
                actor=agent_actor(tool_context.agent_name),
                args=args,
                result=result,
            )
        except AuditError as exc:
            log.error("%s(): review %s ran, but its tool.executed was refused: %s", review.tool, review.id, exc)
            return _noted(result, f"Signoff: the record of this call was refused ({exc}).")
        if recorded.kind == "run.resume_failed":
            log.error(
                "%s(): review %s ran with other args than the signed ones; recorded run.resume_failed at seq %d: %s",
                review.tool,
                review.id,
                recorded.seq,
                recorded.body.get("reason"),
            )
            return _noted(result, f"Signoff: this call ran with other args than the signed ones (seq {recorded.seq}).")
        if review.status == EDITED and isinstance(result, dict):
            return {**result, "signoff_note": edit_note(review)}
        return None

    def busy(self, session_id: str) -> str | None:
        """A reviewed call of this session that is running in this process now (its review id), if any."""
        now = time.monotonic()
        for review_id, sid, started in list(self._in_flight.values()):
            if sid == session_id and now - started < IN_FLIGHT_SECONDS:
                return review_id
        return None

    def install_plugin(self, tool_context: Any) -> None:
        """Register this Signoff's plugin on the runner, once, when an app uses only the agent callbacks:
        the plugin opens the reviews when the call pauses and guards the resume (ADK's plugin manager is
        the runner's, so it serves every later run of this runner, in this process)."""
        manager = getattr(getattr(tool_context, "_invocation_context", None), "plugin_manager", None)
        if manager is None or plugin_of(manager, self.signoff) is not None:
            return
        manager.register_plugin(self.signoff.plugin(name=f"signoff-{id(self.signoff):x}"))

    async def failed(self, tool_context: Any, error: BaseException) -> None:
        """The tool raised: no ``tool.executed``, and ``run.resume_failed`` for its call, whoever sent its
        answer. A raise proves nothing about the effect (a timeout after the charge raises too), so the
        call never runs again by itself: no resumer, restart or takeover sends it, and :meth:`before`
        refuses it. Best effort: a log that refuses it (a call auto-approved by a policy has no resume to
        fail) is logged.

        A cancelled call (ADK passes the ``CancelledError`` here too: a client that disconnected, a node
        timeout) is only forgotten, as before: a take-over may send it again once its runner is gone.
        Issue 33 (``tool.started``) makes that an unknown outcome for a person to settle."""
        review = self._running.pop(_run_key(tool_context), None)
        self._in_flight.pop(_run_key(tool_context), None)
        if review is None or not isinstance(error, Exception):
            return
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = (
            f"the tool raised {type(error).__name__}: {text}"[:MAX_ERROR]
            + "; its outcome is unknown (it may have taken effect), so it is not run again by itself"
        )
        try:
            entry = await asyncio.to_thread(
                self.signoff.reviews.record_resume_failure,
                review.frontier,
                actor=agent_actor(tool_context.agent_name),
                reviews=[review.id],
                reason=reason,
            )
        except AuditError as exc:
            log.error("%s(): review %s raised; run.resume_failed not recorded: %s", review.tool, review.id, exc)
            return
        log.warning("%s(): review %s raised; recorded run.resume_failed at seq %d", review.tool, review.id, entry.seq)


def _noted(result: Any, note: str) -> dict[str, Any]:
    """The tool's result with Signoff's note on it, as the model will read it."""
    if isinstance(result, dict):
        return {**result, "signoff_note": note}
    return {"result": result, "signoff_note": note}


def _run_key(tool_context: Any) -> str:
    return f"{id(tool_context)}:{tool_context.function_call_id}"


def _in_workflow_node(tool_context: Any) -> bool:
    """A tool running as a workflow node (no LLM call precedes it)."""
    call_id = tool_context.function_call_id or ""
    if not getattr(tool_context, "node_path", ""):
        return False
    return not any(fc.id == call_id for ev in tool_context.session.events for fc in ev.get_function_calls())


def plugin_of(manager: Any, signoff: Any) -> SignoffPlugin | None:
    """The ``SignoffPlugin`` of ``signoff`` registered on an ADK plugin manager, if any."""
    return next((p for p in manager.plugins if isinstance(p, SignoffPlugin) and p.signoff is signoff), None)
