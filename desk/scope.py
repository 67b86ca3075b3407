"""Who sees which review: least privilege in the desk's pages, its API and its event stream.

A reviewer sees a review when they could decide it: their tool globs match its tool and their
roles cover its role (or the role it was escalated to), the same rule ``audit`` applies to a
decision (:func:`signoff.audit.rules.covers`). Every other review is invisible to them: it is
not listed, its page and its API answer 404 (not 403, which would say that it exists), its log
entries are left out, and its live events are not sent.

**Observers.** An administrator grants read access by enrolling a reviewer with the role
``observer`` (``desk reviewer add audit@example.org --role observer --any-tool``). An observer
sees every review, and decides none: the desk offers them no decision and refuses one (403).
``observer`` next to other roles (``--role observer --role finance``) adds reading everything to
deciding what the other roles cover.

Lists are filtered in SQL. The review projection has a ``tool`` column but keeps the role inside
its JSON ``data``, so :class:`ToolRoles` keeps, per tool, the set of roles its reviews were
opened under (and escalated to), read once from the projection and then followed along the log.
A reviewer's filter is then "tool in the tools I fully cover", plus a JSON role test only for a
tool whose reviews come under several roles of which the reviewer covers some.
"""

from __future__ import annotations

import fnmatch
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, false, literal_column, or_, select, true
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import col

from signoff.audit.tables import ReviewRow

OBSERVER = "observer"
ADMIN = "admin"


@dataclass(frozen=True)
class Lent:
    """What one delegator lends the reviewer now (SPEC.md §7 rule 2b): roles, under the delegator's tools."""

    delegator: str
    roles: frozenset[str]
    tools: tuple[str, ...]
    until: str = ""  # when it ends, as the log writes times

    def covers(self, tool: str, role: str | None) -> bool:
        if role is not None and role not in self.roles and ADMIN not in self.roles:
            return False
        return _matches(self.tools, tool)


def _matches(tools: tuple[str, ...], tool: str) -> bool:
    return not tools or any(fnmatch.fnmatchcase(tool, glob) for glob in tools)


@dataclass(frozen=True)
class Scope:
    """What one signed-in reviewer may see and decide: their own roles and tools, and what delegations
    in force lend them (a delegate sees and decides what the delegator would, for them)."""

    reviewer: str
    roles: frozenset[str]
    tools: tuple[str, ...]
    enabled: bool = True
    lent: tuple[Lent, ...] = ()

    @classmethod
    def of(cls, reviewer: str, info: Any, lent: Iterable[Any] = ()) -> Scope:
        """``lent``: what delegations lend them, as ``ReviewService.lent`` gives it."""
        if info is None:
            return cls(reviewer, frozenset(), (), False)
        given = tuple(
            Lent(item.delegator, frozenset(item.state.roles), tuple(item.state.tools), item.until) for item in lent
        )
        return cls(reviewer, frozenset(info.roles), tuple(info.tools), bool(info.enabled), given)

    @property
    def lent_until(self) -> str | None:
        """When the first delegation this scope counts on ends (a live stream ends then, to be opened again)."""
        return min((lent.until for lent in self.lent), default=None)

    @property
    def observer(self) -> bool:
        """Reads every review (the ``observer`` role)."""
        return self.enabled and OBSERVER in self.roles

    @property
    def deciding_roles(self) -> frozenset[str]:
        """The roles this reviewer decides with: their own (not ``observer``), and those lent to them."""
        return (self.roles - {OBSERVER}).union(*(lent.roles for lent in self.lent)) if self.enabled else frozenset()

    def tool_matches(self, tool: str) -> bool:
        return _matches(self.tools, tool) or any(_matches(lent.tools, tool) for lent in self.lent)

    def covers_own(self, tool: str, role: str | None) -> bool:
        """Rule 2 of ``audit`` (``rules.covers``) with their own roles, ``observer`` granting no decision."""
        roles = self.roles - {OBSERVER}
        if not self.enabled or not roles:
            return False
        if role is not None and role not in roles and ADMIN not in roles:
            return False
        return _matches(self.tools, tool)

    def covers(self, tool: str, role: str | None) -> bool:
        """Rule 2 with their own roles, or rule 2b with a delegation's."""
        return self.covers_own(tool, role) or (self.enabled and any(lent.covers(tool, role) for lent in self.lent))

    def sees(self, tool: str, roles: Iterable[str | None]) -> bool:
        return self.observer or any(self.covers(tool, role) for role in roles)

    def sees_review(self, review: Any) -> bool:
        return self.sees(review.call.tool, review_roles(review))

    def may_decide(self, review: Any) -> bool:
        """Whether the desk offers this reviewer a decision on ``review`` (``audit`` checks it again)."""
        return review.status == "pending" and any(self.covers(review.call.tool, r) for r in review_roles(review))

    def acting_for(self, review: Any) -> str | None:
        """Whom this reviewer decides ``review`` for: None when their own roles cover it, else the first
        delegator whose delegation does (the decision's body names them: rule 2b)."""
        roles = review_roles(review)
        if any(self.covers_own(review.call.tool, r) for r in roles):
            return None
        tool = review.call.tool
        return next((lent.delegator for lent in self.lent if any(lent.covers(tool, r) for r in roles)), None)


