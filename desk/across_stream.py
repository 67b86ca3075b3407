"""One event stream over several logs: each log's own stream (desk/sse.py), its events naming their log.

The queue of a desk serving several logs (desk/across.py) listens to every log where the person reviews.
``after`` is then one size per log (``log_a:120,log_b:7``), as the page was rendered. A stream that ends
(``bye``: signed out, disabled on that log, roles changed) ends them all: the page reloads its lists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence


def parse_after(text: str | None) -> dict[str, int]:
    """``log_a:120,log_b:7`` -> ``{"log_a": 120, "log_b": 7}`` (a malformed part is left out: that log's
    stream then starts from now, as a page without a size does)."""
    found: dict[str, int] = {}
    for part in (text or "").split(","):
        log, _, size = part.partition(":")
        if log and size.isdigit():
            found[log] = int(size)
    return found


def format_after(sizes: dict[str, int]) -> str:
    return ",".join(f"{log}:{size}" for log, size in sizes.items())


async def merged(streams: Sequence[AsyncIterator[str]]) -> AsyncIterator[str]:
    """The chunks of ``streams`` as they come; once one ends, every other is closed and this ends."""
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1_000)

    async def pump(stream: AsyncIterator[str]) -> None:
        try:
            async for chunk in stream:
                await queue.put(chunk)
        finally:
            with contextlib.suppress(asyncio.QueueFull):  # (full: the reader is gone or behind; it ends anyway)
                queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(stream)) for stream in streams]
    try:
        while True:
            chunk = await queue.get()
            if chunk is None:
                return
            yield chunk
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for stream in streams:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
