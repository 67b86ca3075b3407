"""The form that proposes a standing rule from a review (desk/routes/proposals.py): who may propose, the
conditions it offers per argument, and the conditions a reviewer ticked. No routes here, so that the review
page (desk/routes/reviews.py) builds the form and the proposal routes render the review page, neither
importing the other's module.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData

from signoff.audit.errors import InvalidEntry
from signoff.audit.proposals import OPS
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.scope import review_roles

_SCALARS = (str, int, float, bool)


def may_propose(desk: Desk, who: SignedIn, review: Any) -> bool:
    """Whether this reviewer's own roles cover the review's tool (a delegate proposes nothing for others)."""
    scope = desk.scope(who)
    return any(scope.covers_own(review.call.tool, role) for role in review_roles(review))


def condition_rows(args: dict[str, Any], order: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per plain argument (in ``order``, the page's), with the condition the form offers first:
    ends with the domain of an e-mail address, at most a number, or equals a value."""
    rows = []
    for name in [*(order or []), *(n for n in args if n not in (order or []))]:
        if name not in args:
            continue
        value = args[name]
        if not isinstance(value, _SCALARS):
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        shown: Any = value
        if isinstance(value, str) and "@" in value:
            op, shown = "ends_with", value[value.rindex("@") :]
        else:
            op = "at_most" if number else "equals"
        ops = [o for o in OPS if (o != "at_most" or number) and (o != "ends_with" or isinstance(value, str))]
        rows.append({"name": name, "op": op, "value": shown, "ops": ops})
    return rows


def _typed(sample: Any, text: str, name: str) -> Any:
    """A form's text as the type of the argument it constrains (a number for a number, and so on)."""
    if isinstance(sample, bool):
        if text not in ("true", "false"):
            raise InvalidEntry(f"conditions.{name}: expected true or false, found {text!r}")
        return text == "true"
    if isinstance(sample, int | float):
        try:
            number = float(text)
        except ValueError:
            raise InvalidEntry(f"conditions.{name}: expected a number, found {text!r}") from None
        return int(number) if isinstance(sample, int) and number.is_integer() else number
    return text


def conditions_from(form: FormData, args: dict[str, Any]) -> tuple[list[tuple[str, str, Any]], bool]:
    """The conditions a reviewer ticked (``cond`` = argument names), and whether the rule is for this agent."""
    out = []
    for name in form.getlist("cond"):
        name = str(name)
        if name not in args or not isinstance(args[name], _SCALARS):
            raise InvalidEntry(f"conditions: expected an argument of the call, found {name!r}")
        op = str(form.get(f"op:{name}", "equals"))
        out.append((name, op, _typed(args[name], str(form.get(f"value:{name}", "")), name)))
    return out, form.get("agent") == "on"