def review_roles(review: Any) -> tuple[str | None, ...]:
    """The roles that decide a review: its policy's role, and the role it was escalated to."""
    escalated = getattr(review, "escalated_role", None)
    role = getattr(review.policy, "role", None)
    return (role,) if not escalated else (role, escalated)


def roles_of_data(data: dict[str, Any]) -> tuple[str | None, ...]:
    """The same, from a projection row's ``data``."""
    role = (data.get("policy") or {}).get("role")
    escalated = data.get("escalated_role")
    return (role,) if not escalated else (role, escalated)


# -- the subjects of log entries ----------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """A review as far as visibility goes."""

    id: str
    tool: str
    roles: tuple[str | None, ...]
    frontier: str


@dataclass
class ToolRoles:
    """Per tool, the roles its reviews were opened under or escalated to; and a small cache of
    review subjects. Read from the projection once, then kept current from the log's new entries."""

    store: Any
    max_subjects: int = 50_000
    size: int | None = None
    roles: dict[str, set[str | None]] = field(default_factory=dict)
    _subjects: OrderedDict[str, Subject] = field(default_factory=OrderedDict)
    _frontiers: OrderedDict[str, tuple[str, ...]] = field(default_factory=OrderedDict)  # never change
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> dict[str, set[str | None]]:
        size = self.store.size()
        with self._lock:
            if self.size is None:
                self._build()
                self.size = size
            elif size > self.size:
                self._follow(self.size, size)
                self.size = size
            return self.roles

    def _build(self) -> None:
        role, escalated = _json_roles(self.store.backend)
        query = select(col(ReviewRow.tool), role, escalated).where(col(ReviewRow.log) == self.store.log_id).distinct()
        with self.store.read_engine.connect() as conn:
            for tool, r, e in conn.execute(query):
                found = self.roles.setdefault(str(tool), set())
                found.add(r)
                if e:
                    found.add(e)

    def _follow(self, start: int, stop: int) -> None:
        for entry in self.store.entries(start=start, stop=stop):
            body = entry.body or {}
            if entry.kind == "review.opened":
                call = body.get("call") or {}
                role = (body.get("policy") or {}).get("role")
                tool = str(call.get("tool") or "")
                self.roles.setdefault(tool, set()).add(role)
                review = body.get("review")
                if isinstance(review, str):
                    self._remember(Subject(review, tool, (role,), str(body.get("frontier") or "")))
            elif entry.kind == "review.escalated":
                review = body.get("review")
                if isinstance(review, str):
                    self._subjects.pop(review, None)
                    found = self._load([review]).get(review)
                    if found is not None:
                        self.roles.setdefault(found.tool, set()).update(found.roles)

    def _remember(self, subject: Subject) -> None:
        self._subjects[subject.id] = subject
        self._subjects.move_to_end(subject.id)
        while len(self._subjects) > self.max_subjects:
            self._subjects.popitem(last=False)

    def _load(self, ids: list[str]) -> dict[str, Subject]:
        # ``log || ''``: the planner seeks the primary key for each id. Given ``log = ?`` and ten ids or more,
        # SQLite prefers a (log, status, …) index and walks every review of the log (issue 24: 20 ms a burst
        # at 100,000 pending).
        query = select(col(ReviewRow.id), col(ReviewRow.tool), col(ReviewRow.frontier), col(ReviewRow.data)).where(
            col(ReviewRow.id).in_(ids), col(ReviewRow.log).concat("") == self.store.log_id
        )
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(query).all()
        out = {}
        for rid, tool, frontier, data in rows:
            subject = Subject(str(rid), str(tool), roles_of_data(json.loads(data)), str(frontier))
            out[subject.id] = subject
            self._remember(subject)
        return out

    def subjects(self, ids: Iterable[str]) -> dict[str, Subject]:
        """The subjects of these reviews (unknown ids are left out)."""
        self.refresh()
        wanted = list(dict.fromkeys(i for i in ids if i))
        with self._lock:
            found = {i: self._subjects[i] for i in wanted if i in self._subjects}
            missing = [i for i in wanted if i not in found]
            if missing:
                found.update(self._load(missing))
        return found

    def frontier_subjects(self, frontier: str) -> list[Subject]:
        """The reviews of one frontier (a frontier's reviews are opened together, once)."""
        with self._lock:
            ids = self._frontiers.get(frontier)
        if ids is None:
            query = select(col(ReviewRow.id)).where(
                col(ReviewRow.log) == self.store.log_id, col(ReviewRow.frontier) == frontier
            )
            with self.store.read_engine.connect() as conn:
                ids = tuple(str(r[0]) for r in conn.execute(query))
            if ids:
                with self._lock:
                    self._frontiers[frontier] = ids
                    while len(self._frontiers) > self.max_subjects:
                        self._frontiers.popitem(last=False)
        return list(self.subjects(ids).values())


