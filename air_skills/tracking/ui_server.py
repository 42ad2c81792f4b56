"""``air ui``: MLflow's own server app on the default store, behind a per-run token.

MLflow's server answers whoever reaches its port, and a job may share the host's loopback: any
job could rewrite any run there. So ``air ui`` serves MLflow's app in its own process behind
``air_skills.web_guard`` (every request needs the token printed in the URL; a state change must
come from the UI's own origin). One process, no worker: SIGTERM or Ctrl-C ends it all.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air_skills.errors import InvalidInput
from air_skills.web_guard import TokenGuard, new_token

HOW_TO = "open the URL `air ui` printed (it carries ?token=...)"


def mlflow_app(tracking_uri: str, artifacts: Path) -> Any:
    """MLflow's server app (the one ``mlflow ui`` serves with uvicorn) on ``tracking_uri``,
    configured as ``mlflow ui`` configures its workers: through the server's variables."""
    from mlflow.server import constants as c
    from mlflow.utils.server_cli_utils import resolve_default_artifact_root

    os.environ.update(
        {
            c.BACKEND_STORE_URI_ENV_VAR: tracking_uri,
            c.REGISTRY_STORE_URI_ENV_VAR: tracking_uri,
            c.ARTIFACT_ROOT_ENV_VAR: resolve_default_artifact_root(True, "", tracking_uri),
            c.SERVE_ARTIFACTS_ENV_VAR: "true",
            c.ARTIFACTS_DESTINATION_ENV_VAR: str(artifacts),
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no job-runner processes
            "_MLFLOW_IN_JOB_EXECUTOR": "false",
            "_MLFLOW_SGI_NAME": "uvicorn",
            "_MLFLOW_SERVER_BOOT_ID": uuid.uuid4().hex,
        }
    )
    import warnings

    with warnings.catch_warnings():  # MLflow's own import of a deprecated Starlette module
        warnings.simplefilter("ignore")
        from mlflow.server.fastapi_app import app

    return app


def serve_ui(
    tracking_uri: str,
    artifacts: Path,
    host: str = "127.0.0.1",
    port: int = 5000,
    announce: Callable[[str], Any] = print,
    token: str | None = None,
) -> None:
    """Serve the UI until SIGTERM or Ctrl-C; ``announce`` gets the URL with its token."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(
            f"cannot serve the MLflow UI on {host}:{port}: {exc.strerror}",
            hint=f"pass another port: air ui --port {port + 1}",
        ) from None
    sock.listen(128)
    token = token or new_token()
    shown = f"[{host}]" if ":" in host else host
    announce(f"http://{shown}:{port}/?token={token}")  # the port is held: it answers soon
    app = TokenGuard(
        mlflow_app(tracking_uri, artifacts), tokens=[token], bind_host=host, how_to=HOW_TO
    )
    # access_log off: a ?token= query must never reach a log line
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])
