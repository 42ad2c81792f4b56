"""The study page's big replies (a view's JSON, the page with its first screen) made and
gzipped once per version of the view, not once per request; gzipped for a client that says it
accepts it (a 1,000-trial view: ~600 KB of JSON, ~46 KB gzipped)."""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from starlette.requests import Request
from starlette.responses import Response

KEEP = 16  # replies kept (a few studies, a few versions each)
MIN_BYTES = 1024  # below this, gzip saves too little to spend the CPU
LEVEL = 5  # ~4x smaller JSON at a few ms for 600 KB; 9 costs about twice that for 5% more


def accepts_gzip(request: Request) -> bool:
    """Whether the request's Accept-Encoding takes gzip (not with q=0)."""
    for part in (request.headers.get("accept-encoding") or "").split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.replace(" ", "").lower()
            return q not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


class Replies:
    """Reply bodies by key (what and its version), made at most once while kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[Hashable, bytes] = OrderedDict()

    def _get(self, key: Hashable, make: Callable[[], bytes]) -> bytes:
        with self._lock:
            body = self._kept.get(key)
            if body is not None:
                self._kept.move_to_end(key)
                return body
        body = make()  # outside the lock: two threads may both make it, once
        with self._lock:
            self._kept[key] = body
            while len(self._kept) > KEEP:
                self._kept.popitem(last=False)
        return body

    def reply(
        self,
        request: Request,
        key: Hashable,
        make: Callable[[], bytes],
        media_type: str,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """The body of ``key`` (``make`` makes it), gzipped when the client takes it."""
        headers = {**(headers or {}), "vary": "accept-encoding"}
        body = self._get((key, False), make)
        if len(body) >= MIN_BYTES and accepts_gzip(request):
            body = self._get((key, True), lambda: gzip.compress(body, LEVEL, mtime=0))
            headers["content-encoding"] = "gzip"
        return Response(body, headers=headers, media_type=media_type)
