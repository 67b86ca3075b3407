"""Retention in the desk (``desk serve --retention-every SECONDS``): on a sealed log, the values of the
reviews whose policy's ``retain_seconds`` have passed are erased on a timer, in a thread of the desk's own
(:func:`signoff.audit.erasure.retention_run`: one ``data.erased`` entry, reason ``retention``, per review).

Each pass that erases or refuses something is one JSON line on stderr (``desk.note``, desk/reqlog.py); a
pass that fails is a warning line, and the next pass tries again. What is not done yet (still open, or
approved and not run) waits for a later pass.
"""

from __future__ import annotations

import threading
from typing import Any

from signoff.audit import erasure
from signoff.audit.errors import UnusableInput
from signoff.desk import reqlog


def check(store: Any, every: float | None) -> None:
    """Refuse ``--retention-every`` on a log that keeps values in its entries (nothing there can be erased)."""
    if every is None:
        return
    if every <= 0:
        raise UnusableInput(f"--retention-every: expected a number of seconds above 0, found {every}")
    if not store.rules.sealed_values:
        raise UnusableInput(
            "--retention-every: expected a log with sealed values (any log `audit init` makes without "
            "--values-in-entries), found one that keeps values in its entries"
        )


def run_once(store: Any, signer: Any = None) -> list[erasure.Erased]:
    """One pass: erase what is due, and say what was erased and what was not (and why)."""
    done = erasure.retention_run(store, signer=signer)
    erased = [d for d in done if d.entry is not None]
    waiting = [d for d in done if d.entry is None and d.waiting]
    refused = [d for d in done if d.entry is None and not d.waiting]  # e.g. the desk's key must sign
    if erased or refused:
        reqlog.note(
            "retention",
            log=store.log_id,
            erased=[{"review": d.review, "seq": d.entry.seq} for d in erased if d.entry is not None],
            waiting=len(waiting),
            refused=[{"review": d.review, "why": d.why[:300]} for d in refused],
        )
    return done


def start(store: Any, every: float, signer: Any = None) -> tuple[threading.Thread, threading.Event]:
    """Run :func:`run_once` now and then every ``every`` seconds until the returned event is set."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                run_once(store, signer)
            except Exception as exc:  # noqa: BLE001 - the next pass tries again; the operator hears of it
                if stop.is_set():
                    break  # the store closed under us while shutting down
                reqlog.warn("retention_failed", log=store.log_id, detail=f"{type(exc).__name__}: {exc}"[:500])
            stop.wait(every)

    thread = threading.Thread(target=loop, name="desk-retention", daemon=True)
    thread.start()
    return thread, stop


__all__ = ["check", "run_once", "start"]
