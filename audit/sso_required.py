"""IdP groups a role needs, as an admin signed them on the log (``sso.required``; SPEC.md §3).

A desk that signs people in through an OpenID Connect provider (desk/sso.py) checks, on sign-in and on
every request after, that the person is in one of the groups each of their roles needs here; someone the
IdP removed from the group, or disabled, is refused from their next request on. The IdP only says who
someone is and which groups it puts them in: roles stay on the log, signed by the admin, and decisions
stay signed with the person's own key. ``audit verify`` checks that each requirement is an admin's and
well formed; whether a person was in the group when they signed in is the desk's to enforce (the IdP's
answers are not on the log).

``sso.required`` ``{role, groups}``: ``role`` a role name, ``groups`` the IdP group names of which the
person must be in at least one (sorted, without repeats, at most :data:`MAX_GROUPS`); ``[]`` lifts the
requirement. The latest entry for a role is in force.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from signoff.audit.entry import Entry
from signoff.audit.errors import InvalidEntry

if TYPE_CHECKING:  # (the verifier imports this module: it reads an export with no database library loaded)
    from signoff.audit.keys import Signer
    from signoff.audit.reader import LogReader

KIND = "sso.required"
MAX_GROUPS = 32
GROUP = re.compile(r"^[^\s]{1,200}$")
# The requirements' entries, along the subject index (``sso:<role>``).
_ENTRIES = (
    "SELECT seq, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'sso:' AND subject < 'sso;' ORDER BY seq"
)


def body_of(role: str, groups: Iterable[str]) -> dict[str, Any]:
    """The body an admin signs: the role, and its groups sorted without repeats."""
    return {"role": role, "groups": sorted(set(groups))}


def check_body(body: Mapping[str, Any]) -> None:
    """``InvalidEntry`` naming the field unless ``body`` is a well-formed ``sso.required``."""
    role, groups = body.get("role"), body.get("groups")
    if not isinstance(role, str) or not role or role.strip() != role or len(role) > 100:
        raise InvalidEntry(f"body.role: expected a role name, found {role!r}")
    if not isinstance(groups, list) or not all(isinstance(g, str) and GROUP.match(g) for g in groups):
        raise InvalidEntry(f"body.groups: expected a list of IdP group names without spaces, found {groups!r}")
    if groups != sorted(set(groups)):
        raise InvalidEntry(f"body.groups: expected the names sorted, without repeats, found {groups!r}")
    if len(groups) > MAX_GROUPS:
        raise InvalidEntry(f"body.groups: expected at most {MAX_GROUPS} groups, found {len(groups)}")
    if set(body) != {"role", "groups"}:
        raise InvalidEntry(f"body: expected role and groups only, found {sorted(body)}")


def replay(entries: Iterable[Entry]) -> dict[str, tuple[str, ...]]:
    """The groups each role needs, from the log's ``sso.required`` entries (oldest first)."""
    needed: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        if entry.kind != KIND:
            continue
        role, groups = str(entry.body["role"]), tuple(entry.body["groups"])
        if groups:
            needed[role] = groups
        else:
            needed.pop(role, None)
    return needed


def requirements(store: LogReader) -> dict[str, tuple[str, ...]]:
    """The groups each role needs on this log now (one read along the subject index)."""
    from signoff.audit.reader import parse_entry

    return replay(parse_entry(bytes(row.raw)) for row in store.read_rows(_ENTRIES, store.log_id))


def missing(needed: Mapping[str, tuple[str, ...]], roles: Iterable[str], groups: Iterable[str]) -> list[str]:
    """The roles of ``roles`` whose requirement the person's IdP ``groups`` do not meet (none: all met)."""
    held = set(groups)
    return [role for role in roles if role in needed and not held & set(needed[role])]


def require(store: Any, role: str, groups: Iterable[str], *, admin: Signer, actor: str | None = None) -> Entry:
    """``sso.required``: people with ``role`` must be in one of ``groups`` at the IdP (``[]``: no longer);
    signed by the admin, whose authority and key are checked in the write's transaction."""
    body = body_of(role, groups)
    check_body(body)
    writer = actor or store.admin_actor(admin)

    def work(tx: Any) -> Entry:
        entry: Entry = tx.append(writer, KIND, body, tx.signature(writer, KIND, body, None, admin))
        return entry

    result: Entry = store.transact(work)
    return result
