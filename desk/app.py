"""The FastAPI app factory: ``create_app(store_url, key_path=...)``."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from signoff.audit import ReviewService, open_store
from signoff.audit.errors import AuditError, LogNotFound
from signoff.desk import reqlog
from signoff.desk.auth import Accounts
from signoff.desk.cache import LogCache
from signoff.desk.db import make_engine
from signoff.desk.errors import classify, problem
from signoff.desk.metrics import Metrics
from signoff.desk.sse import Broker
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


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=True,  # everything from an agent is shown escaped
        trim_blocks=True,
        lstrip_blocks=True,
    )
    from signoff.desk import present

    env.filters.update(present.FILTERS)
    return Jinja2Templates(env=env)


def create_app(
    store_url: str,
    key_path: str | Path | None = None,
    *,
    init: bool = False,
    secure_cookies: bool | None = None,
    service: Any = None,
    access_log: bool = True,
) -> FastAPI:
    """Build the desk for the log at ``store_url``.

    ``key_path`` is the log's Ed25519 key; with it the desk can sign checkpoints. With
    ``init=True`` a store without a log gets one (and the key is created at ``key_path``).
    ``service`` lets an in-process agent (``desk demo``) share one ``ReviewService``, so
    its wake-ups are in-memory signals.
    """
    if service is not None:
        svc = service
        store = service.store
    else:
        store = open_store(store_url)
        try:
            store.log_id  # noqa: B018 - raises LogNotFound on an empty store
        except LogNotFound:
            if not init or key_path is None:
                raise
            store.init_log(key_path)
        svc = ReviewService(store)
    engine = make_engine(store_url)
    desk = Desk(
        store=store,
        svc=svc,
        accounts=Accounts(engine, store.log_id),
        broker=Broker(store, svc),
        cache=LogCache(store),
        metrics=Metrics(lambda: svc.count_pending()),
        verifier=IncrementalVerifier(store),
        rules=RuleVerifier(store),
        templates=_templates(),
        key_path=Path(key_path) if key_path else None,
        secure_cookies=secure_cookies,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        desk.broker.start()
        # Warm the verification badge off the request path.
        warm = threading.Timer(1.0, desk.verifier.warm)
        warm.daemon = True
        warm.start()
        yield
        warm.cancel()
        desk.broker.stop()

    app = FastAPI(
        title="Signoff desk",
        version="1",
        summary="Review paused agent tool calls; every decision goes on a verifiable log.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's Swagger UI loads from a CDN; desk renders its own page at /api/docs
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.desk = desk

    from signoff.desk import web
    from signoff.desk.deps import NeedSignIn
    from signoff.desk.routes import api, log, ops, reviews, signin

    app.include_router(ops.router)
    app.include_router(api.router)
    app.include_router(signin.router)
    app.include_router(reviews.router)
    app.include_router(log.router)
    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")

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

    app.add_middleware(reqlog.AccessLog, metrics=desk.metrics, enabled=access_log)
    return app
