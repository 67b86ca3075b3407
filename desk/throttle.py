"""Sign-in throttling: per client address and per account, with exponential backoff.

OWASP Authentication Cheat Sheet ("Login Throttling"), in the form that keeps both promises:

* **Guessing is slow.** After :data:`IP_FREE` failed sign-ins from one address (whatever e-mails
  they named, enrolled or not), each further attempt from it waits twice as long as the one
  before, up to :data:`IP_MAX_WAIT`. After :data:`ACCOUNT_FREE` failures on one account (from
  anywhere), each further attempt on it waits too, up to :data:`ACCOUNT_MAX_WAIT`.
* **Nobody is locked out for long.** The wait on an account is short (at most
  :data:`ACCOUNT_MAX_WAIT`), so someone who types a colleague's e-mail with wrong passwords
  delays them by a minute at most; the long waits fall on the address that does the guessing.

While a wait runs, an attempt is refused (429, ``Retry-After``) without checking the password, so
it neither costs a password hash nor tells anything. A success clears its account's failures;
failures are forgotten :data:`FORGET` after the last one. The counters are rows in the desk's
database (``desk_throttle``), so replicas behind one load balancer share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session

from signoff.desk.db import ThrottleRow, utcnow

IP_FREE = 10
IP_MAX_WAIT = timedelta(minutes=15)
ACCOUNT_FREE = 5
ACCOUNT_MAX_WAIT = timedelta(seconds=60)
FORGET = timedelta(hours=1)


@dataclass(frozen=True)
class Wait:
    seconds: int
    why: str  # "address" | "account"


def _aware(dt: datetime | None) -> datetime | None:
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=utcnow().tzinfo)
    return dt


def backoff(failures: int, free: int, cap: timedelta) -> timedelta:
    """No wait for the first ``free`` failures, then 1 s, 2 s, 4 s, … up to ``cap``."""
    if failures < free:
        return timedelta(0)
    return min(cap, timedelta(seconds=2 ** min(failures - free, 30)))


class Throttle:
    def __init__(self, engine: Engine, log: str) -> None:
        self.engine = engine
        self.log = log

    @staticmethod
    def keys(ip: str, reviewer: str) -> tuple[str, str]:
        return f"ip:{ip}", f"account:{reviewer}"

    def check(self, ip: str, reviewer: str) -> Wait | None:
        """The wait still to run before this address may try this account, or None."""
        now = utcnow()
        worst: Wait | None = None
        with Session(self.engine) as s:
            for key, why in zip(self.keys(ip, reviewer), ("address", "account"), strict=True):
                row = s.get(ThrottleRow, (self.log, key))
                until = _aware(row.wait_until) if row is not None else None
                if until is not None and until > now:
                    seconds = max(1, int((until - now).total_seconds() + 0.999))
                    if worst is None or seconds > worst.seconds:
                        worst = Wait(seconds, why)
        return worst

    def failed(self, ip: str, reviewer: str) -> None:
        now = utcnow()
        with Session(self.engine) as s:
            for key, free, cap in zip(
                self.keys(ip, reviewer), (IP_FREE, ACCOUNT_FREE), (IP_MAX_WAIT, ACCOUNT_MAX_WAIT), strict=True
            ):
                row = s.get(ThrottleRow, (self.log, key))
                if row is None:
                    row = ThrottleRow(log=self.log, key=key, failures=0, last_failure=now)
                last = _aware(row.last_failure)
                if last is not None and now - last > FORGET:
                    row.failures = 0
                row.failures += 1
                row.last_failure = now
                wait = backoff(row.failures, free, cap)
                row.wait_until = now + wait if wait else None
                s.add(row)
            s.commit()

    def succeeded(self, reviewer: str) -> None:
        with Session(self.engine) as s:
            row = s.get(ThrottleRow, (self.log, f"account:{reviewer}"))
            if row is not None:
                s.delete(row)
                s.commit()


__all__ = ["ACCOUNT_FREE", "ACCOUNT_MAX_WAIT", "IP_FREE", "IP_MAX_WAIT", "Throttle", "ThrottleRow", "Wait", "backoff"]
