"""Ray's Jobs SDK behind one door: connect (cached, with timeouts), call, and its errors."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from air_skills.errors import AirError, BackendUnavailable

EXTRA = "pip install 'air-skills[ray]'"
# Without RAY_ADDRESS or a saved address: a head on this machine. (Not Ray's auto-detection,
# which waits 40 s on a stale /tmp/ray/ray_current_cluster.)
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# (connect, read) seconds for each call to the dashboard: a blackholed address fails fast.
HTTP_TIMEOUT_S = (5.0, 120.0)


def _sdk() -> Any:
    """JobSubmissionClient, or a clear error naming the extra to install."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend 'ray' needs Ray, which is not installed here ({exc})",
            hint=f"{EXTRA}, or launch with backend 'local'",
            retryable=False,
        ) from None
    # Ray's SDK narrates each upload at INFO on stderr; our messages say what matters.
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return JobSubmissionClient


_CHATTY_LOGGERS = (
    "ray.dashboard.modules.job.sdk",
    "ray.dashboard.modules.dashboard_sdk",
    "ray._private.runtime_env.packaging",
    "ray._private.runtime_env.working_dir",
)


_CLIENT_CLASSES: dict[Any, Any] = {}
_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client_class(base: Any) -> Any:
    cls = _CLIENT_CLASSES.get(base)
    if cls is None:

        class TimedJobSubmissionClient(base):  # type: ignore[misc, valid-type]
            """Ray's client with a timeout on every request (Ray's own has none)."""

            def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
                kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
                return super()._do_request(method, endpoint, **kwargs)

        cls = _CLIENT_CLASSES[base] = TimedJobSubmissionClient
    return cls


def env_address() -> str | None:
    return os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or None


def short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[-1] if lines and lines[0].startswith("Request failed") else ""
    text = text or (lines[0] if lines else type(exc).__name__)
    return text[:300]


def is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - requests comes with ray[default]
        return False
    return isinstance(exc, requests.exceptions.RequestException)


def unavailable(address: str | None, exc: BaseException) -> AirError:
    shown = address or DEFAULT_ADDRESS
    if type(exc).__name__ == "AuthenticationError":
        return BackendUnavailable(
            f"the Ray cluster at {shown} refused our credentials: {short(exc)}",
            hint="set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the"
            " cluster's token",
            retryable=False,
            address=shown,
        )
    hint = (
        "check that the head is up (`ray status` on it) and that RAY_ADDRESS (or the address"
        " saved with `python -m air_skills.backends.ray config --address URL`) is its"
        " dashboard, http://HEAD:8265; then retry"
    )
    return BackendUnavailable(
        f"the Ray cluster at {shown} cannot be reached: {short(exc)}",
        hint=hint,
        address=shown,
    )


def connect(address: str) -> Any:
    """A (cached) JobSubmissionClient for the dashboard at ``address``."""
    base = _sdk()
    key = address
    with _CLIENTS_LOCK:
        cached = _CLIENTS.get(key)
    if cached is not None:
        return cached
    try:
        client = _client_class(base)(address=address)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError alike
        raise unavailable(address, exc) from None
    with _CLIENTS_LOCK:
        _CLIENTS[key] = client
    return client


def forget(client: Any) -> None:
    """Drop a client that failed to connect: the next call connects (and checks) afresh."""
    with _CLIENTS_LOCK:
        for key in [k for k, v in _CLIENTS.items() if v is client]:
            del _CLIENTS[key]


def call(client: Any, fn: str, *args: Any, **kwargs: Any) -> Any:
    """One SDK call; connection problems become a retryable BackendUnavailable."""
    try:
        return getattr(client, fn)(*args, **kwargs)
    except Exception as exc:
        if is_connection_error(exc) or type(exc).__name__ == "AuthenticationError":
            forget(client)
            raise unavailable(client.get_address(), exc) from None
        raise


def not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "404" in text or "does not exist" in text
