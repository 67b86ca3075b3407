"""Requests from Slack: ``POST /slack/interactions`` (a Slack app's Interactivity Request URL).

The Slack app's messages carry one button, a link to the review (desk/notify/_slack_app.py). Slack
still tells the app of each click. This route checks that the request is Slack's, signed with the
signing secret of a ``slack-app`` endpoint (``--signing-secret-env``) and stamped within 5 minutes,
then answers 200 and does nothing else: nothing in Slack approves, edits or rejects. Anything
else is answered 401, with what was wrong with it.
"""

from __future__ import annotations

import logging
import os

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from signoff.desk.deps import DesksDep
from signoff.desk.logs import Desks

router = APIRouter(tags=["slack"])
log = logging.getLogger("signoff.desk")


def _secrets(desks: Desks) -> list[str]:
    """The signing secrets of the ``slack-app`` endpoints of every log this desk serves."""
    from signoff.desk.notify._endpoints import load

    endpoints = []
    for desk in desks:
        try:
            with desk.store.read_engine.connect() as conn:
                endpoints += load(conn, desk.store.log_id)
        except Exception:  # noqa: BLE001 - no notifier tables yet: no Slack app either
            return []
    found = []
    for endpoint in endpoints:
        name = endpoint.settings.get("signing_secret_env") if endpoint.kind == "slack-app" else None
        if name and os.environ.get(name):
            found.append(os.environ[name])
    return found


@router.post("/slack/interactions", include_in_schema=False)
async def interactions(request: Request, desks: DesksDep) -> Response:
    """Slack's interaction payloads (a click on the **Review** link): checked, acknowledged, never acted on."""
    from signoff.desk.notify._slack_app import check_request

    body = await request.body()
    keys = _secrets(desks)
    if not keys:
        return JSONResponse({"error": "no Slack app with a signing secret is configured here"}, status_code=401)
    problems = [check_request(key, dict(request.headers.items()), body) for key in keys]
    if all(problems):
        log.warning("slack: request refused: %s", problems[0])
        return JSONResponse({"error": problems[0]}, status_code=401)
    return Response(status_code=200)
