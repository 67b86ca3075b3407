"""The FastAPI app factory: ``create_app(store_url, key_path=...)``."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware

from signoff.audit import ReviewService, open_store
from signoff.audit.driver import safe_url
from signoff.audit.errors import AuditError, KeyFileError, LogNotFound
from signoff.audit.keys import read_private_key
from signoff.desk import reqlog, retention, web
from signoff.desk.auth import Accounts
from signoff.desk.cache import LogCache
from signoff.desk.context import STATIC_DIR, TEMPLATES_DIR, Desk, make_templates
from signoff.desk.db import make_engine
from signoff.desk.deps import NeedSignIn
from signoff.desk.errors import classify, problem
from signoff.desk.guard import DEFAULT_MAX_BODY, Guard
from signoff.desk.logs import Desks
from signoff.desk.metrics import Metrics
from signoff.desk.routes import (
    api,
    decided,
    delegations,
    log,
    ops,
    proposals,
    queue,
    reviews,
    signin,
    single_sign_on,
    slack,
    tlog,
)
from signoff.desk.scope import ToolRoles
from signoff.desk.sse import Broker
from signoff.desk.sso import Provider
from signoff.desk.verify import IncrementalVerifier, RuleVerifier

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "Desk", "create_app"]


def create_app(
    store_url: str,
    key_path: str | Path | None = None,
    *,
    secure_cookies: bool | None = None,
    service: Any = None,
    access_log: bool = True,
    rp_id: str | None = None,
    origin: str | None = None,
    allowed_origins: Sequence[str] = (),
    max_body: int = DEFAULT_MAX_BODY,
    stalled_after: float = 60.0,
    checkpoint_every: float | None = None,
    serve_tlog: bool = False,
    witnesses: Sequence[str] = (),
    witness_quorum: int = 1,
    retention_every: float | None = None,
    logs: Sequence[str] | None = None,
    sso: Any = None,
) -> FastAPI:
    """Build the desk for the logs at ``store_url`` (made beforehand by ``audit init``): every log the
    store holds, or those ``logs`` names (desk/logs.py).

    ``key_path`` is a log's own Ed25519 key; with it the desk can sign that log's checkpoints. A file
    that cannot be read, or that holds no served log's key (such as the admin key, which never belongs
    on the desk host), raises :class:`~signoff.audit.errors.KeyFileError`. ``rp_id`` and ``origin`` fix
    the WebAuthn relying party (behind a proxy); by default each request's own host and origin.
    ``service`` lets an in-process agent (``desk demo``) share one ``ReviewService``, so its
    wake-ups are in-memory signals.

    ``allowed_origins`` are other origins whose state-changing requests the desk takes (a proxy's,
    another UI's); ``max_body`` bounds a request body (413 above it); ``stalled_after`` is how long
    after a resume a tool that has not run shows as "approved, not yet run" (desk/guard.py).

    ``checkpoint_every`` (seconds, with ``key_path``): make checkpoints and push them to the log's
    witnesses on that schedule (:class:`~signoff.audit.publisher.Publisher`, in a thread of its own).
    ``serve_tlog``: serve the log as C2SP tiles under ``/tlog/`` (desk/routes/tlog.py). ``witnesses``
    (cosignature vkeys) and ``witness_quorum``: whom the review page's receipt check trusts (by default,
    the witnesses an admin named on the log).

    ``retention_every`` (seconds, on a sealed log): erase the values whose retention passed on that
    schedule (desk/retention.py, in a thread of its own).

    ``sso`` (:class:`signoff.desk.sso.Settings`): people sign in through that OpenID Provider (desk/sso.py),
    and, with ``passwords=False``, through it alone.
    """
    for text in witnesses:
        from signoff.audit.signed_note import parse_vkey

        if parse_vkey(text).sig_type != 0x04:
            raise KeyFileError(f"--witness: expected a cosignature/v1 vkey (type 0x04), found {text[:60]!r}")
    if witnesses and not 1 <= witness_quorum <= len(witnesses):
        raise KeyFileError(f"--witness-quorum: expected 1..{len(witnesses)}, found {witness_quorum}")
    if checkpoint_every is not None and (key_path is None or checkpoint_every <= 0):
        raise KeyFileError("--checkpoint-every: expected the log key (--key) and a number of seconds above 0")
    if service is not None:
        stores = [service.store]
    else:
        stores = [open_store(store_url, create=False, log=log) for log in _served_logs(store_url, logs)]
    key_log = _log_of_key(stores, Path(key_path)) if key_path is not None else None
    for store in stores:
        retention.check(store, retention_every)
    engine = make_engine(store_url)
    templates = make_templates()
    provider = Provider(sso) if sso is not None else None

    def desk_of(store: Any) -> Desk:
        svc = service if service is not None else ReviewService(store)
        return Desk(
            store=store,
            svc=svc,
            accounts=Accounts(engine, store.log_id),
            broker=Broker(store, svc, ToolRoles(store)),
            cache=LogCache(store),
            metrics=Metrics(lambda: svc.count_pending(), unwitnessed=LogCoverage(store).unwitnessed),
            verifier=IncrementalVerifier(store),
            rules=RuleVerifier(store),
            templates=templates,
            key_path=Path(key_path) if key_path is not None and store.log_id == key_log else None,
            secure_cookies=secure_cookies,
            rp_id=rp_id,
            origin=origin.rstrip("/") if origin else None,
            allowed_origins=tuple(allowed_origins),
            max_body=max_body,
            stalled_after=stalled_after,
            witness_vkeys=tuple(witnesses),
            witness_quorum=witness_quorum,
            sso=provider,
        )

    desks = Desks({store.log_id: desk_of(store) for store in stores})
    desk = desks.default

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for one in desks:
            one.broker.start()
            one.rules.start()

        # Warm the verification badges and the visibility indexes off the request path.
        def warm_up() -> None:
            for one in desks:
                one.verifier.warm()
                one.tool_roles.refresh()

        warm = threading.Timer(1.0, warm_up)
        warm.daemon = True
        warm.start()
        publishing = None
        keyed = next((one for one in desks if one.key_path is not None), None)
        if checkpoint_every is not None and keyed is not None and keyed.key_path is not None:
            from signoff.audit.publisher import Publisher

            publisher = Publisher(keyed.store, read_private_key(keyed.key_path))
            publishing = (publisher, *publisher.start(checkpoint_every))
        erasing = (
            [retention.start(one.store, retention_every, one.svc.signer) for one in desks]
            if retention_every is not None
            else []
        )
        yield
        warm.cancel()
        for thread, stop in erasing:
            stop.set()
            thread.join(10)
        if publishing is not None:
            publisher, thread, stop = publishing
            stop.set()
            thread.join(10)
            publisher.close()
        for one in desks:
            one.broker.stop()
            one.rules.stop()

    app = FastAPI(
        title="Signoff desk",
        version="1",
        summary="Review paused agent tool calls; every decision goes on a verifiable log.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's Swagger UI loads from a CDN; desk renders its own page at /api/docs
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.desks = desks
    app.state.desk = desk  # the first log's (the only one's, on a store with one log)

    app.include_router(ops.router)
    app.include_router(api.router)
    app.include_router(signin.router)
    app.include_router(single_sign_on.router)
    app.include_router(queue.router)
    app.include_router(reviews.router)
    app.include_router(decided.router)
    app.include_router(log.router)
    app.include_router(slack.router)
    app.include_router(delegations.router)
    app.include_router(delegations.api)
    app.include_router(proposals.router)
    app.include_router(proposals.api)
    if serve_tlog:
        app.include_router(tlog.router)
    # The page's JS and CSS go compressed (a phone on a slow link loads about a quarter of their bytes). Only
    # these: pages carry a CSRF token beside text a request can echo, which compression would leak (BREACH).
    app.mount("/static", GZipMiddleware(StaticFiles(directory=str(STATIC_DIR)), minimum_size=1024), name="static")

    @app.exception_handler(AuditError)
    async def audit_error(request: Request, exc: AuditError) -> Any:
        status, _ = classify(exc)
        return JSONResponse(problem(exc), status_code=status)

    @app.exception_handler(NeedSignIn)
    async def need_sign_in(request: Request, exc: NeedSignIn) -> Any:
        return web.to_sign_in(request)

    @app.exception_handler(web.Refused)
    async def refused(request: Request, exc: web.Refused) -> Any:
        return web.refusal_page(request, exc)

    app.add_middleware(
        Guard,
        origin=desk.origin,
        allowed_origins=desk.allowed_origins,
        max_body=max_body,
        refuse_page=lambda status, title, message: web.refusal_html(desk, title, message),
    )
    app.add_middleware(reqlog.AccessLog, metrics=desk.metrics, enabled=access_log)
    return app


class LogCoverage:
    """How many entries no quorum-cosigned checkpoint covers yet, read at most every 5 s (the gauge)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._at = 0.0
        self._value = -1

    def unwitnessed(self) -> int:
        import time

        from signoff.audit import witnessing

        if time.monotonic() - self._at > 5.0:
            self._value = witnessing.coverage(self.store).unwitnessed
            self._at = time.monotonic()
        return self._value


