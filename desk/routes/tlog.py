"""``/tlog/``: the log as c2sp.org/tlog-tiles, read-only, for any HTTP client to mirror (``desk serve
--tlog``). The checkpoint (the newest C2SP note, with its cosignatures) is served with a short cache
life, tiles and entry bundles as immutable (:mod:`signoff.audit.tlog_store`).

No sign-in: a mirror is any HTTP client. The entries hold what agents asked to do (args), so serve it
only where auditors alone reach it (a proxy with its own authentication, a private network)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from signoff.audit.errors import StoreError
from signoff.audit.tlog_store import serve
from signoff.desk.deps import DeskDep

router = APIRouter(include_in_schema=False)


@router.get("/tlog/{path:path}")
def tlog(path: str, desk: DeskDep) -> Response:
    try:
        found = serve(desk.store, path)
    except StoreError as exc:  # no note checkpoint yet
        return PlainTextResponse(f"{exc}\n", status_code=404, headers={"Cache-Control": "no-store"})
    if found is None:
        return PlainTextResponse(f"expected a tile, bundle or checkpoint path, found {path[:80]!r}\n", 404)
    return Response(found.body, media_type=found.content_type, headers={"Cache-Control": found.cache_control})
