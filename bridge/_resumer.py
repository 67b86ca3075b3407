"""The resumer: every decided frontier is sent back to its run exactly once.

Internal module, not public API; import from ``bridge``.

Exactly once (DESIGN.md "The bridge"): a worker claims a decided frontier by appending
``run.resumed`` (``ReviewService.claim_resume``, one transaction that decides from the log; a second
claim raises ``AlreadyResumed``), and only then sends the one message answering every call of the
frontier. What to send is decided from the log (DESIGN.md "Decide from the log"): the frontier's
``run.resumed``, its reviews' decision entries, their ``tool.executed`` and any ``run.resume_failed``;
the projection rows only say which frontiers to look at. After a crash, the session's own events
tell what happened to a claim this worker made:

* no user event answers the frontier's calls: the claim was never sent, so it is sent now;
* the session holds this very answer, not yet consumed (the run died after ADK stored it, before
  or while the tool ran): the run is driven again with no new message (``run_async(invocation_id=...)``,
  ADK's resumable-invocation path, which takes up the stored answer), so the session holds one
  answer per pause;
* the answer was consumed but the run has not finished: it is driven again, with no new message;
* anything else: it was sent and the run finished; it is never sent again.

A tool that already has ``tool.executed`` (or a ``run.resume_failed``) on the log is not run again
(see ``Signoff.before_tool``). Each frontier fails alone: an error on one is logged once, counted in
``signoff_resume_failures_total``, and skipped, and every other frontier keeps resuming.

A run that went back or was cancelled before its pause was answered is recorded by
:mod:`signoff.bridge._rewind` (looked for before each claim, and every ``rewind_every`` seconds).

Over ~400 lines on purpose: one worker whose claim, send, recovery and take-over share its state (its
claims, orphans, poisoned frontiers and slots), written out in the order they happen; the pure readers
of a session's events are :mod:`signoff.bridge._session_events`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from prometheus_client import Counter

from signoff.audit import Frontier, ReviewService, Store
from signoff.audit.errors import AlreadyResumed, AuditError, FrontierNotReady
from signoff.bridge._calls import (
    adk_confirmation_id,
    answered_ids,
    paused_call_of,
    resume_message,
)
from signoff.bridge._guard import resuming
from signoff.bridge._lease_keeper import LeaseKeeper
from signoff.bridge._mapping import RELAYED_EDIT, RUNS, answer_for, relayed_edit
from signoff.bridge._rewind import RewindWatch, gone, record_gone, rewound_before
from signoff.bridge._session_events import (
    answers_stored,
    final_text,
    paused_in,
    ran_on,
    reply_in,
    requested_in,
)

log = logging.getLogger("signoff.bridge")
RESUME_FAILURES = Counter(
    "signoff_resume_failures_total",
    "Frontiers the resumer could not resume (each frontier and step counted once per process)",
    ["app", "step"],
)
STALE_RETRIES = 8  # a stale session is read again and the send retried, 0.02 s apart at first, doubling
STALE_RETRY_FIRST = 0.02
ORPHAN_FIRST_RECHECK = 0.2  # a decided frontier whose pause is not in the session yet: seconds until the next look
ORPHAN_MAX_RECHECK = 300.0
PAUSE_RECHECK = 0.02  # a pause whose request is stored and whose last event is not yet: seconds until the next look
MAX_REASON = 1000  # characters of a run.resume_failed reason (an error message can be long)

StepHook = Callable[[str, str], None]
"""Called as ``hook(step, frontier_id)`` at ``before_claim``, ``after_claim``, ``sent``, ``ran`` (the run ended,
before its ``run.replied``) and ``after_send``."""


class ResumerHost(Protocol):
    """What the resumer needs of its ``Signoff``: the log and the review service over it."""

    store: Store
    reviews: ReviewService

    def ensure_plugin(self, runner: Runner) -> None: ...

    def note_claim(self, frontier_id: str) -> None: ...

    def claimed_here(self, frontier_id: str) -> bool: ...


@dataclass(frozen=True)
class Resumed:
    """What one resume did: ``how`` is ``sent``, ``recovered`` (claimed earlier, sent now) or ``redriven``."""

    frontier: str
    session: str
    invocation: str
    how: str
    events: int


class Resumer:
    """Claims decided frontiers of one app and drives their runs on ``runner``."""

    def __init__(
        self,
        signoff: ResumerHost,
        runner: Runner,
        *,
        actor: str | None = None,
        max_wait: float = 5.0,
        on_step: StepHook | None = None,
        on_event: Callable[[Event], Any] | None = None,
        concurrency: int = 8,
        takeover_after: float = 600.0,
        rewind_every: float = 1.0,
        run_config: RunConfig | None = None,
        tool_threads: int | None = None,
    ) -> None:
        """``actor`` names this worker on the log (``agent:...``); give each concurrent worker its own,
        because a restarted worker recovers the unsent claims made under its name.

        ``takeover_after``: seconds after which a resumed frontier whose approved calls neither ran nor
        had their answer consumed (its claimant, a client or another worker, died on the way) is sent
        again by this worker, when its claimant held no resume lease. A worker's own claims carry one
        (:class:`signoff.bridge._lease_keeper.LeaseKeeper`): they are looked at once ``LEASE_SECONDS``
        old (or ``takeover_after``, if shorter) and taken over only once their holder is gone (its
        process ended, on this machine, or it renewed nothing for ``LEASE_SECONDS``), however long
        their tools run.

        ``rewind_every``: seconds between looks at the sessions of the open frontiers for a rewind
        (:class:`signoff.bridge._rewind.RewindWatch`); the first pass always looks.

        ``run_config``: the ``RunConfig`` every resumed run gets (the app's own, if it passes one). ADK
        runs a plain (non-async) tool on the event loop unless it has a ``tool_thread_pool_config``, so
        one slow tool would hold every other resume of this process: without one, the resumed runs get a
        pool of ``tool_threads`` workers (default: ``concurrency``); one the app set is kept as it is.
        """
        self.signoff = signoff
        self.runner = runner
        self.app_name = runner.app_name
        self.actor = actor or f"agent:signoff-resumer-{self.app_name}"
        self.max_wait = max_wait
        self.on_step = on_step
        self.on_event = on_event
        self._recovered = False
        self.failures: list[tuple[str, str, str]] = []  # (frontier, step, why) of the last pass
        self._reported: set[tuple[str, str]] = set()  # (frontier, step) already logged and counted
        self._poisoned: set[str] = set()  # frontiers whose rows disagree with the log: not looked at again
        # Frontiers whose pause was not in the session when last looked at: (when to look again, interval).
        self._orphans: dict[str, tuple[float, float]] = {}
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self.run_config = with_tool_threads(run_config, tool_threads or max(1, concurrency))
        self.takeover_after = takeover_after
        self._next_takeover = 0.0
        self.leases = LeaseKeeper(signoff.reviews)
        # Claims this old are looked at for a takeover: a lapsed lease, or no lease and takeover_after.
        self._takeover_look = min(takeover_after, self.leases.seconds)
        self.root_name = str(getattr(runner.agent, "name", "") or "")
        self.rewinds = RewindWatch(signoff.reviews, runner.session_service, self.app_name, self.actor, rewind_every)
        signoff.ensure_plugin(runner)

    # -- one pass ------------------------------------------------------------------------

    async def run_once(self) -> list[Resumed]:
        """Resume every decided frontier of this app (and, on the first pass, recover unsent claims).

        A frontier is claimed only when a slot is free to send it at once; the claimed runs are
        driven concurrently (at most ``concurrency``), so one long run does not hold up the others.
        A frontier that fails (its rows disagree with the log, its run raises) is reported once and
        skipped; :attr:`failures` lists this pass's.
        """
        done: list[Resumed] = []
        self.failures = []
        if not self._recovered:
            done.extend(await self._recover())
            self._recovered = True
        if self.rewinds.due():
            try:
                await self.rewinds.look()
            except Exception as exc:  # noqa: BLE001 - the session service failing: looked at again next time
                self._report("*", "rewinds", exc)
        svc = self.signoff.reviews
        ids: list[str] = await asyncio.to_thread(svc.ready_frontier_ids, 100 + len(self._poisoned))
        ready = set(ids)
        for seen in [fid for fid in self._orphans if fid not in ready]:
            del self._orphans[seen]  # resumed by another worker (or beyond this page): nothing to look at
        sends: list[asyncio.Task[Resumed | None]] = []
        for frontier_id in ids:
            if frontier_id in self._poisoned:
                continue
            orphan = self._orphans.get(frontier_id)
            if orphan is not None and time.monotonic() < orphan[0]:
                continue
            try:
                frontier = await asyncio.to_thread(svc.frontier, frontier_id)
            except Exception as exc:  # noqa: BLE001 - one frontier fails alone
                self._report(frontier_id, "read", exc, poisoned=True)
                continue
            if not frontier.reviews or frontier.reviews[0].call.app != self.app_name:
                continue
            if frontier.resumed and await asyncio.to_thread(svc.row_resumed, frontier_id):
                continue  # claimed by another party since its row was listed: a race, not a disagreement
            if not frontier.decided or frontier.resumed:
                waiting = [r.id for r in frontier.reviews if not r.final]
                self._report(
                    frontier_id,
                    "read",
                    "its rows say it waits to be resumed, the log says "
                    + (f"{', '.join(waiting)} still pending" if waiting else "it was resumed already"),
                    poisoned=True,
                )
                continue
            await self._slots.acquire()  # claim only what can be sent at once
            session = None
            try:
                session = await self._claim(frontier)
            except Exception as exc:  # noqa: BLE001
                self._report(frontier_id, "claim", exc)
            finally:
                if session is None:
                    self._slots.release()
            if session is not None:
                sends.append(asyncio.create_task(self._send_claimed(frontier, session)))
        for result in await asyncio.gather(*sends):
            if result is not None:
                done.append(result)
        return done

    def _report(self, frontier_id: str, step: str, error: BaseException | str, *, poisoned: bool = False) -> None:
        """One frontier's failure: logged and counted once per frontier and step (not once per pass),
        and listed in :attr:`failures`; ``poisoned``: not looked at again by this worker."""
        text = error if isinstance(error, str) else _describe(error)
        self.failures.append((frontier_id, step, text))
        if poisoned:
            self._poisoned.add(frontier_id)
        if (frontier_id, step) in self._reported:
            return
        self._reported.add((frontier_id, step))
        RESUME_FAILURES.labels(self.app_name, step).inc()
        log.error("frontier %s: not resumed (%s): %s; the other frontiers go on", frontier_id, step, text)

    async def _claim(self, frontier: Frontier) -> Session | None:
        """Claim ``frontier`` (``run.resumed``); its session if this worker now owns the send."""
        session = await self._session(frontier)
        found = gone(session.events, frontier) if session is not None else None
        if found is not None:  # the run went back before the pause, or was cancelled: nothing of it is sent
            self._orphans.pop(frontier.id, None)
            await asyncio.to_thread(record_gone, self.signoff.reviews, frontier.id, found, self.actor)
            return None
        if session is None or not paused_in(session.events, frontier):
            half = session is not None and requested_in(session.events, frontier)
            # The plugin opens the reviews in ADK's event callback, just before ADK stores the pause:
            # a decision that fast finds no pause yet, or not all of it, so look again later (backing
            # off). A pause that never reaches the session (the run died in between) leaves nothing to
            # resume: never claimed.
            before = self._orphans.get(frontier.id)
            first = PAUSE_RECHECK if half else ORPHAN_FIRST_RECHECK
            interval = first if before is None else min(before[1] * 2, ORPHAN_MAX_RECHECK)
            self._orphans[frontier.id] = (time.monotonic() + interval, interval)
            if before is None and not half:
                log.warning(
                    "frontier %s: its pause is not in session %s (yet); not claimed, looking again in %.1f s",
                    frontier.id,
                    frontier.reviews[0].call.session,
                    interval,
                )
            return None
        self._orphans.pop(frontier.id, None)
        self._step("before_claim", frontier.id)
        try:
            await asyncio.to_thread(
                self.signoff.reviews.claim_resume, frontier.id, actor=self.actor, via="resumer", lease=self.leases.lease
            )
        except (AlreadyResumed, FrontierNotReady):
            return None  # another worker got there first
        self.leases.held(frontier.id)
        self.signoff.note_claim(frontier.id)
        self._step("after_claim", frontier.id)
        return session

    async def _send_claimed(self, frontier: Frontier, session: Session) -> Resumed | None:
        """Send a claimed frontier, then free its slot (taken in :meth:`run_once`)."""
        try:
            result = await self._send_retrying(frontier, how="sent", session=session)
        except Exception as exc:  # noqa: BLE001
            # The claim stands (exactly once): the log says the send failed, and the call never runs.
            self._report(frontier.id, "run", exc)
            await self._record_failure(frontier, exc)
            return None
        finally:
            self._slots.release()
            await asyncio.to_thread(self.leases.release, frontier.id)
        self._step("after_send", frontier.id)
        return result

    async def serve(self, *, stop: asyncio.Event | None = None) -> None:
        """Resume frontiers as they are decided, until ``stop`` is set (or the task is cancelled).

        Wakes on every change to the log (``wait_for_change``: in-process condition, PostgreSQL
        ``LISTEN/NOTIFY`` or SQLite ``data_version``), never on a fixed slow poll. Between changes it
        wakes at the next review deadline, to expire it, or after ``max_wait`` at most.
        """
        svc = self.signoff.reviews
        store = self.signoff.store
        stop = stop or asyncio.Event()

        async def wake_on_stop() -> None:
            await stop.wait()
            store.feed.interrupt()  # the thread waiting for the log returns at once

        waker = asyncio.create_task(wake_on_stop())
        due_at = 0.0  # monotonic time of the earliest review deadline still to expire
        try:
            while not stop.is_set():
                size = await asyncio.to_thread(store.size)
                if time.monotonic() >= due_at:
                    await asyncio.to_thread(svc.expire_due)
                    await asyncio.to_thread(svc.escalate_due)
                await self.run_once()
                if time.monotonic() >= self._next_takeover:
                    self._next_takeover = time.monotonic() + max(self._takeover_look / 4, self.max_wait)
                    await self.take_over_stalled()
                wait, due_at = await asyncio.to_thread(self._next_wake)
                if stop.is_set():
                    break
                await asyncio.to_thread(svc.wait_for_change, size, wait)
        finally:
            waker.cancel()
            self.leases.stop()

    async def take_over_stalled(self) -> list[Resumed]:
        """Send again the claimed frontiers of this app whose approved calls have neither run nor had
        their answer consumed, and whose sender is gone: its resume lease lapsed or its process ended
        (:meth:`_take`), or, for a claim with no lease, it was made ``takeover_after`` seconds ago or
        more (a client's server killed, a disconnected client). A call whose answer was consumed is
        not run again: it may have run without reaching ``tool.executed`` (tools should use
        ``idempotency_key``)."""
        stalled = await asyncio.to_thread(self.signoff.reviews.stalled, self._takeover_look)
        done: list[Resumed] = []
        seen: set[str] = set()
        for item in stalled:
            review = item.review
            if review.call.app != self.app_name or review.frontier in seen or review.frontier in self._poisoned:
                continue
            seen.add(review.frontier)
            if self.signoff.claimed_here(review.frontier):
                continue  # this process is running it now
            if not await self._take(review.frontier, self.takeover_after, "take over"):
                continue  # its sender lives on: nothing of it is looked at here
            try:
                result = await self._take_over(review.frontier, item)
            finally:
                await asyncio.to_thread(self.leases.release, review.frontier)
            if result is not None:
                done.append(result)
        return done

    async def _take_over(self, frontier_id: str, item: Any) -> Resumed | None:
        """Send a frontier this worker took over (its lease now this worker's)."""
        try:
            frontier = await asyncio.to_thread(self.signoff.reviews.frontier, frontier_id)
            session = await self._session(frontier)
        except Exception as exc:  # noqa: BLE001
            self._report(frontier_id, "take over", exc, poisoned=True)
            return None
        if session is None:
            return None
        before = rewound_before(session.events, frontier)
        if before is not None:
            await self._record_failure(frontier, f"rewound: the run went back before invocation {before}")
            return None
        log.warning(
            "frontier %s: resumed by %s at %s, but its approved call has not run and its sender is gone; "
            "sending it again",
            frontier.id,
            item.claim.actor,
            item.claim.at,
        )
        self.signoff.note_claim(frontier.id)
        try:
            return await self._send_retrying(frontier, how="taken over", session=session)
        except Exception as exc:  # noqa: BLE001
            self._report(frontier.id, "take over", exc)
            await self._record_failure(frontier, exc)
            return None

    async def _take(self, frontier_id: str, older_than: float, step: str, *, until_replied: bool = False) -> bool:
        """Whether this worker now holds the send of claimed ``frontier_id``: refused while its claimant's
        lease is held by a live party (``ReviewService.take_over``), so that no call runs twice.
        ``until_replied``: also a run whose calls ran but which never reached its reply (a recovery
        drives it again)."""
        why = await asyncio.to_thread(
            functools.partial(
                self.signoff.reviews.take_over,
                frontier_id,
                holder=self.leases.holder,
                seconds=self.leases.seconds,
                older_than=older_than,
                until_replied=until_replied,
            )
        )
        if why is not None:
            log.info("frontier %s: not sent again here (%s): %s", frontier_id, step, why)
            return False
        self.leases.held(frontier_id)
        return True

    def _next_wake(self) -> tuple[float, float]:
        """Seconds to wait for a change at most, and when (monotonic) the next deadline or escalation falls due."""
        until_due = float("inf")
        for due in (self.signoff.reviews.next_deadline(), self.signoff.reviews.next_escalation()):
            if due is not None:
                until_due = min(until_due, max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.01)
        wait = min(self.max_wait, until_due, self.rewinds.seconds_until())
        if self._orphans:  # a pause to look at again (see _claim)
            wait = min(wait, max(0.0, min(at for at, _ in self._orphans.values()) - time.monotonic()))
        due_at = time.monotonic() + until_due if until_due != float("inf") else time.monotonic() + self.max_wait
        return wait, due_at

    # -- sending -------------------------------------------------------------------------

    async def _session(self, frontier: Frontier) -> Session | None:
        first = frontier.reviews[0].call
        return await self.runner.session_service.get_session(
            app_name=first.app, user_id=first.user, session_id=first.session
        )

    async def _send_retrying(self, frontier: Frontier, *, how: str, session: Session | None = None) -> Resumed | None:
        """:meth:`_send`, again on a fresh read of the session when ADK refuses it as stale: the run that
        paused was still appending its last events when the decision came (milliseconds apart). What the
        session already holds is not sent twice (:meth:`_send` skips answered calls)."""
        delay = STALE_RETRY_FIRST
        for attempt in range(1, STALE_RETRIES + 1):
            try:
                return await self._send(frontier, how=how, session=session, fresh=how == "sent" and attempt == 1)
            except StaleSessionError:
                if attempt == STALE_RETRIES:
                    raise
                log.info("frontier %s: session %s changed under the send; reading it again", frontier.id, session)
                session = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        return None

    async def _send(
        self, frontier: Frontier, *, how: str, session: Session | None = None, fresh: bool = False
    ) -> Resumed | None:
        """Send the frontier's answers (those the session has not consumed), or drive its run again.
        ``fresh``: the first send of a claim made just now, so no answer in the session is this
        worker's (an earlier attempt's answer, after a stale refusal, is; it is not sent twice)."""
        first = frontier.reviews[0].call
        if session is None:
            session = await self._session(frontier)
        if session is None:
            log.error("frontier %s: expected session %s, found none; not resumed", frontier.id, first.session)
            return None
        waiting = [r.id for r in frontier.reviews if not r.final]
        if waiting:  # the log decides: a frontier with an open review is never answered
            raise FrontierNotReady(
                f"frontier {frontier.id}: claimed, but the log shows {', '.join(waiting)} still pending "
                "(that claim breaks review rule 5); nothing is sent"
            )
        ids = {r.id: adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
        answered = answered_ids(session.events, first.invocation, ids.values())
        if fresh:
            # A claim made just now: nobody sent this frontier's answers, so an answer already in the session
            # was forged past the guard (ADK takes up the last answer to a call: ours, which the gate proves).
            answered = set()
        todo = [r for r in frontier.reviews if ids[r.id] not in answered]
        if not todo:
            if how != "recovered":
                return None
            if not ran_on(session.events, frontier, self.root_name):
                return await self._drive(frontier, None, how="redriven")
            if not frontier.replied:  # the run ended, and its worker died before run.replied: the session says it
                reply = reply_in(session.events, frontier)
                if reply:
                    await asyncio.to_thread(self._record_reply, frontier.id, reply)
            return None
        refused = [r.id for r in todo if relayed_edit(r) and not r.resume_failed]
        if refused:  # the remote would run the unedited args: it is told no, and the log says why
            await asyncio.to_thread(self._fail_relayed, frontier.id, refused)
        answers = [(paused_call_of(r), answer_for(r)) for r in todo]
        if answers_stored(session.events, first.invocation, answers):
            # The session holds this very answer, unconsumed: the run died after ADK stored it. Driven
            # again with no new message, ADK takes up the stored answer: one answer per pause.
            return await self._drive(frontier, None, how="redriven")
        return await self._drive(frontier, resume_message(answers), how=how)

    async def _drive(self, frontier: Frontier, message: Any, *, how: str) -> Resumed:
        first = frontier.reviews[0].call
        count = 0
        reply = ""
        with resuming():  # the plugin's guard passes what Signoff's own resumer sends
            async for event in self.runner.run_async(
                user_id=first.user,
                session_id=first.session,
                invocation_id=first.invocation,
                new_message=message,
                run_config=self.run_config,
            ):
                if count == 0:
                    self._step("sent", frontier.id)
                count += 1
                reply = final_text(event) or reply
                if self.on_event is not None:
                    self.on_event(event)
        self._step("ran", frontier.id)
        if reply:
            await asyncio.to_thread(self._record_reply, frontier.id, reply)
        return Resumed(frontier.id, first.session, first.invocation, how, count)

    async def _record_failure(self, frontier: Frontier, error: BaseException | str) -> None:
        """``run.resume_failed`` for the approved calls of a claimed frontier that have neither run nor
        failed, with why (a rewind the session shows, or the send's error): none of them runs from now on,
        the desk shows it, and ``audit verify --stalled-after`` lists it. Best effort: a log that refuses
        it (the calls ran meanwhile) is logged."""
        session = None
        try:
            session = await self._session(frontier)
        except Exception:  # noqa: BLE001 - the reason then comes from the error alone
            log.debug("frontier %s: session not read for the failure's reason", frontier.id)
        before = rewound_before(session.events, frontier) if session is not None else None
        if before is not None:
            why = f"rewound: the run went back before invocation {before} after the resume"
        else:
            why = error if isinstance(error, str) else f"the resumed run raised {_describe(error)}"

        def record() -> Any:
            current = self.signoff.reviews.frontier(frontier.id)
            calls = [
                r.id
                for r in current.reviews
                if r.status in RUNS and not r.executed and not r.resume_failed and not r.problem
            ]
            if not calls or current.claim is None:
                return None
            return self.signoff.reviews.record_resume_failure(
                frontier.id, actor=self.actor, reviews=calls, reason=why[:MAX_REASON]
            )

        try:
            entry = await asyncio.to_thread(record)
        except AuditError as exc:
            log.error("frontier %s: run.resume_failed not recorded: %s", frontier.id, _describe(exc))
            return
        if entry is not None:
            log.warning("frontier %s: recorded run.resume_failed at seq %d: %s", frontier.id, entry.seq, why)

    def _fail_relayed(self, frontier_id: str, reviews: list[str]) -> None:
        try:
            self.signoff.reviews.record_resume_failure(
                frontier_id, actor=self.actor, reviews=reviews, reason=RELAYED_EDIT
            )
        except AuditError as exc:  # recorded by an earlier attempt of this send
            log.info("frontier %s: run.resume_failed not recorded again: %s", frontier_id, exc)

    def _record_reply(self, frontier_id: str, text: str) -> None:
        """``run.replied``: what the agent said next, for the people who decided (once; best effort)."""
        try:
            self.signoff.reviews.record_reply(frontier_id, actor=self.actor, text=text)
        except AuditError as exc:  # already recorded (a re-drive), or a log that refuses it: the run is done
            log.info("frontier %s: reply not recorded: %s", frontier_id, exc)

    # -- crash recovery ------------------------------------------------------------------

    async def _recover(self) -> list[Resumed]:
        """Send the claims this worker made but (per the session's events) never sent, or drive again the
        runs they left unfinished. Each claim is looked at alone: one that fails is reported and skipped."""
        store = self.signoff.store
        svc = self.signoff.reviews
        claims = await asyncio.to_thread(lambda: [e for e in store.entries(kind="run.resumed", actor=self.actor)])
        done: list[Resumed] = []
        for claim in claims:
            frontier_id = str(claim.body.get("frontier"))
            try:
                frontier = await asyncio.to_thread(svc.frontier, frontier_id)
                if not frontier.reviews or frontier.reviews[0].call.app != self.app_name or _done_on_log(frontier):
                    continue
                if not await self._take(frontier_id, 0.0, "recover", until_replied=True):
                    continue  # its sender lives on (or another worker took it over): the takeover looks again
                self.signoff.note_claim(frontier.id)
                try:
                    result = await self._send_retrying(frontier, how="recovered")
                except Exception as exc:  # noqa: BLE001
                    # As on a first send: the log says the run failed, so no later restart drives it again.
                    await self._record_failure(frontier, exc)
                    raise
                finally:
                    await asyncio.to_thread(self.leases.release, frontier_id)
            except Exception as exc:  # noqa: BLE001 - one frontier fails alone
                self._report(frontier_id, "recover", exc, poisoned=True)
                continue
            if result is not None:
                done.append(result)
        return done

    def _step(self, step: str, frontier_id: str) -> None:
        if self.on_step is not None:
            self.on_step(step, frontier_id)


def with_tool_threads(run_config: RunConfig | None, workers: int) -> RunConfig:
    """``run_config`` (or ADK's default) with a tool thread pool of ``workers``, unless it has one."""
    config = run_config or RunConfig()
    if config.tool_thread_pool_config is not None:
        return config
    return config.model_copy(update={"tool_thread_pool_config": ToolThreadPoolConfig(max_workers=workers)})


def _done_on_log(frontier: Frontier) -> bool:
    """The log says the run of a claimed frontier went to its end: its reply is recorded, and each of its
    approved calls ran (``tool.executed``) or never will (``run.resume_failed``). Nothing to look at."""
    return frontier.replied and all(
        review.executed or review.resume_failed or review.status not in RUNS for review in frontier.reviews
    )


def _describe(exc: BaseException) -> str:
    """An error as one line (no traceback): its type, unless it is one of ours, and its message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if isinstance(exc, AuditError) and text else f"{type(exc).__name__}: {text}"
