"""The Ray backend: the same job specs on a Ray cluster, through Ray's Jobs API.

A job with ``backend: ray`` is submitted with ``ray.job_submission.JobSubmissionClient`` to
the cluster at ``RAY_ADDRESS`` (else the address set in AIR_HOME). Its record lives in our
store like a local job's, holding ``backend_ref = "<submission id>@<dashboard URL>"``, and is
reconciled against Ray's ``list_jobs`` on each client call:

    Ray PENDING   -> QUEUED     (waiting for GPUs; resubmitted if Ray gives up after 15 min)
    Ray RUNNING   -> RUNNING
    Ray SUCCEEDED -> SUCCEEDED
    Ray FAILED    -> FAILED     (user: the command failed; infra: Ray could not run it)
    Ray STOPPED   -> CANCELLED  (TIMED_OUT when we stopped it for its timeout_min)
    (gone)        -> FAILED     (infra: deleted behind our back, or the cluster restarted)

A cluster that cannot be reached raises a retryable ``BackendUnavailable`` and never marks a
job failed. Settings (``python -m air_skills.backends.ray config``): ``backend`` (the default
for specs that do not name one), ``ray_address``, ``ray_job_root``, ``ray_max_node_gpus``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from air_skills.errors import (
    AirError,
    BackendUnavailable,
    InsufficientGpus,
    InvalidInput,
    InvalidSpec,
    InvalidState,
    NotFound,
)
from air_skills.models import JobInfo, JobSpec
from air_skills.runtime.launch_env import thread_caps
from air_skills.runtime.passes import MAX_INFRA_RETRIES
from air_skills.runtime.store import row_to_info
from air_skills.status import JobStatus

if TYPE_CHECKING:
    import sqlite3

    from air_skills.client import Client
    from air_skills.runtime.store import Store

EXTRA = "pip install 'air-skills[ray]'"
# Without RAY_ADDRESS or a saved address: a head on this machine. (Not Ray's auto-detection,
# which waits 40 s on a stale /tmp/ray/ray_current_cluster.)
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
SETTINGS = ("backend", "ray_address", "ray_job_root", "ray_max_node_gpus")
# The job folder on a cluster that is not this machine (config, checkpoints, data links).
DEFAULT_REMOTE_JOB_ROOT = "/tmp/air-skills/jobs"
# A record whose submission is not visible on Ray yet is left alone this long.
SUBMIT_GRACE_S = 60.0
# (connect, read) seconds for each call to the dashboard: a blackholed address fails fast.
HTTP_TIMEOUT_S = (5.0, 120.0)
# How long `cancel` waits for Ray to report the job stopped (Ray: SIGTERM, SIGKILL after 3 s).
STOP_WAIT_S = 15.0
# The job's config travels in an environment variable; keep it far below Linux's 128 KiB.
MAX_CONFIG_BYTES = 96 * 1024
# Tests lower this to check the refusal without writing hundreds of MiB; None: Ray's limit.
WORKING_DIR_LIMIT_BYTES: int | None = None
FALLBACK_PACKAGE_LIMIT_BYTES = 512 * 1024 * 1024  # GCS_STORAGE_MAX_SIZE in Ray 2.60
FALLBACK_BODY_LIMIT_BYTES = 100 * 1024 * 1024  # DASHBOARD_CLIENT_MAX_SIZE in Ray 2.60
_UNREACHABLE_NOTE = re.compile(r" \[Ray (unreachable|cluster) .*\]$", re.S)  # our note, last


# --- talking to Ray ------------------------------------------------------------------------


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


def _env_address() -> str | None:
    return os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or None


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[-1] if lines and lines[0].startswith("Request failed") else ""
    text = text or (lines[0] if lines else type(exc).__name__)
    return text[:300]


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - requests comes with ray[default]
        return False
    return isinstance(exc, requests.exceptions.RequestException)


def _unavailable(address: str | None, exc: BaseException) -> AirError:
    shown = address or DEFAULT_ADDRESS
    if type(exc).__name__ == "AuthenticationError":
        return BackendUnavailable(
            f"the Ray cluster at {shown} refused our credentials: {_short(exc)}",
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
        f"the Ray cluster at {shown} cannot be reached: {_short(exc)}",
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
        raise _unavailable(address, exc) from None
    with _CLIENTS_LOCK:
        _CLIENTS[key] = client
    return client


def _forget(client: Any) -> None:
    """Drop a client that failed to connect: the next call connects (and checks) afresh."""
    with _CLIENTS_LOCK:
        for key in [k for k, v in _CLIENTS.items() if v is client]:
            del _CLIENTS[key]


def _call(client: Any, fn: str, *args: Any, **kwargs: Any) -> Any:
    """One SDK call; connection problems become a retryable BackendUnavailable."""
    try:
        return getattr(client, fn)(*args, **kwargs)
    except Exception as exc:
        if _is_connection_error(exc) or type(exc).__name__ == "AuthenticationError":
            _forget(client)
            raise _unavailable(client.get_address(), exc) from None
        raise


def _not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "404" in text or "does not exist" in text


def _local_ips() -> set[str]:
    ips = {"127.0.0.1", "::1", "localhost"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            ips.update(a.address.split("%")[0] for a in addrs)
    except Exception:
        pass
    return ips


@dataclass
class ClusterView:
    """What the cluster offers, read from the dashboard's REST API (no ray.init needed)."""

    address: str
    nodes: list[dict[str, Any]] = field(default_factory=list)  # ALIVE nodes
    used: dict[str, float] = field(default_factory=dict)  # from the autoscaler's report
    known: bool = True  # False when the dashboard would not say

    def total(self, resource: str) -> float:
        return sum(n.get("resources_total", {}).get(resource, 0.0) for n in self.nodes)

    def largest_node(self, resource: str) -> float:
        return max((n.get("resources_total", {}).get(resource, 0.0) for n in self.nodes), default=0)

    def free(self, resource: str) -> float | None:
        if resource not in self.used:
            return None
        return max(0.0, self.total(resource) - self.used[resource])

    @property
    def on_this_host(self) -> bool:
        host = urlsplit(self.address).hostname or ""
        ips = _local_ips()
        if self.nodes:
            return all(n.get("node_ip") in ips for n in self.nodes)
        return host in ips

    def describe(self) -> str:
        if not self.known:
            return "resources unknown (the dashboard's state API did not answer)"
        gib = self.total("memory") / 2**30
        per_node = ", ".join(
            f"{int(n.get('resources_total', {}).get('GPU', 0))}" for n in self.nodes[:8]
        )
        more = ", ..." if len(self.nodes) > 8 else ""
        return (
            f"{len(self.nodes)} node(s): {_num(self.total('CPU'))} CPU, "
            f"{_num(self.total('GPU'))} GPU (per node: {per_node}{more}), {gib:.1f} GiB memory"
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def cluster_view(client: Any) -> ClusterView:
    address = client.get_address()
    view = ClusterView(address=address)
    try:
        r = client._do_request("GET", "/api/v0/nodes?detail=1&limit=10000")
        nodes = r.json()["data"]["result"]["result"] if r.status_code == 200 else None
    except Exception as exc:
        if _is_connection_error(exc):
            _forget(client)
            raise _unavailable(address, exc) from None
        nodes = None
    if nodes is None:
        view.known = False
        return view
    view.nodes = [n for n in nodes if n.get("state") == "ALIVE"]
    with contextlib.suppress(Exception):
        r = client._do_request("GET", "/api/cluster_status")
        usage = r.json()["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
        view.used = {k: float(v[0]) for k, v in usage.items() if isinstance(v, list) and v}
    return view


# --- the working_dir package -------------------------------------------------------------------


def package_limit_bytes() -> int:
    """Ray's limit for a working_dir uploaded through the Jobs API.

    The smaller of the dashboard's request body limit (the package is one HTTP PUT: 100 MiB
    in Ray 2.60) and the GCS's gRPC message size, where it is stored (512 MiB).
    """
    if WORKING_DIR_LIMIT_BYTES is not None:
        return WORKING_DIR_LIMIT_BYTES
    limits = [FALLBACK_PACKAGE_LIMIT_BYTES]
    try:
        from ray._private.ray_constants import DASHBOARD_CLIENT_MAX_SIZE

        limits.append(int(DASHBOARD_CLIENT_MAX_SIZE))
    except Exception:
        limits.append(FALLBACK_BODY_LIMIT_BYTES)
    try:
        from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE

        limits.append(int(GCS_STORAGE_MAX_SIZE))
    except Exception:
        pass
    return min(limits)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def working_dir_problem(workdir: str) -> str | None:
    """Why Ray would refuse ``workdir`` as a working_dir package, or None if it fits.

    Walks it as Ray does (its default excludes, .gitignore and .rayignore respected). Ray
    stores the files in the zip uncompressed, so their sizes (plus zip headers) are the
    package's size.
    """
    limit = package_limit_bytes()
    root = Path(workdir).absolute()
    sizes: dict[str, int] = {}

    def count(path: Path) -> None:
        if path == root:
            return
        rel = path.relative_to(root)
        size = 76 + 2 * len(str(rel).encode())  # local header + central directory entry
        if path.is_file() and not path.is_symlink():
            size += path.stat().st_size
        sizes[rel.parts[0]] = sizes.get(rel.parts[0], 0) + size

    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    try:
        from ray._private.ray_constants import get_runtime_env_default_excludes
        from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

        excludes = get_runtime_env_default_excludes()  # .git, .venv, venv, __pycache__
        _dir_travel(
            root, [_get_excludes(root, excludes)], count, include_gitignore=include_gitignore
        )
    except ImportError:  # Ray moved its helpers: count everything
        for dirpath, _, files in os.walk(root):
            for name in files:
                count(Path(dirpath) / name)
    total = sum(sizes.values())
    if total < limit:
        return None
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    return (
        f"workdir {root} makes a {_mib(total)} package, over Ray's {_mib(limit)} limit for a"
        " working_dir (Ray zips it uncompressed); largest entries: "
        + ", ".join(f"{name} ({_mib(n)})" for name, n in biggest)
    )


# --- references, folders, locks -------------------------------------------------------------


def submission_id(job_id: str, idempotency_key: str | None, attempt: int = 1) -> str:
    """Ray submission id: from the idempotency key when there is one, so retries dedupe."""
    if idempotency_key:
        if re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", idempotency_key):
            base = f"air-key-{idempotency_key}"
        else:
            base = "air-key-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    else:
        base = f"air-{job_id}"
    return base if attempt <= 1 else f"{base}-a{attempt}"


def split_ref(ref: str | None) -> tuple[str | None, str | None]:
    if not ref or "@" not in ref:
        return None, None
    sid, address = ref.split("@", 1)
    return sid, address


@contextlib.contextmanager
def _job_lock(job_dir: Path, block: bool = True, name: str = "ray.lock") -> Iterator[bool]:
    """One process at a time submits, settles or stops a given Ray job (or syncs its log)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir / name, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _without_note(message: str) -> str:
    return _UNREACHABLE_NOTE.sub("", message)


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


# --- the backend ----------------------------------------------------------------------------


class RayBackend:
    """Submit, reconcile, stop and read logs of jobs on Ray, for one ``Client``."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.home: Path = client.home

    @property
    def store(self) -> Store:
        return self.client.store

    def _reread(self, job_id: str) -> sqlite3.Row:
        row = self.store.row(job_id)
        if row is None:  # records are never deleted; this is a broken AIR_HOME
            raise NotFound(f"no job {job_id!r}", hint="list jobs with `air ls`", job_id=job_id)
        return row

    def address(self) -> str:
        """Where new jobs go: RAY_API_SERVER_ADDRESS / RAY_ADDRESS, else AIR_HOME's setting,
        else a head on this machine at Ray's default dashboard port."""
        return _env_address() or self.store.setting("ray_address") or DEFAULT_ADDRESS

    # --- launching --------------------------------------------------------------------------

    def launch(self, spec: JobSpec, dry_run: bool = False) -> JobInfo:
        address = self.address()
        ray = connect(address)
        cluster = cluster_view(ray)
        dashboard = ray.get_address()
        self._check(spec, cluster)
        name = spec.name or Path(spec.command[0]).name
        if dry_run:
            return JobInfo(
                job_id="dry-run",
                name=name,
                status=JobStatus.QUEUED,
                message=(
                    f"DRY RUN: would submit {spec.command!r} from {spec.workdir} to the Ray"
                    f" cluster at {dashboard} with {spec.gpus} GPU(s) and"
                    f" {spec.cpus or 1} CPU(s); cluster: {cluster.describe()}; nothing was"
                    " launched"
                ),
                priority=spec.priority,
                created_at=datetime.now(UTC),
                backend="ray",
                project=spec.project or "default",
            )
        existing = self.client.existing(spec)
        if existing is not None:
            return existing
        # Upload first: a failed upload leaves no record behind, and the window between
        # recording the submission and Ray knowing it is one short request.
        runtime_env: dict[str, Any] = {"working_dir": spec.workdir}
        self._upload(ray, dashboard, runtime_env)

        job = self.client.prepare(spec, tags={"air.backend": "ray"})
        job_id, jdir, run_id = job.job_id, job.jdir, job.run_id
        job.log_path.touch()
        note = f" ({job.tracking_note})" if job.tracking_note else ""
        got, created = self.store.queue(
            spec,
            job_id,
            str(job.log_path),
            job.name,
            run_id,
            job.experiment_id,
            f"QUEUED: submitting to the Ray cluster at {dashboard}{note}",
        )
        if not created:  # a concurrent caller with the same idempotency key won
            self.client._discard(jdir, run_id)
            return self.client.get(got)
        row = self._reread(job_id)
        sid = submission_id(job_id, spec.idempotency_key)
        with _job_lock(jdir):
            self.store.set_backend_ref(job_id, f"{sid}@{dashboard}")
            self._submit(ray, row, spec, sid, cluster, runtime_env, note)
        return row_to_info(self._reread(job_id))

    def _check(self, spec: JobSpec, cluster: ClusterView) -> None:
        problems: list[str] = []
        cpus = spec.cpus or 1
        if cluster.known:
            override = self.store.setting("ray_max_node_gpus")
            node_gpus = float(override) if override else cluster.largest_node("GPU")
            if spec.gpus > node_gpus:
                total = cluster.total("GPU")
                where = (
                    f"the largest node has {_num(node_gpus)}"
                    if total > node_gpus
                    else f"the cluster has {_num(total)} in total"
                )
                raise InsufficientGpus(
                    f"the job asks for {spec.gpus} GPUs but on the Ray cluster at"
                    f" {cluster.address} {where} ({cluster.describe()}); a Ray job's"
                    " entrypoint runs on one node, and Ray would leave it PENDING and fail it"
                    " after 15 minutes",
                    hint=f"ask for at most {_num(node_gpus)} GPUs, or add GPU nodes; on an"
                    " autoscaling cluster whose GPU nodes are not up yet, set"
                    " `python -m air_skills.backends.ray config --max-node-gpus N`",
                    requested=spec.gpus,
                    available=node_gpus,
                )
            if cpus > cluster.largest_node("CPU"):
                problems.append(
                    f"cpus: {cpus} asked, but the largest node has"
                    f" {_num(cluster.largest_node('CPU'))} ({cluster.describe()})"
                )
        local = cluster.on_this_host if cluster.known else False
        if spec.data and not local:
            problems.append(
                "data: data inputs are paths on this machine, and the Ray cluster is not;"
                " put the data on storage the cluster mounts and pass its path in config or env"
            )
        if spec.track and not local:
            from air_skills.tracking.mlflow import tracking_uri

            uri = tracking_uri(self.home)
            if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
                problems.append(
                    f"track: the MLflow store {uri} is a file on this machine, which jobs on the"
                    " Ray cluster cannot reach; set MLFLOW_TRACKING_URI to a server they can"
                    " (mlflow server), or launch with track: false"
                )
        config_bytes = len(json.dumps(spec.config))
        if config_bytes > MAX_CONFIG_BYTES:
            problems.append(
                f"config: {config_bytes} bytes of JSON; on Ray it travels in an environment"
                f" variable, at most {MAX_CONFIG_BYTES}: pass large inputs as files"
            )
        too_big = working_dir_problem(spec.workdir or os.getcwd())
        if too_big:
            problems.append(
                f"workdir: {too_big}. List what the job does not need in .rayignore (or"
                " .gitignore), or point workdir at a smaller folder"
            )
        if problems:
            raise InvalidSpec(
                "the job cannot run on Ray as given:",
                problems=problems,
                hint="fix the fields listed, or launch with backend 'local'",
                code="workdir-too-large" if too_big and len(problems) == 1 else None,
            )

    def _upload(self, ray: Any, dashboard: str, runtime_env: dict[str, Any]) -> None:
        """Upload the working_dir now; runtime_env then names the package, not the folder."""
        upload = getattr(ray, "_upload_working_dir_if_needed", None)
        if upload is None:  # a Ray without it uploads inside submit_job instead
            return
        try:
            upload(runtime_env)
        except Exception as exc:
            if _is_connection_error(exc):
                _forget(ray)
                raise _unavailable(dashboard, exc) from None
            raise InvalidSpec(
                f"Ray refused the working_dir {runtime_env.get('working_dir')}: {_short(exc)}",
                hint="list large or unreadable files in .rayignore, or use a smaller workdir",
            ) from None

    def _job_env(
        self, row: sqlite3.Row, spec: JobSpec, cluster: ClusterView | None, attempt: int
    ) -> tuple[dict[str, str], str]:
        """The variables a job receives (as a local job does), and its folder on the node."""
        job_id = row["job_id"]
        chosen = self.home / "jobs" / job_id / "ray-folder"  # the same folder every attempt
        if chosen.exists():
            folder = chosen.read_text().strip()
        else:
            local = cluster.on_this_host if cluster is not None and cluster.known else False
            if local:
                folder = str(self.home / "jobs" / job_id)
            else:
                root = self.store.setting("ray_job_root") or DEFAULT_REMOTE_JOB_ROOT
                folder = f"{root.rstrip('/')}/{job_id}"
            chosen.write_text(folder)
        cpus = spec.cpus or 1
        env = thread_caps(cpus)
        env.update(
            {
                "AIR_JOB_ID": job_id,
                "AIR_CONFIG_FILE": f"{folder}/config.json",
                "AIR_CHECKPOINT_DIR": f"{folder}/checkpoints",
                "AIR_DATA_DIR": f"{folder}/data",
                "AIR_ATTEMPT": str(attempt),
                "AIR_CONFIG_JSON": json.dumps(spec.config),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if row["run_id"]:
            from air_skills.tracking.mlflow import tracking_uri

            env["MLFLOW_TRACKING_URI"] = tracking_uri(self.home)
            env["MLFLOW_RUN_ID"] = row["run_id"]
            env["MLFLOW_EXPERIMENT_ID"] = row["experiment_id"] or ""
        env.update(spec.env)
        return env, folder

    @staticmethod
    def entrypoint(command: list[str]) -> str:
        """Ray runs the entrypoint with /bin/sh: write the config where AIR_CONFIG_FILE says,
        then exec the argv, each argument quoted (never interpreted by the shell)."""
        return (
            'mkdir -p "$AIR_CHECKPOINT_DIR" "$AIR_DATA_DIR"'
            ' && printf "%s" "$AIR_CONFIG_JSON" > "$AIR_CONFIG_FILE"'
            " && unset AIR_CONFIG_JSON && exec " + shlex.join(command)
        )

    def _submit(
        self,
        ray: Any,
        row: sqlite3.Row,
        spec: JobSpec,
        sid: str,
        cluster: ClusterView | None,
        runtime_env: dict[str, Any],
        note: str = "",
    ) -> None:
        """Submit one attempt (the caller holds the job's lock and has recorded ``sid``)."""
        job_id = row["job_id"]
        attempt = row["attempts"] + 1
        env, _ = self._job_env(row, spec, cluster, attempt)
        cpus = spec.cpus or 1
        dashboard = ray.get_address()
        try:
            _call(
                ray,
                "submit_job",
                entrypoint=self.entrypoint(spec.command),
                submission_id=sid,
                runtime_env={**runtime_env, "env_vars": env},
                entrypoint_num_gpus=spec.gpus or None,
                entrypoint_num_cpus=cpus,
                metadata={"air_job_id": job_id, "air_name": row["name"][:100]},
            )
        except BackendUnavailable as exc:
            # The request may or may not have reached Ray: the record stays QUEUED and the
            # next reconcile adopts the Ray job, or settles the record if Ray never got it.
            self.store.set_message(
                job_id,
                f"QUEUED: submission to Ray at {dashboard} unconfirmed ({exc.message});"
                " settled on the next call that reaches Ray",
            )
            exc.context["job_id"] = job_id
            raise
        except Exception as exc:
            if "already exists" in str(exc):
                self.store.event(job_id, "ray-accepted", f"adopted the Ray job {sid}")
                self.store.set_message(
                    job_id,
                    f"QUEUED on Ray: adopted the existing Ray job {sid} (same idempotency key)",
                )
                return
            self._finish(
                row,
                JobStatus.FAILED,
                f"FAILED (infra): Ray refused the submission: {_short(exc)}. Next: fix what it"
                " names, then relaunch",
                failure_kind="infra",
            )
            return
        self.store.event(job_id, "ray-accepted", f"Ray accepted submission {sid}")
        current = self.store.row(job_id)
        if current is not None and JobStatus(current["status"]).is_terminal():
            # Cancelled while we were submitting: make Ray agree.
            with contextlib.suppress(Exception):
                ray.stop_job(sid)
            return
        self.store.set_message(job_id, self._queued_message(spec, sid, cluster) + note)

    @staticmethod
    def _queued_message(spec: JobSpec, sid: str, cluster: ClusterView | None) -> str:
        text = f"QUEUED on Ray as {sid}"
        if spec.gpus and cluster is not None and cluster.known:
            free = cluster.free("GPU")
            free_text = f", {_num(free)} free" if free is not None else ""
            text += (
                f": waiting for {spec.gpus} GPU(s) (cluster: {_num(cluster.total('GPU'))} GPUs"
                f"{free_text}); Ray starts it when they are free"
            )
        else:
            text += ": waiting for Ray to start it"
        return text

    # --- reconciling ------------------------------------------------------------------------

    def reconcile(self) -> int:
        """Bring live Ray records in line with Ray's ``list_jobs``. Returns how many changed.

        Never raises for an unreachable cluster: the records keep their last known status,
        with a note in their message.
        """
        rows = self.store.rows(
            "WHERE backend='ray' AND status IN ('QUEUED','RUNNING') ORDER BY seq"
        )
        groups: dict[str, list[sqlite3.Row]] = {}
        now = time.time()
        changed = 0
        for row in rows:
            sid, address = split_ref(row["backend_ref"])
            if address is None:
                if now - row["queued_at"] > SUBMIT_GRACE_S:
                    changed += self._settle_gone(row, "the process submitting it stopped first")
                continue
            groups.setdefault(address, []).append(row)
        env_address = _env_address()
        for address, group in groups.items():
            try:
                ray = connect(env_address or address)
                actual = ray.get_address()
                if actual.rstrip("/") != address.rstrip("/"):
                    self._note(
                        group,
                        f"[Ray cluster {address} not followed: RAY_ADDRESS points at {actual};"
                        " point it back to follow this job]",
                    )
                    continue
                jobs = {j.submission_id: j for j in _call(ray, "list_jobs")}
            except Exception as exc:  # unreachable, refused, not installed: the record waits
                why = exc.message if isinstance(exc, AirError) else _short(exc)
                stamp = time.strftime("%H:%M:%S", time.gmtime())
                self._note(
                    group, f"[Ray unreachable at {stamp} UTC ({why}); status as last seen, retry]"
                )
                continue
            cluster: ClusterView | None = None
            for row in group:
                sid, _ = split_ref(row["backend_ref"])
                job = jobs.get(sid)
                if job is not None and str(job.status) == "PENDING" and cluster is None:
                    with contextlib.suppress(AirError):
                        cluster = cluster_view(ray)
                changed += self._apply(ray, row, job, cluster)
        return changed

    def _note(self, rows: list[sqlite3.Row], note: str) -> None:
        for row in rows:
            message = f"{_without_note(row['message'])} {note}"
            if message != row["message"]:
                self.store.set_message(row["job_id"], message)

    def _apply(
        self, ray: Any, row: sqlite3.Row, job: Any, cluster: ClusterView | None = None
    ) -> int:
        """Map one Ray job's state onto its record (under the job's lock)."""
        job_id = row["job_id"]
        with _job_lock(self.home / "jobs" / job_id, block=False) as locked:
            if not locked:
                return 0  # another process is submitting, stopping or settling it
            row = self._reread(job_id)
            if JobStatus(row["status"]).is_terminal():
                return 0
            sid, _ = split_ref(row["backend_ref"])
            if job is None:
                return self._settle_missing(ray, row, sid)
            status = str(job.status)
            spec = JobSpec.model_validate_json(row["spec"])
            if status == "PENDING":
                message = self._queued_message(spec, sid or "?", cluster)
                if row["status"] == "QUEUED" and row["message"] != message:
                    self.store.set_message(job_id, message)
                return 0
            if status == "RUNNING":
                changed = 0
                if row["status"] == "QUEUED":
                    with self.store.tx() as c:
                        self.store.start(c, job_id, [], spec.cpus or 1, False)
                    row = self._reread(job_id)
                    changed = 1
                message = (
                    f"RUNNING on Ray as {sid}"
                    + (f" with {spec.gpus} GPU(s)" if spec.gpus else "")
                    + (f" on node {job.driver_node_id[:12]}" if job.driver_node_id else "")
                )
                if row["stop_request"]:
                    message = _without_note(row["message"])
                if row["message"] != message:
                    self.store.set_message(job_id, message)
                self._check_timeout(ray, row, spec, sid)
                return changed
            self.sync_logs(row, ray=ray, final=True)
            return self._settle_terminal(ray, row, spec, job)

    def _check_timeout(self, ray: Any, row: sqlite3.Row, spec: JobSpec, sid: str | None) -> None:
        if not spec.timeout_min or not row["started_at"] or row["stop_request"]:
            return
        if time.time() - row["started_at"] < spec.timeout_min * 60:
            return
        with self.store.tx() as c:
            self.store.request_stop(
                c, row["job_id"], "timeout", f"ran past timeout_min={spec.timeout_min}"
            )
        self.store.set_message(
            row["job_id"], f"RUNNING on Ray as {sid}: stopping, past timeout_min={spec.timeout_min}"
        )
        with contextlib.suppress(Exception):
            ray.stop_job(sid)

    def _settle_terminal(self, ray: Any, row: sqlite3.Row, spec: JobSpec, job: Any) -> int:
        job_id = row["job_id"]
        status = str(job.status)
        error_type = str(getattr(job.error_type, "value", job.error_type) or "")
        exit_code = getattr(job, "driver_exit_code", None)
        ray_says = _first_line(job.message)
        sid = job.submission_id
        if status == "SUCCEEDED":
            return self._finish(
                row, JobStatus.SUCCEEDED, f"SUCCEEDED: exited 0 (Ray job {sid})", exit_code=0
            )
        if status == "STOPPED":
            if row["stop_request"] == "timeout":
                return self._finish(
                    row,
                    JobStatus.TIMED_OUT,
                    f"TIMED_OUT: ran past timeout_min={spec.timeout_min} and was stopped on Ray."
                    " Next: raise timeout_min or save checkpoints to AIR_CHECKPOINT_DIR and"
                    " relaunch",
                    failure_kind="user",
                )
            if row["stop_request"] == "cancel":
                return self._finish(row, JobStatus.CANCELLED, f"CANCELLED: {row['stop_reason']}")
            return self._finish(
                row,
                JobStatus.CANCELLED,
                f"CANCELLED: the Ray job {sid} was stopped outside AIR (`ray job stop` or the"
                f" dashboard); Ray: {ray_says or 'stopped'}",
            )
        # FAILED
        if exit_code is None and error_type in ("", "JOB_ENTRYPOINT_COMMAND_ERROR"):
            m = re.search(r"exit code (-?\d+)", job.message or "")
            exit_code = int(m.group(1)) if m else None
        if error_type in ("", "JOB_ENTRYPOINT_COMMAND_ERROR") and exit_code is not None:
            how = f"exited with code {exit_code}"
            if exit_code == 127:
                how += f" (command not found on the Ray node: {spec.command[0]!r}?)"
            if row["user_retries"] < spec.max_retries:
                return self._resubmit(
                    ray,
                    row,
                    spec,
                    "user",
                    f"QUEUED: {how}; retry {row['user_retries'] + 1} of {spec.max_retries}",
                )
            return self._finish(
                row,
                JobStatus.FAILED,
                f"FAILED: the command {how} (its own code failed; Ray job {sid})."
                f" Next: read `air logs {job_id}`, fix it, relaunch",
                exit_code=exit_code,
                failure_kind="user",
            )
        label = error_type or "FAILED"
        if error_type == "JOB_SUPERVISOR_ACTOR_START_TIMEOUT":
            # Ray gives up on a job that waited 15 minutes for resources; it fits the
            # cluster (checked at submit), so it goes back in line as a new submission.
            view = None
            with contextlib.suppress(AirError):
                view = cluster_view(ray)
            fits = view is None or not view.known or spec.gpus <= view.largest_node("GPU")
            if fits:
                return self._resubmit(
                    ray,
                    row,
                    spec,
                    "pending",
                    "QUEUED: Ray gave up waiting for resources after its start timeout;"
                    " resubmitted, still waiting",
                )
        retryable = error_type in (
            "JOB_SUPERVISOR_ACTOR_DIED",
            "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE",
            "JOB_SUPERVISOR_ACTOR_START_FAILURE",
        )
        if retryable and row["infra_retries"] < MAX_INFRA_RETRIES:
            return self._resubmit(
                ray,
                row,
                spec,
                "infra",
                f"QUEUED: Ray could not run it ({label}: {ray_says}); resubmitted"
                " (failure_kind: infra, not its own code)",
            )
        return self._finish(
            row,
            JobStatus.FAILED,
            f"FAILED (infra): Ray could not run the job ({label}: {ray_says})."
            f" Next: read `air logs {job_id}` and check the cluster (`ray status`), then relaunch",
            exit_code=exit_code,
            failure_kind="infra",
        )

    def _resubmit(self, ray: Any, row: sqlite3.Row, spec: JobSpec, kind: str, message: str) -> int:
        """Another attempt with the same id, run and checkpoint folder: a new Ray job."""
        job_id = row["job_id"]
        old_ref = row["backend_ref"]
        with self.store.tx() as c:
            if row["status"] == "QUEUED" and kind != "pending":
                self.store.start(c, job_id, [], spec.cpus or 1, False)
            if kind != "pending":
                self.store.requeue(job_id, kind=kind, message=message, c=c)
        row = self._reread(job_id)
        # Ray never takes a submission id twice: count on from the last one.
        m = re.search(r"-a(\d+)$", split_ref(old_ref)[0] or "")
        n = int(m.group(1)) + 1 if m else 2
        sid = submission_id(job_id, spec.idempotency_key, n)
        if not self.store.set_backend_ref(
            job_id, f"{sid}@{ray.get_address()}", expected=old_ref, message=message
        ):
            return 0
        # Keep the finished attempt's output: the log goes on from it, Ray's next log after.
        log = Path(row["log_path"])
        with contextlib.suppress(OSError), _job_lock(log.parent, name="log.lock"):
            with open(log, "ab") as f:
                f.write(f"\n[air] attempt {row['attempts'] + 1} on Ray as {sid}\n".encode())
            (log.parent / "ray-previous.log").write_bytes(log.read_bytes())
        cluster = None
        with contextlib.suppress(AirError):
            cluster = cluster_view(ray)
        runtime_env: dict[str, Any] = {"working_dir": spec.workdir}
        try:
            self._upload(ray, ray.get_address(), runtime_env)
            self._submit(ray, row, spec, sid, cluster, runtime_env)
        except AirError:
            pass  # the record stays QUEUED with the new reference; the next reconcile settles
        return 1

    def _settle_missing(self, ray: Any, row: sqlite3.Row, sid: str | None) -> int:
        """Settle a record whose Ray job is not on the cluster (we hold the job's lock)."""
        events = self.store.events(row["job_id"])
        submitted = max(
            (e["ts"] for e in events if e["kind"] == "submitted"), default=row["queued_at"]
        )
        accepted = any(e["kind"] == "ray-accepted" and e["ts"] >= submitted for e in events)
        if not accepted and time.time() - submitted < SUBMIT_GRACE_S:
            return 0  # an unconfirmed submission may still be on its way to Ray
        if accepted:
            what = (
                f"the Ray job {sid} no longer exists on the cluster at {ray.get_address()}"
                " (deleted with `ray job delete`, or the cluster was restarted)"
            )
        else:
            what = f"the Ray job {sid} never reached the cluster at {ray.get_address()}"
        return self._settle_gone(row, what)

    def _settle_gone(self, row: sqlite3.Row, what: str) -> int:
        if row["stop_request"] == "cancel":
            return self._finish(row, JobStatus.CANCELLED, f"CANCELLED: {row['stop_reason']}")
        return self._finish(
            row,
            JobStatus.FAILED,
            f"FAILED (infra): {what}; its outcome is unknown. Next: read what output was kept"
            f" with `air logs {row['job_id']}`, then relaunch",
            failure_kind="infra",
        )

    def _finish(
        self,
        row: sqlite3.Row,
        status: JobStatus,
        message: str,
        exit_code: int | None = None,
        failure_kind: str | None = None,
    ) -> int:
        """End the MLflow run (with the summary block's values), then the record."""
        job_id = row["job_id"]
        current = self.store.row(job_id)
        if current is None or JobStatus(current["status"]).is_terminal():
            return 0
        message = self._end_run(row, status, message)
        with self.store.tx() as c:
            if (
                current["status"] == "QUEUED"
                and status != JobStatus.CANCELLED
                and (current["backend_ref"] and exit_code is not None)
            ):
                # It ran between two looks: record that it started.
                self.store.start(c, job_id, [], current["cpus"] or 1, False)
            done = self.store.finish(
                job_id,
                status,
                message=message,
                exit_code=exit_code,
                failure_kind=failure_kind,
                c=c,
            )
        if done:
            with contextlib.suppress(OSError):
                (Path(row["log_path"]).parent / "ray-logs.done").touch()
        return int(done)

    def _end_run(self, row: sqlite3.Row, status: JobStatus, message: str) -> str:
        from air_skills.runtime.summary_block import parse_summary, read_tail

        values, bad = parse_summary(read_tail(row["log_path"]))
        if bad:
            message += f" (summary values not numeric, ignored: {', '.join(bad[:5])})"
        if not row["run_id"]:
            return message
        try:
            self.client.tracker.finish_run(row["run_id"], status.value, values)
        except Exception as exc:
            message += f" (MLflow run not ended: {_short(exc)[:120]})"
        return message

    # --- cancelling -----------------------------------------------------------------------

    def cancel(self, row: sqlite3.Row, reason: str, wait_s: float = STOP_WAIT_S) -> JobInfo:
        """Stop the Ray job (``stop_job``: SIGTERM, then SIGKILL) and record it CANCELLED."""
        job_id = row["job_id"]
        self.reconcile()
        row = self._reread(job_id)
        status = JobStatus(row["status"])
        if status.is_terminal():
            raise InvalidState(
                f"job {job_id} already finished ({status.value}); nothing to cancel",
                hint=f"read it with `air status {job_id}`",
                job_id=job_id,
                status=status.value,
            )
        sid, address = split_ref(row["backend_ref"])
        if sid is None:  # not submitted yet: the submitting process stops it when it sees this
            self._finish(row, JobStatus.CANCELLED, f"CANCELLED: {reason}")
            return row_to_info(self._reread(job_id))
        ray = connect(_env_address() or address or DEFAULT_ADDRESS)
        with _job_lock(self.home / "jobs" / job_id):
            if status == JobStatus.RUNNING:
                with self.store.tx() as c:
                    self.store.request_stop(c, job_id, "cancel", reason)
            try:
                _call(ray, "stop_job", sid)
            except BackendUnavailable:
                raise
            except Exception as exc:
                if not _not_found(exc):
                    raise BackendUnavailable(
                        f"Ray would not stop job {sid}: {_short(exc)}",
                        hint="retry",
                        job_id=job_id,
                    ) from None
            deadline = time.monotonic() + wait_s
            delay = 0.05
            job = None
            while True:
                try:
                    job = _call(ray, "get_job_info", sid)
                except BackendUnavailable:
                    raise
                except Exception:
                    job = None
                    break
                if str(job.status) in ("SUCCEEDED", "FAILED", "STOPPED"):
                    break
                if time.monotonic() >= deadline:
                    break
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)
            row = self._reread(job_id)
            if job is not None and str(job.status) in ("SUCCEEDED", "FAILED"):
                self.sync_logs(row, ray=ray, final=True)
                self._settle_terminal(ray, row, JobSpec.model_validate_json(row["spec"]), job)
            elif job is None or str(job.status) == "STOPPED" or row["status"] == "QUEUED":
                self.sync_logs(row, ray=ray, final=True)
                self._finish(row, JobStatus.CANCELLED, f"CANCELLED: {reason}")
            else:
                self.store.set_message(
                    job_id,
                    f"RUNNING on Ray as {sid}: stopping ({reason}); Ray has not confirmed yet",
                )
        return row_to_info(self._reread(job_id))

    # --- logs ---------------------------------------------------------------------------------

    def sync_logs(self, row: sqlite3.Row, ray: Any = None, final: bool = False) -> None:
        """Bring the job's log file up to date with Ray's log of the current attempt.

        The file is only ever appended to (earlier attempts are kept before it), so byte
        offsets that readers hold stay valid.
        """
        log = Path(row["log_path"])
        if (log.parent / "ray-logs.done").exists():
            return
        sid, address = split_ref(row["backend_ref"])
        if sid is None:
            return
        live = not JobStatus(row["status"]).is_terminal()
        try:
            if ray is None:
                ray = connect(_env_address() or address or DEFAULT_ADDRESS)
                if ray.get_address().rstrip("/") != (address or "").rstrip("/"):
                    return
            text = _call(ray, "get_job_logs", sid)
        except BackendUnavailable:
            if live and not final:
                raise
            return
        except Exception:
            return  # gone from Ray: what we kept is all there is
        prev_path = log.parent / "ray-previous.log"
        prev = prev_path.read_bytes() if prev_path.exists() else b""
        want = prev + (text or "").encode("utf-8", "replace")
        with _job_lock(log.parent, name="log.lock"):
            size = log.stat().st_size if log.exists() else 0
            if len(want) > size:
                with open(log, "ab") as f:
                    f.write(want[size:])
            elif len(want) < size and not prev:
                tmp = log.with_suffix(".tmp")
                tmp.write_bytes(want)
                tmp.replace(log)
        if not live:
            (log.parent / "ray-logs.done").touch()


# --- settings -----------------------------------------------------------------------------------


def configure(
    client: Client,
    *,
    backend: str | None = None,
    address: str | None = None,
    job_root: str | None = None,
    max_node_gpus: int | None = None,
) -> dict[str, str | None]:
    """Save AIR_HOME's Ray settings (an empty string clears one); returns them all."""
    store = client.store
    problems = []
    if backend is not None and backend not in ("local", "ray", ""):
        problems.append(f"backend: {backend!r} is not local or ray")
    if job_root and not job_root.startswith("/"):
        problems.append(f"job root: {job_root!r} must be an absolute path on the cluster's nodes")
    if max_node_gpus is not None and max_node_gpus < 0:
        problems.append("max node gpus: must be >= 0")
    if problems:
        raise InvalidInput("bad settings: " + "; ".join(problems), hint="fix them and run again")
    values = {
        "backend": backend,
        "ray_address": address,
        "ray_job_root": job_root,
        "ray_max_node_gpus": None if max_node_gpus is None else str(max_node_gpus or ""),
    }
    for key, value in values.items():
        if value is not None:
            store.set_setting(key, value)  # "" reads as unset everywhere
    return {key: store.setting(key) or None for key in SETTINGS}


def main(argv: list[str] | None = None) -> int:
    """``python -m air_skills.backends.ray config [--backend B] [--address URL] ...``"""
    parser = argparse.ArgumentParser(
        prog="python -m air_skills.backends.ray",
        description="AIR Skills' Ray settings, saved in AIR_HOME (RAY_ADDRESS still wins).",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    cfg = sub.add_parser("config", help="show or change the settings")
    cfg.add_argument("--backend", help="default backend for specs that name none: local | ray")
    cfg.add_argument("--address", help="the cluster's dashboard, e.g. http://HEAD:8265")
    cfg.add_argument("--job-root", help="per-job folders on the nodes (shared storage)")
    cfg.add_argument("--max-node-gpus", type=int, help="GPUs of the largest node (autoscaling)")
    cfg.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("check", help="connect to the cluster and show its resources")
    args = parser.parse_args(argv)
    from air_skills.client import Client

    try:
        client = Client()
        if args.cmd == "config":
            result: Any = configure(
                client,
                backend=args.backend,
                address=args.address,
                job_root=args.job_root,
                max_node_gpus=args.max_node_gpus,
            )
            if args.json:
                print(json.dumps(result))
            else:
                for key, value in result.items():
                    print(f"{key}: {value if value is not None else '(not set)'}")
                if _env_address():
                    print(f"(RAY_ADDRESS={_env_address()} is set and wins over ray_address)")
        else:
            backend = RayBackend(client)
            ray = connect(backend.address())
            view = cluster_view(ray)
            print(f"{ray.get_address()}: {view.describe()}; on this host: {view.on_this_host}")
    except AirError as exc:
        print(f"error[{exc.code}]: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    return 0


# --- a throwaway local head (tests, benchmarks, demos) ------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRayHead:
    """A single-node Ray head with fake GPUs, its dashboard on 127.0.0.1, on free ports.

    Runs ``ray start --head --block`` in its own session with a private temp dir; ``stop``
    signals exactly the processes it started (``ray stop`` would stop every Ray on the box).
    """

    def __init__(
        self,
        num_gpus: int = 4,
        num_cpus: int = 2,
        env: dict[str, str] | None = None,
        object_store_mb: int = 128,
    ) -> None:
        self.num_gpus = num_gpus
        self.num_cpus = num_cpus
        self.extra_env = env or {}
        self.object_store_mb = object_store_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.temp_dir: str | None = None
        self.address = ""

    def start(self, timeout_s: float = 120.0) -> str:
        """Start the head and wait until its Jobs API answers; returns the dashboard URL."""
        self.temp_dir = tempfile.mkdtemp(prefix="airray-", dir="/tmp")  # short: socket paths
        dash = _free_port()
        bindir = os.path.dirname(sys.executable)
        ray_bin = os.path.join(bindir, "ray")
        if not os.path.exists(ray_bin):
            ray_bin = "ray"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIR_", "MLFLOW_", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"))
        }
        env.update(
            {
                "PATH": bindir + os.pathsep + env.get("PATH", ""),
                "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                **self.extra_env,
            }
        )
        argv = [
            ray_bin, "start", "--head", "--block", "--disable-usage-stats",
            "--node-ip-address", "127.0.0.1",
            "--num-gpus", str(self.num_gpus), "--num-cpus", str(self.num_cpus),
            "--port", str(_free_port()),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
            "--ray-client-server-port", str(_free_port()),
            "--dashboard-agent-listen-port", str(_free_port()),
            "--object-store-memory", str(self.object_store_mb * 2**20),
            "--temp-dir", self.temp_dir,
        ]  # fmt: skip
        out = open(Path(self.temp_dir) / "head.out", "wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        out.close()
        self.address = f"http://127.0.0.1:{dash}"
        deadline = time.monotonic() + timeout_s
        delay = 0.2
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (Path(self.temp_dir) / "head.out").read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"the Ray head did not come up:\n{tail}")
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        return self.address

    def _ready(self) -> bool:
        import urllib.request

        token = self.extra_env.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        def get(path: str) -> Any:
            req = urllib.request.Request(self.address + path, headers=headers)
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())

        try:
            get("/api/jobs/")
            nodes = get("/api/v0/nodes?detail=1")["data"]["result"]["result"]
            return any(
                n.get("state") == "ALIVE"
                and n.get("resources_total", {}).get("GPU", 0) >= self.num_gpus
                for n in nodes
            )
        except Exception:
            return False

    def stop(self) -> None:
        """SIGTERM the head (it stops its own processes), then SIGKILL what is left of them."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        try:
            import psutil

            tree = psutil.Process(proc.pid).children(recursive=True)
        except Exception:
            tree = []
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if tree:
            import psutil

            _, alive = psutil.wait_procs(tree, timeout=5)
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(alive, timeout=5)
        if self.temp_dir:
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayHead:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
