"""MLflow's REST API over urllib: a run made on a tracking server without importing MLflow.

A launch that talks to an ``http(s)://`` tracking server creates the job's run here in a few
milliseconds (MLflow's own client would cost the launching process a second or more to
import). Only MLflow's documented endpoints (``/api/2.0/mlflow/...``) are used; credentials
come from MLflow's own variables (MLFLOW_TRACKING_TOKEN, or _USERNAME and _PASSWORD) or the
URI's user part. Any failure is TrackingUnavailable: the job runs all the same.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
from typing import Any

from air_skills.errors import TrackingUnavailable

TIMEOUT_S = 3.0  # a server that is down is named at once (MLflow itself retries for minutes)


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _split(uri: str) -> tuple[str, dict[str, str]]:
    """(the base URL without credentials, the auth header for them)."""
    parts = urllib.parse.urlsplit(uri.rstrip("/"))
    headers: dict[str, str] = {}
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    user = os.environ.get("MLFLOW_TRACKING_USERNAME") or parts.username
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD") or parts.password
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif user:
        pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")), headers


def call(uri: str, endpoint: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST ``body`` (or GET with none) to ``/api/2.0/mlflow/<endpoint>``; the JSON reply."""
    import urllib.error  # here: urllib.request (ssl, http.client) costs a launch 20 ms
    import urllib.request

    base, headers = _split(uri)
    url = f"{base}/api/2.0/mlflow/{endpoint}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            out: dict[str, Any] = json.loads(reply.read() or b"{}")
            return out
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read() or b"{}")
        except ValueError:
            error = {}
        raise RestError(exc.code, str(error.get("error_code") or ""), str(error)) from None


class RestError(Exception):
    """The server answered with an error (``code``: MLflow's error_code, e.g.
    RESOURCE_DOES_NOT_EXIST)."""

    def __init__(self, status: int, code: str, text: str) -> None:
        super().__init__(f"HTTP {status} {code}: {text[:200]}")
        self.status = status
        self.code = code


def experiment_id(uri: str, name: str) -> str:
    """The experiment's id, created (or restored) when needed."""
    query = urllib.parse.urlencode({"experiment_name": name})
    try:
        exp = call(uri, f"experiments/get-by-name?{query}")["experiment"]
    except RestError as exc:
        if exc.code != "RESOURCE_DOES_NOT_EXIST":
            raise
        try:
            return str(call(uri, "experiments/create", {"name": name})["experiment_id"])
        except RestError as again:  # made by another launch between our read and our write
            if again.code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = call(uri, f"experiments/get-by-name?{query}")["experiment"]
    if exp.get("lifecycle_stage") == "deleted":
        call(uri, "experiments/restore", {"experiment_id": exp["experiment_id"]})
    return str(exp["experiment_id"])


def create_run(uri: str, experiment: str, *, name: str, tags: dict[str, str]) -> tuple[str, str]:
    """A new RUNNING run in ``experiment`` (its name); returns (run_id, experiment_id)."""
    try:
        exp_id = experiment_id(uri, experiment)
        run = call(
            uri,
            "runs/create",
            {
                "experiment_id": exp_id,
                "run_name": name,
                "start_time": int(time.time() * 1000),
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
        )
        return str(run["run"]["info"]["run_id"]), exp_id
    except (OSError, ValueError, KeyError, RestError) as exc:
        raise TrackingUnavailable(
            f"MLflow server {shown(uri)} unreachable: {str(exc)[:200]}",
            hint="start the tracking server or fix MLFLOW_TRACKING_URI; jobs still run",
        ) from None


def live_runs(uri: str, run_ids: list[str]) -> set[str]:
    """Those of ``run_ids`` that can still take metrics (SCHEDULED or RUNNING, run and
    experiment active)."""
    out = set()
    for run_id in run_ids:
        try:
            info = call(uri, f"runs/get?{urllib.parse.urlencode({'run_id': run_id})}")
            info = info["run"]["info"]
            exp = call(uri, f"experiments/get?experiment_id={info['experiment_id']}")
        except (OSError, ValueError, KeyError, RestError):
            continue
        if (
            info.get("status") in ("SCHEDULED", "RUNNING")
            and info.get("lifecycle_stage") == "active"
            and exp["experiment"].get("lifecycle_stage") == "active"
        ):
            out.add(run_id)
    return out


def shown(uri: str) -> str:
    """The URI without credentials (never printed)."""
    base, _ = _split(uri)
    return base
