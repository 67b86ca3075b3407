"""What every request reaches through ``request.app.state.desk``: the :class:`Desk` and its templates.

Routes, dependencies and page helpers import this module; ``desk.app`` builds the ``Desk``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi.templating import Jinja2Templates
from sqlalchemy.sql.elements import ColumnElement

from signoff.desk import present
from signoff.desk.auth import Accounts, SignedIn
from signoff.desk.cache import LogCache
from signoff.desk.guard import DEFAULT_MAX_BODY
from signoff.desk.metrics import Metrics
from signoff.desk.scope import Scope, ToolRoles, visible_filter
from signoff.desk.sse import Broker
from signoff.desk.throttle import Throttle
from signoff.desk.verify import IncrementalVerifier, RuleVerifier

PACKAGE_DIR = Path(__file__).resolve().parent
# The repository keeps templates at its top level; an installed copy may ship them in the package.
TEMPLATES_DIR = next(
    (d for d in (PACKAGE_DIR.parent / "templates", PACKAGE_DIR / "templates") if (d / "base.html").exists()),
    PACKAGE_DIR.parent / "templates",
)
STATIC_DIR = PACKAGE_DIR / "static"


@dataclass
class Desk:
    """Everything a request needs, built once per app."""

    store: Any
    svc: Any
    accounts: Accounts
    broker: Broker
    cache: LogCache
    metrics: Metrics
    verifier: IncrementalVerifier
    rules: RuleVerifier
    templates: Jinja2Templates
    key_path: Path | None
    secure_cookies: bool | None = None  # None: Secure when the request came over HTTPS
    rp_id: str | None = None  # WebAuthn relying party ID; None: the request's host name
    origin: str | None = None  # the desk's origin as browsers see it; None: the request's own
    allowed_origins: tuple[str, ...] = ()  # other origins whose state-changing requests are taken (proxies)
    max_body: int = DEFAULT_MAX_BODY  # bytes in one request body; more is answered 413
    stalled_after: float = 60.0  # seconds after a resume with no tool run before "approved, not yet run"
    witness_vkeys: tuple[str, ...] = ()  # the witnesses the review page checks cosignatures against
    witness_quorum: int = 1
    sso: Any = None  # the OpenID Provider people sign in through (desk/sso.py), if one is set

    def witnessing(self) -> tuple[str, tuple[str, ...], int, bool]:
        """What the review page's receipt check trusts: the log's vkey, the witness vkeys and the quorum,
        and whether those witnesses are the desk's own configuration (``desk serve --witness``) rather
        than the ones an admin named on the log."""
        from signoff.audit import c2sp, witnessing

        log_vkey = c2sp.log_vkey(self.store.rules.origin, self.store.public_key)
        if self.witness_vkeys:
            return log_vkey, self.witness_vkeys, self.witness_quorum, True
        current = witnessing.config(self.store)
        return log_vkey, tuple(w.vkey for w in current.witnesses.values()), max(1, current.quorum), False

    @property
    def tool_roles(self) -> ToolRoles:
        """Which roles each tool's reviews come under (desk/scope.py), shared with the event stream."""
        return self.broker.tool_roles

    @property
    def throttle(self) -> Throttle:
        return Throttle(self.accounts.engine, self.accounts.log)

    def scope(self, who: SignedIn) -> Scope:
        """What this signed-in reviewer may see and decide (desk/scope.py)."""
        info = who.info if who.info is not None else self.svc.reviewer(who.reviewer)
        # What delegations in force lend them (rule 2b): read from the log, once per log size and 5 s
        # (a delegation also ends by the clock, with no entry: seen within 5 s; audit checks each decision again).
        lent = self.cache.read_for(("lent", who.reviewer, self.store.size()), 5.0, lambda: self.svc.lent(who.reviewer))
        return Scope.of(who.reviewer, info, lent)

    def visible(self, scope: Scope) -> ColumnElement[bool]:
        return visible_filter(scope, self.tool_roles)

    @property
    def passwords(self) -> bool:
        """Whether people may sign in with a desk password (``desk serve --no-passwords`` turns them off)."""
        return self.sso is None or bool(self.sso.settings.passwords)

    @property
    def signed_decisions(self) -> bool:
        """Whether this log refuses unsigned decisions (``log.configured``; the demo's log does not)."""
        return bool(self.store.rules.signed_decisions)


def make_templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=True,  # everything from an agent is shown escaped
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(present.FILTERS)
    return Jinja2Templates(env=env)
