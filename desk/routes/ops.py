"""Operations: ``/healthz`` and Prometheus ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse

from signoff.desk.deps import DeskDep
from signoff.desk.metrics import CONTENT_TYPE
from signoff.desk.models import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
def healthz(desk: DeskDep) -> Health:
    """The store answers and the log exists."""
    return Health(ok=True, log=desk.store.log_id, size=desk.store.size())


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(desk: DeskDep) -> PlainTextResponse:
    """Prometheus text exposition format 0.0.4."""
    return PlainTextResponse(desk.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/api/docs", include_in_schema=False, response_class=HTMLResponse)
def api_docs(request: Request, desk: DeskDep) -> HTMLResponse:
    """The API reference, rendered from the OpenAPI document (no CDN, no script)."""
    spec = request.app.openapi()
    ops: list[dict[str, Any]] = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            body = (((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {}).get("schema")
            ops.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "params": [
                        (p["name"], p["in"], p.get("required", False), p.get("description", ""))
                        for p in op.get("parameters", [])
                    ],
                    "body": (body or {}).get("$ref", "").rsplit("/", 1)[-1],
                    "responses": [(code, r.get("description", "")) for code, r in op.get("responses", {}).items()],
                    "auth": bool(op.get("security")),
                }
            )
    schemas = spec.get("components", {}).get("schemas", {})
    return desk.templates.TemplateResponse(
        request,
        "api_docs.html",
        {
            "me": None,
            "csrf": "",
            "nav": "",
            "spec": spec,
            "ops": ops,
            "schemas": schemas,
        },
    )
