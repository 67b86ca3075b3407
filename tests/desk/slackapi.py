"""A local HTTP server that speaks the Slack Web API methods a Slack app endpoint uses.

``POST /api/chat.postMessage``, ``POST /api/chat.update``, ``POST /api/conversations.open`` (JSON bodies),
``GET /api/users.lookupByEmail?email=…`` and ``GET /api/conversations.history?channel=…`` (with message
metadata when ``include_all_metadata`` is true, newest first, from ``oldest`` on), each answered as Slack
documents it (``{"ok": true, …}`` or
``{"ok": false, "error": "…"}``), after checking the bot token (``invalid_auth``) and, for
messages, the Block Kit shape (notifykit.slack_problem: ``invalid_blocks``). A message posted to a
user id goes to that user's direct-message channel (``D…``), as Slack does. ``rate_limit_first``
answers the first calls HTTP 429 with ``Retry-After``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qs, urlsplit

from notifykit import slack_problem

TOKEN = "xoxb-test-0123456789"


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str = ""
    updates: int = 0
    metadata: dict[str, Any] | None = None  # chat.postMessage's message metadata

    @property
    def buttons(self) -> list[dict[str, Any]]:
        return [e for b in self.blocks if b["type"] == "actions" for e in b["elements"]]

    @property
    def all_text(self) -> str:
        parts = [self.text]
        for block in self.blocks:
            if "text" in block:
                parts.append(block["text"]["text"])
            parts += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
        return "\n".join(parts)


@dataclass
class SlackApi:
    users: dict[str, str] = field(default_factory=dict)  # email -> user id
    rate_limit_first: int = 0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (method, body or query)
    stamps: list[float] = field(default_factory=list)  # time.time() each call arrived (as calls)
    messages: dict[tuple[str, str], Message] = field(default_factory=dict)  # (channel, ts) -> message
    post_delay: float = 0.0  # seconds between keeping a posted message and answering (a caller killed meanwhile)

    def __post_init__(self) -> None:
        api = self
        self._lock = threading.Lock()
        self._ts = count(1)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                self._answer(*api.handle(parts.path, self.headers.get("Authorization", ""), query))

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self.headers.get("Content-Type", "").startswith("application/json"):
                    self._answer(200, {"ok": False, "error": "invalid_arg_name"})
                    return
                answer = api.handle(self.path, self.headers.get("Authorization", ""), json.loads(raw))
                if api.post_delay and self.path.endswith("chat.postMessage"):
                    time.sleep(api.post_delay)  # the message is kept already: only the answer is late
                self._answer(*answer)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a caller killed mid-request (the crash tests): nothing to report

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/api"

    def handle(self, path: str, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        method = path.rsplit("/", 1)[-1]
        at = time.time()
        with self._lock:
            self.calls.append((method, body))
            self.stamps.append(at)
            if self.rate_limit_first > 0:
                self.rate_limit_first -= 1
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "0"}
            if auth != f"Bearer {TOKEN}":
                return 200, {"ok": False, "error": "invalid_auth"}, {}
            if method == "users.lookupByEmail":
                user = self.users.get(str(body.get("email", "")))
                return (
                    200,
                    ({"ok": True, "user": {"id": user}} if user else {"ok": False, "error": "users_not_found"}),
                    {},
                )
            if method == "conversations.open":
                user = str(body.get("users", ""))
                if not user.startswith("U") or "," in user:
                    return 200, {"ok": False, "error": "user_not_found"}, {}
                return 200, {"ok": True, "channel": {"id": "D" + user[1:]}}, {}
            if method == "conversations.history":
                return 200, self._history(body), {}
            if method not in ("chat.postMessage", "chat.update"):
                return 200, {"ok": False, "error": "unknown_method"}, {}
            plain = [{"type": "section", "text": {"type": "mrkdwn", "text": body.get("text") or ""}}]
            message = {"text": body.get("text"), "blocks": body.get("blocks") or plain}
            problem = slack_problem(message, need_button=False)
            if problem:
                return 200, {"ok": False, "error": "invalid_blocks", "detail": problem}, {}
            channel = str(body.get("channel", ""))
            if channel.startswith("U"):
                channel = "D" + channel[1:]  # a user's direct messages
            if method == "chat.update":
                found = self.messages.get((channel, str(body.get("ts"))))
                if found is None:
                    return 200, {"ok": False, "error": "message_not_found"}, {}
                found.text, found.blocks = str(body["text"]), list(body.get("blocks") or [])
                found.updates += 1
                return 200, {"ok": True, "channel": channel, "ts": found.ts}, {}
            thread = str(body.get("thread_ts") or "")
            if thread and (channel, thread) not in self.messages:
                return 200, {"ok": False, "error": "thread_not_found"}, {}
            ts = f"{int(time.time())}.{next(self._ts):06d}"  # now, as Slack's ts are; unique here
            metadata = body.get("metadata")
            if metadata is not None and (not isinstance(metadata, dict) or not metadata.get("event_type")):
                return 200, {"ok": False, "error": "invalid_metadata_format"}, {}
            self.messages[(channel, ts)] = Message(
                channel, ts, str(body["text"]), list(body.get("blocks") or []), thread, metadata=metadata
            )
            return 200, {"ok": True, "channel": channel, "ts": ts}, {}

    def _history(self, query: dict[str, Any]) -> dict[str, Any]:
        """conversations.history: the channel's messages since ``oldest``, newest first (the lock is held)."""
        channel, oldest = str(query.get("channel", "")), float(query.get("oldest") or 0)
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        metadata = str(query.get("include_all_metadata", "")).lower() in ("true", "1")
        found = sorted((m for (c, _), m in self.messages.items() if c == channel and float(m.ts) >= oldest),
                       key=lambda m: m.ts, reverse=True)  # fmt: skip
        out = []
        for m in found[: int(query.get("limit") or 100)]:
            item: dict[str, Any] = {"type": "message", "ts": m.ts, "text": m.text}
            if metadata and m.metadata is not None:
                item["metadata"] = m.metadata
            out.append(item)
        return {"ok": True, "messages": out, "has_more": len(found) > len(out)}

    def posted(self, method: str = "chat.postMessage") -> list[dict[str, Any]]:
        with self._lock:
            return [body for name, body in self.calls if name == method]

    def in_channel(self, channel: str) -> list[Message]:
        with self._lock:
            return sorted((m for (c, _), m in self.messages.items() if c == channel), key=lambda m: m.ts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
