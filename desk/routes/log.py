"""The log page: entries, the verification badge, the witnesses' badge (how far the log's witnesses have
cosigned it, ``signoff.audit.witnessing.coverage``), checkpoints and proof downloads."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from signoff.desk.csrf import CsrfForm
from signoff.desk.deps import DeskDep, PageReviewer
from signoff.desk.models import as_json
from signoff.desk.routes.api import inclusion_body
from signoff.desk.scope import visible_entries
from signoff.desk.web import PAGE_SIZE, Refused, log_context, me, render

router = APIRouter(include_in_schema=False)


@router.get("/log")
def log_page(
    request: Request,
    desk: DeskDep,
    who: PageReviewer,
    kind: str = "",
    actor: str = "",
    review: str = "",
    before: Annotated[int | None, Query(ge=0)] = None,
) -> HTMLResponse:
    size = desk.store.size()
    stop = min(before, size) if before is not None else None
    rows = list(
        desk.store.entries(
            stop=stop,
            kind=kind or None,
            actor=actor or None,
            review=review or None,
            newest_first=True,
            limit=PAGE_SIZE + 1,
        )
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    next_before = rows[-1].seq if more and rows else None
    shown = visible_entries(desk.scope(who), desk.tool_roles, rows)
    status = desk.verifier.status()
    rules = desk.rules.status(wait=0.5)
    cp = desk.store.latest_checkpoint()
    from signoff.audit import witnessing

    coverage = desk.cache.read(("witness-coverage",), lambda: witnessing.coverage(desk.store))
    return render(
        request,
        "log.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "log",
            "entries": shown,
            "hidden": len(rows) - len(shown),
            "size": size,
            "kind": kind,
            "actor": actor,
            "review": review,
            "next_before": next_before,
            "status": status,
            "rules": rules,
            "checkpoint": as_json(cp) if cp else None,
            "coverage": coverage,
            "can_sign": desk.key_path is not None,
            **log_context(request, desk, who),
        },
    )


@router.post("/log/checkpoint")
def sign_checkpoint(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm) -> Response:
    if desk.key_path is None:
        raise Refused(409, "No log key", "This desk was started without the log's key, so it cannot sign checkpoints.")
    desk.store.checkpoint(desk.key_path)
    return RedirectResponse("/log", status_code=303)


@router.get("/log/proof/{seq}.json")
def proof_download(desk: DeskDep, who: PageReviewer, seq: int, size: int | None = None) -> Response:
    """Inclusion proof against the latest checkpoint when it covers ``seq``, else the current tree."""
    current = desk.store.size()
    if not 0 <= seq < current or not visible_entries(desk.scope(who), desk.tool_roles, [desk.store.entry(seq)]):
        raise Refused(404, "No such entry", f"The log has no entry {seq} that you may read.")
    cp = desk.store.latest_checkpoint()
    if size is None:
        size = cp.size if cp is not None and seq < cp.size else current
    body: dict[str, Any] = inclusion_body(desk, seq, size).model_dump()
    if cp is not None and cp.size == size:
        body["checkpoint"] = cp.to_json()
        body["log_public_key"] = desk.store.public_key
    return JSONResponse(body, headers={"Content-Disposition": f'attachment; filename="inclusion-{seq}.json"'})


@router.get("/log/checkpoint.json")
def checkpoint_download(desk: DeskDep, who: PageReviewer) -> Response:
    cp = desk.store.latest_checkpoint()
    if cp is None:
        raise Refused(404, "No checkpoint yet", "The log has no signed checkpoint yet.")
    return JSONResponse(
        cp.to_json(),
        headers={"Content-Disposition": 'attachment; filename="checkpoint.json"'},
    )
