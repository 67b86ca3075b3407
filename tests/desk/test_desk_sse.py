"""Live updates (desk/sse.py) across processes: an agent in another process opens a review and
a reviewer decides it; a browser connected to ``desk serve`` hears both over SSE at once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from signoff.audit import CallSpec, Policy, ReviewService, Signer, open_store
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key
from signoff.desk import sse as sse_module
from signoff.desk.sse import Broker, event_of

ROOT = Path(__file__).resolve().parents[2]
REVIEWER = "human:sse@example.org"


def test_event_of_keeps_only_ids_and_short_strings() -> None:
    class E:
        seq, at, actor, kind = 3, "2026-01-01T00:00:00Z", "agent:x", "review.opened"
        body = {
            "review": "rv_1",
            "frontier": "fr_1",
            "deadline": None,
            "call": {"tool": "t", "agent": "a", "session": "s" * 1000, "args": {"secret": "x" * 1000}},
        }

    ev = event_of(E())
    assert ev is not None
    assert {
        k: v
        for k, v in ev.items()
        if k
        not in ("headline", "lead", "purpose", "question", "key_args", "more", "other_args", "lead_parts", "changed")
    } == {
        "type": "opened",
        "seq": 3,
        "review": "rv_1",
        "frontier": "fr_1",
        "tool": "t",
        "agent": "a",
        "session": "s" * 200,  # what tells two like calls apart in the queue, cut
        "opened_at": "2026-01-01T00:00:00Z",
        "deadline": None,
        "needed": 1,  # approvals the review needs (its policy's)
    }
    # The summary's strings are short: the 1000-character argument is cut everywhere.
    assert ev["headline"].startswith("a wants to t: secret: xxx") and len(ev["headline"]) < 100
    assert all(len(k["text"]) <= 80 and len(k["full"]) <= 300 for k in ev["key_args"])
    assert len(json.dumps(ev)) < 1500
    E.kind, E.actor = "review.rejected", "human:bob@example.org"
    assert event_of(E())["type"] == "closed"
    E.kind, E.body = "tool.executed", {"review": "rv_1", "args_digest": "sha256:00", "result_preview": "{}"}
    assert event_of(E()) == {
        "type": "executed",
        "seq": 3,
        "review": "rv_1",
        "args_digest": "sha256:00",
        "result_preview": "{}",
        "at": "2026-01-01T00:00:00Z",
    }
    E.kind, E.body = "review.claimed", {"review": "rv_1", "reviewer": "human:a@example.org", "until": "x" * 500}
    assert event_of(E()) == {
        "type": "claimed",
        "seq": 3,
        "review": "rv_1",
        "reviewer": "human:a@example.org",
        "until": "x" * 32,  # bounded, as every string an event carries
    }
    E.kind, E.body = "policy.set", {"policy": "four-eyes", "tools": "*"}
    assert event_of(E()) is None


def _spec(n: int) -> CallSpec:
    return CallSpec(
        app="a",
        user="u",
        session=f"s{n}",
        invocation="i",
        confirmation_id=f"c{n}",
        call_id=f"k{n}",
        tool="send_email",
        args={"to": "x"},
        agent="mailer",
    )


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[ReviewService, Broker]]:
    """A fresh log's service and a started broker on it (stopped, and the store closed, afterwards)."""
    store = open_store(f"sqlite:///{tmp_path / 'signoff.db'}")
    store.init_log(tmp_path / "log.key")
    svc = ReviewService(store)
    broker = Broker(store, svc)
    broker.start()
    try:
        yield svc, broker
    finally:
        broker.stop()
        store.close()


async def test_broker_sleeps_without_browsers_and_resumes_from_the_subscription(
    live: tuple[ReviewService, Broker],
) -> None:
    svc, broker = live
    store = svc.store
    started_at = broker.size
    for n in range(3):  # nobody listens: the watcher reads none of these
        await asyncio.to_thread(svc.open_frontier, [_spec(n)], actor="agent:mailer")
    await asyncio.sleep(0.3)
    assert broker.size == started_at

    for round_ in range(2):  # a first browser, then another after an idle spell
        stream = broker.stream(heartbeat=5)
        hello = await asyncio.wait_for(stream.__anext__(), 5)
        assert json.loads(hello.split("data: ", 1)[1]) == {"size": store.size()}
        opened = await asyncio.to_thread(svc.open_frontier, [_spec(10 + round_)], actor="agent:mailer")
        frames: list[str] = []
        while not any('"type": "log"' in f for f in frames):  # a chunk holds a burst's frames
            chunk = await asyncio.wait_for(stream.__anext__(), 5)
            frames += [f for f in chunk.split("\n\n") if f.strip()]
        events = [json.loads(f.split("data: ", 1)[1]) for f in frames]
        # Only what happened after the browser connected, none of the idle spell's entries.
        assert [e["review"] for e in events if e["type"] == "opened"] == [opened.reviews[0].id]
        await stream.aclose()
        for n in range(2):
            await asyncio.to_thread(svc.open_frontier, [_spec(20 + 2 * round_ + n)], actor="agent:mailer")


