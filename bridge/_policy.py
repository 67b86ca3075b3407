"""Tool policies: which calls need a person, by when, and which reviewer role decides.

Internal module, not public API; import from ``bridge``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from signoff.audit import Policy


@dataclass(frozen=True)
class ToolPolicy:
    """The review policy for the tools whose name matches ``tool`` (a name or an fnmatch glob).

    ``review``: ``True`` gates the tool even when it was not declared with
    ``require_confirmation`` (the plugin then asks ADK for the confirmation itself);
    ``None`` leaves it to the tool (ADK's own gate or the tool's ``request_confirmation``).
    ``False`` never adds a gate, but a call that ADK pauses anyway is still reviewed: only a
    person can answer it.

    ``approvals``: how many different people must approve (2 for four eyes). A policy an admin set on
    the log (``audit policy set``) governs over this one: it may raise the count, never lower it.
    """

    tool: str = "*"
    review: bool | None = None
    deadline_seconds: float | None = None
    role: str | None = None
    hint: str = ""
    approvals: int = 1

    def to_audit(self) -> Policy:
        return Policy(role=self.role, deadline_seconds=self.deadline_seconds, approvals=self.approvals)


class Policies:
    """An ordered list of :class:`ToolPolicy`; the first whose glob matches a tool name wins.

    An exact name beats any glob, whatever the order.
    """

    def __init__(self, policies: Sequence[ToolPolicy] | Mapping[str, ToolPolicy] = ()) -> None:
        items = list(policies.values()) if isinstance(policies, Mapping) else list(policies)
        self._exact = {p.tool: p for p in reversed(items) if not _is_glob(p.tool)}
        self._globs = [p for p in items if _is_glob(p.tool)]

    def for_tool(self, tool: str) -> ToolPolicy:
        exact = self._exact.get(tool)
        if exact is not None:
            return exact
        for policy in self._globs:
            if fnmatch.fnmatchcase(tool, policy.tool):
                return policy
        return ToolPolicy(tool=tool)


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")
