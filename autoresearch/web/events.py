"""The study page's live updates as server-sent events: ``view`` (the whole view, when the
journal changed) and ``live`` (running trials, GPUs, cost and budget, when only they moved).

The server looks at the journal's size and mtime every CHECK_S (a stat: nothing is read until
it changes), so a change reaches the page within about CHECK_S plus the time to make the view.
A stream ends after STREAM_S; the browser's EventSource then connects again by itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool

from air_skills.errors import AirError
from autoresearch.web.data import StudyIndex

CHECK_S = 0.4
HEARTBEAT_S = 15.0
STREAM_S = 300.0
RETRY_MS = 1000  # how soon the browser connects again after a stream ends


def _event(name: str, data: bytes) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


async def study_events(index: StudyIndex, key: str, since: str | None) -> AsyncIterator[bytes]:
    """The events of one study's page, whose view is at version ``since``."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    sent, static = since, None
    beat = end = time.monotonic()
    end += STREAM_S
    while time.monotonic() < end:
        try:
            parts = await run_in_threadpool(index.view_parts, key)
        except (AirError, OSError) as exc:  # a journal being replaced: look again
            yield _event("problem", str(exc).encode())
            parts = None
        if parts is not None and parts.version != sent:
            if static == parts.static_version:
                yield _event("live", parts.live_event())
            else:
                yield _event("view", parts.body)
            sent, static, beat = parts.version, parts.static_version, time.monotonic()
        elif parts is not None and static is None:
            static = parts.static_version  # the page holds this view already
        if time.monotonic() - beat > HEARTBEAT_S:
            yield b": ping\n\n"  # keeps proxies from closing a quiet stream
            beat = time.monotonic()
        await asyncio.sleep(CHECK_S)