async def test_a_burst_reaches_each_browser_as_one_chunk_of_frames_formatted_once(
    live: tuple[ReviewService, Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three calls paused at once are one burst: each browser gets their frames and the log's new size in
    one chunk (one socket write), and the browsers share each frame's text, formatted once."""
    svc, broker = live
    streams = [broker.stream(heartbeat=5) for _ in range(3)]
    for stream in streams:
        await asyncio.wait_for(stream.__anext__(), 5)  # hello
    formatted: list[str] = []
    plain = sse_module.frame
    monkeypatch.setattr(sse_module, "frame", lambda name, data: formatted.append(name) or plain(name, data))
    front = await asyncio.to_thread(svc.open_frontier, [_spec(30), _spec(31), _spec(32)], actor="agent:mailer")
    chunks = [await asyncio.wait_for(stream.__anext__(), 5) for stream in streams]
    frames = [f for f in chunks[0].split("\n\n") if f.strip()]
    assert [f.split("\n", 1)[0] for f in frames] == ["event: opened"] * 3 + ["event: log"]
    assert [json.loads(f.split("data: ", 1)[1]).get("review") for f in frames[:3]] == [r.id for r in front.reviews]
    assert chunks[1] == chunks[0] == chunks[2]
    assert formatted == ["opened"] * 3 + ["log"]  # once for the three browsers, not once each
    for stream in streams:
        await stream.aclose()


def test_sse_across_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'signoff.db'}"
    store = open_store(url)
    store.init_log(tmp_path / "log.key")
    svc = ReviewService(store)
    reviewer_key = Signer.generate()
    admin = read_private_key(default_admin_key(tmp_path / "log.key"))
    svc.enroll_reviewer(REVIEWER, roles=["ops"], tools=["*"], key=reviewer_key.public, admin=admin)
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    Accounts(make_engine(url), store.log_id).set_password(REVIEWER, "sse password 1", must_change=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "desk", "serve", "--store", url, "--port", str(port), "--quiet"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=0.3).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < end and proc.poll() is None
                time.sleep(0.05)
        c = httpx.Client(base_url=base, timeout=10, headers={"Origin": base})  # as a browser's form sends
        page = c.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        c.post("/signin", data={"csrf": csrf, "email": "sse@example.org", "password": "sse password 1"})
        events: list[tuple[float, dict[str, object]]] = []
        ready = threading.Event()

        def listen() -> None:
            with c.stream("GET", "/events", timeout=15) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                name = ""
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                        if name == "hello":
                            ready.set()
                    elif line.startswith("data: ") and name in ("opened", "closed"):
                        events.append((time.monotonic(), json.loads(line[6:])))
                        if name == "closed":
                            return

        t = threading.Thread(target=listen, daemon=True)
        t.start()
        assert ready.wait(10)
        spec = CallSpec(
            app="a",
            user="u",
            session="s",
            invocation="i",
            confirmation_id="c",
            call_id="k",
            tool="send_email",
            args={"to": "x"},
            agent="mailer",
        )
        opened_at = time.monotonic()
        review = svc.open_frontier([spec], actor="agent:mailer", policies=Policy(role="ops")).reviews[0]
        time.sleep(0.2)
        closed_at = time.monotonic()
        svc.reject(review.id, reviewer=REVIEWER, reason="no", signer=reviewer_key)
        t.join(10)
        assert [e["type"] for _, e in events] == ["opened", "closed"]
        assert events[0][1]["review"] == review.id and events[0][1]["tool"] == "send_email"
        assert events[1][1] == {**events[1][1], "review": review.id, "status": "rejected", "actor": REVIEWER}
        assert events[0][0] - opened_at < 1.0 and events[1][0] - closed_at < 1.0  # push, not slow polling
    finally:
        proc.terminate()
        proc.wait(10)
        store.close()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
