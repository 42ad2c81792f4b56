"""``autoresearch serve``: the study page on uvicorn, and ``report --html``'s one-file page."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput
from air_skills.web_guard import is_loopback, new_token
from autoresearch.report.summary import trial_outputs
from autoresearch.web.app import build_app
from autoresearch.web.data import StudyIndex, study_view
from autoresearch.web.page import page_html

HTML_REPORT = "report.html"
SHUTDOWN_S = 2  # open event streams are cut after this on shutdown


MCP_TOKEN_FILE = "mcp-token"  # air-mcp's generated token in AIR_HOME (mcp_server/auth.py)


def server_token(host: str) -> tuple[str | None, str]:
    """(token, where it is), as ``air-mcp`` over HTTP finds it: AIR_MCP_TOKEN, else the
    owner-only AIR_HOME/mcp-token that air-mcp made. A bind beyond loopback without one is
    refused; a token file others could read is not used (its token may be known)."""
    import os
    import stat

    from air_skills import settings
    from air_skills.home import default_home

    token = settings.get("AIR_MCP_TOKEN")
    if token:
        return token, "AIR_MCP_TOKEN"
    path = default_home() / MCP_TOKEN_FILE
    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077:
            text = path.read_text(encoding="utf-8").strip()
            if text:
                return text, f"the token in {path}"
    except OSError:
        pass
    if not is_loopback(host):
        raise InvalidInput(
            f"the study page would listen on {host} without a token",
            hint="set AIR_MCP_TOKEN to a secret (or start `air-mcp --transport http` once: it"
            " writes AIR_HOME/mcp-token) and open the page with ?token=..., or bind 127.0.0.1",
        )
    return None, ""


def serve(
    roots: list[Path],
    host: str = "127.0.0.1",
    port: int = 8765,
    mlflow_url: str | None = "http://127.0.0.1:5000",
    announce: Callable[[str], Any] = print,
) -> None:
    """Serve the studies under ``roots`` (default ./studies) until interrupted."""
    import uvicorn

    token, source = server_token(host)
    # the page's own token, made here and printed in its URL: the owner's token is accepted
    # too but never printed
    page_token = new_token()
    index = StudyIndex(list(roots), mlflow_url=mlflow_url)  # none: the defaults, each time
    tokens = [page_token, token] if token else [page_token]
    app = build_app(index, tokens=tokens, can_stop=token is not None, bind_host=host)
    from air_skills.listen import listen

    sock = listen(host, port, "the study page", other_port=port + 2)  # before any URL is said
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/?token={page_token}"
    where = ", ".join(str(r) for r in roots) or "./studies, AIR_HOME/studies and the registry"
    announce(f"study page: {url} (studies under {where}; Ctrl-C to stop)")
    if token:
        announce(f"also accepted: {source} (as ?token=... or Authorization: Bearer); stop is on")
    # access_log off: a ?token= query must never reach a log line
    # an open event stream does not hold the server up on Ctrl-C for longer than that
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=SHUTDOWN_S)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


class BackgroundPage:
    """The study page served from a thread of this process (``autoresearch demo``): ``url``
    (with its token) while it runs; ``stop()`` ends it. Loopback only, read-only."""

    def __init__(self, roots: list[Path], port: int = 8765, tries: int = 20) -> None:
        import socket
        import threading

        import uvicorn

        index = StudyIndex(roots)
        self.token = new_token()
        app = build_app(index, tokens=[self.token], bind_host="127.0.0.1")
        for candidate in range(port, port + tries):  # the next free port when one is taken
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", candidate))
                break
            except OSError:
                sock.close()
        else:
            raise InvalidInput(f"ports {port}-{port + tries - 1} are all taken",
                               hint="free one, or pass another port")  # fmt: skip
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=SHUTDOWN_S
        )
        self.server = uvicorn.Server(config)
        self.base = f"http://127.0.0.1:{candidate}/"
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True, name="study-page"
        )
        sock.listen(128)  # connections wait in the backlog until the thread serves them
        self._thread.start()
        deadline = time.monotonic() + 10.0
        while not self.server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def url(self, path: str = "") -> str:
        """The page at ``path`` (e.g. ``studies/NAME``), with the token that opens it."""
        return f"{self.base}{path}?token={self.token}"

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=5)


def write_html(study_dir: Path | str, out: Path | str | None = None) -> Path:
    """The study page as one self-contained file (data, patches, CSS and JS inlined)."""
    from autoresearch.report.report import load_state

    folder = Path(study_dir).expanduser().resolve()
    study, state = load_state(folder)
    view = study_view(study.name, folder, study, state)
    patches = {t.number: t.patch for t in state.trials.values() if t.patch}
    outputs = {t.number: o for t in state.trials.values() if (o := trial_outputs(t))}
    inline = {"study": view, "patches": patches, "outputs": outputs}
    config = {"mode": "file", "canStop": False, "inline": inline}
    path = Path(out) if out else folder / HTML_REPORT
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(page_html(config, title=f"{study.name}: study report"), encoding="utf-8")
    os.replace(tmp, path)
    return path
