"""The study page's HTML: one document with our own CSS and JavaScript inlined (no CDN, no
network), and for ``report --html`` the data too, so the file stands alone."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parent / "static"


@cache
def _asset(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def _script_json(data: Any) -> str:
    """JSON that is safe inside <script>: no `</script>` or `<!--` can end or bend the tag."""
    text = json.dumps(data, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_html(
    config: dict[str, Any], title: str = "AIR studies", initial: str | None = None
) -> str:
    """The page; ``config``: mode ("live": reads /api/, "file": reads ``inline``), canStop,
    inline ({"studies": [...], "study": {...}, "patches": {n: text}}); ``initial``: a study's
    view as JSON text, drawn before the first poll."""
    first = ""
    if initial is not None:
        safe = initial.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        # JSON.parse of a data block is faster than a 600 KB object literal (1,000 trials)
        first = f"<script id=air-initial type=application/json>{safe}</script>"
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;")
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{safe_title}</title><style>{_asset('study.css')}</style></head>"
        "<body><div id=app><p class=muted>loading…</p></div>"
        f"{first}<script>window.AIR={_script_json(config)};</script>"
        f"<script>{_asset('study.js')}</script></body></html>\n"
    )