def _served_logs(store_url: str, wanted: Sequence[str] | None) -> list[str]:
    """The logs to serve: ``wanted`` (each must be in the store), else every log the store holds."""
    probe = open_store(store_url, create=False)
    try:
        held = [one.id for one in probe.logs()]
    finally:
        probe.close()
    if not held:
        raise LogNotFound(f"store {safe_url(store_url)}: expected a log, found none (run `audit init`)")
    if not wanted:
        return held
    missing = [log for log in wanted if log not in held]
    if missing:
        raise LogNotFound(
            f"--log: expected a log of the store, found {', '.join(missing)} (it holds: {', '.join(held)})"
        )
    return list(dict.fromkeys(wanted))


def _log_of_key(stores: Sequence[Any], path: Path) -> str:
    """The served log whose own key ``path`` holds; refuse a file the desk cannot read, or another key."""
    signer = read_private_key(path)  # KeyFileError names the file and what is wrong with it
    for store in stores:
        if signer.public == store.public_key:
            return str(store.log_id)
    owners = [
        actor for store in stores for fingerprint, actor in store.key_owners() if fingerprint == signer.fingerprint
    ]
    found = f"the key of {owners[0]}" if owners else f"another key ({signer.fingerprint})"
    advice = " (an admin key never belongs on the desk host)" if any(o.startswith("admin:") for o in owners) else ""
    wanted = stores[0].public_key if len(stores) == 1 else "the own key of one of its logs"
    raise KeyFileError(f"{path}: expected the log's own key ({wanted}), found {found}{advice}")
