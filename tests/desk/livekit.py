"""A desk app served by uvicorn in a thread of the test process, for tests that need a real HTTP
server (event streams, Chromium) on a store the test prepares itself (deskkit.make_env)."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: Any, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` (on ``port``, else a free one); yield its base URL."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="desk-test-server", daemon=True)
    thread.start()
    end = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < end and thread.is_alive(), "the test server did not start"
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def signed_in(base: str, email: str, password: str) -> httpx.Client:
    """An HTTP client signed in through the form, sending ``Origin`` as a browser does."""
    c = httpx.Client(base_url=base, timeout=10, headers={"Origin": base})
    page = c.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    r = c.post("/signin", data={"csrf": csrf, "email": email, "password": password})
    assert r.status_code == 303, (r.status_code, r.text[:300])
    return c


class Stream:
    """One ``/events`` stream read in a thread: its events, and when it ended."""

    def __init__(self, client: httpx.Client, path: str = "/events") -> None:
        self.events: list[tuple[str, str]] = []
        self.hello = threading.Event()
        self.ended = threading.Event()
        self.ended_at = 0.0
        self._thread = threading.Thread(target=self._read, args=(client, path), daemon=True)
        self._thread.start()
        assert self.hello.wait(10), "the stream never said hello"

    def _read(self, client: httpx.Client, path: str) -> None:
        try:
            with client.stream("GET", path, timeout=30) as r:
                name = ""
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                        if name == "hello":
                            self.hello.set()
                    elif line.startswith("data: "):
                        self.events.append((name, line[6:]))
        except httpx.HTTPError:
            pass
        finally:
            self.ended_at = time.monotonic()
            self.ended.set()

    def names(self) -> list[str]:
        return [n for n, _ in self.events]
