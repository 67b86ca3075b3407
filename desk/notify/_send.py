"""One delivery to any endpoint, by its kind: a webhook, a Slack incoming webhook, a Slack app (only ``desk
notify test`` posts to one here; a review's messages go through :class:`signoff.desk.notify._slack_app.SlackApp`)
or e-mail. Above :mod:`._channels` and :mod:`._slack_app`, so that neither imports the other.

Internal module, not public API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from signoff.desk.notify._channels import Outcome, send_email, send_slack, send_webhook
from signoff.desk.notify._endpoints import Endpoint
from signoff.desk.notify._slack_app import post_test


def send(
    endpoint: Endpoint, payload: Mapping[str, Any], client: httpx.Client, *, timeout: float, attempt: int
) -> Outcome:
    if endpoint.kind == "webhook":
        return send_webhook(endpoint, payload, client, timeout, attempt)
    if endpoint.kind == "slack":
        return send_slack(endpoint, payload, client, timeout)
    if endpoint.kind == "slack-app":  # a review's messages go through SlackApp; this is `desk notify test`
        return post_test(endpoint, payload, client, timeout)
    return send_email(endpoint, payload, timeout)