def _json_roles(backend: str) -> tuple[Any, Any]:
    """SQL expressions for a projection row's role and escalated role (from its JSON ``data``)."""
    if backend == "postgresql":
        return (
            literal_column("(CAST(data AS json) -> 'policy' ->> 'role')"),
            literal_column("(CAST(data AS json) ->> 'escalated_role')"),
        )
    return (
        literal_column("json_extract(data, '$.policy.role')"),
        literal_column("json_extract(data, '$.escalated_role')"),
    )


def visible_filter(scope: Scope, tool_roles: ToolRoles) -> ColumnElement[bool]:
    """The SQL condition on ``signoff_review`` for the reviews ``scope`` sees."""
    if scope.observer:
        return true()
    if not scope.enabled or not scope.deciding_roles:
        return false()
    full: list[str] = []
    partial: dict[str, list[str | None]] = {}
    for tool, roles in tool_roles.refresh().items():
        if not scope.tool_matches(tool):
            continue
        ok = [r for r in roles if scope.covers(tool, r)]
        if len(ok) == len(roles):
            full.append(tool)
        elif ok:
            partial[tool] = ok
    if not full and not partial:
        return false()
    terms: list[ColumnElement[bool]] = []
    if full:
        terms.append(col(ReviewRow.tool).in_(full))
    if partial:
        role, escalated = _json_roles(tool_roles.store.backend)
        for tool, ok in partial.items():
            named = [r for r in ok if r is not None]
            either: list[ColumnElement[bool]] = []
            if named:
                either += [role.in_(named), escalated.in_(named)]
            if None in ok:
                either.append(role.is_(None))
            terms.append(and_(col(ReviewRow.tool) == tool, or_(*either)))
    return or_(*terms) if len(terms) > 1 else terms[0]


def entry_subject_ids(entry: Any) -> tuple[str | None, str | None]:
    """(review id, frontier id) an entry is about, when it is about a review or a frontier."""
    body = entry.body or {}
    review = body.get("review")
    if isinstance(review, str) and entry.kind.startswith(("review.", "tool.")):
        return review, None
    frontier = body.get("frontier")
    if isinstance(frontier, str) and entry.kind.startswith("run."):
        return None, frontier
    return None, None


def visible_entries(scope: Scope, tool_roles: ToolRoles, entries: list[Any]) -> list[Any]:
    """The entries ``scope`` may read: everything not about a review, and what is about reviews they see."""
    if scope.observer:
        return list(entries)
    reviews = [r for r in (entry_subject_ids(e)[0] for e in entries) if r]
    subjects = tool_roles.subjects(reviews) if reviews else {}
    frontiers: dict[str, bool] = {}
    out = []
    for e in entries:
        review, frontier = entry_subject_ids(e)
        if review is not None:
            subject = subjects.get(review)
            if subject is None or not scope.sees(subject.tool, subject.roles):
                continue
        elif frontier is not None:
            if frontier not in frontiers:
                frontiers[frontier] = any(scope.sees(s.tool, s.roles) for s in tool_roles.frontier_subjects(frontier))
            if not frontiers[frontier]:
                continue
        out.append(e)
    return out


__all__ = [
    "OBSERVER",
    "Lent",
    "Scope",
    "Subject",
    "ToolRoles",
    "entry_subject_ids",
    "review_roles",
    "visible_entries",
    "visible_filter",
]
