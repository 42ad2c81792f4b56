"""Container jobs: the engine (podman or docker), its ``run`` argv, stop and removal, image IDs.

Stdlib only. A job whose spec names an ``image`` runs as ``<engine> run`` (argv, never a shell)
in a container named after its job id, so a supervisor killed with -9 leaves nothing that
reconcile cannot find and remove. The launch records what the job runs in the job's folder
(``container.json``: engine, image, image ID), and everything after reads that record, so the
supervisor and reconcile use the engine the job was launched with.

The image ID (``sha256:`` of the image's config, which names its layers) is the digest recorded
as provenance: the container runs that exact ID, and a relaunch that gives it runs it again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from air_skills import settings
from air_skills.errors import InvalidInput
from air_skills.home import read_job_json
from air_skills.job_folder import write_in
from air_skills.runtime.containers import image_cache

ENGINES = ("podman", "docker")
WORKDIR = "/air/code"  # the job's code inside the container: its working directory
RECORD = "container.json"  # in the job's folder
QUICK_S = 30.0  # an engine call that answers from local state (inspect, stop's bookkeeping)
PULL_S = 600.0


def engine_name() -> str:
    """AIR_CONTAINER_ENGINE, or the first of podman and docker on PATH; refused if neither."""
    chosen = settings.get("AIR_CONTAINER_ENGINE")
    if chosen:
        if shutil.which(chosen) is None:
            raise _engine_missing(f"AIR_CONTAINER_ENGINE={chosen} but {chosen} is not on PATH")
        return str(chosen)
    for name in ENGINES:
        if shutil.which(name) is not None:
            return name
    raise _engine_missing("no container engine found (podman or docker) for a job with an image")


def _engine_missing(what: str) -> InvalidInput:
    return InvalidInput(
        what,
        code="container-engine-missing",
        hint="install podman (apt-get install podman runc) or docker, or set"
        " AIR_CONTAINER_ENGINE; `air doctor` checks it",
    )


def engine_problem(name: str | None = None) -> tuple[str, str | None]:
    """(engine, what is wrong with it or None): `air doctor`'s check and the launch's."""
    try:
        engine = name or engine_name()
    except InvalidInput as exc:
        return settings.raw("AIR_CONTAINER_ENGINE") or "podman", exc.message
    try:
        done = _call([engine, "info", "--format", "{{json .}}"], timeout=QUICK_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return engine, f"`{engine} info` failed: {exc}"
    if done.returncode != 0:
        return engine, f"`{engine} info` failed: {_last_line(done.stderr)}"
    return engine, None


def image_id(engine: str, image: str, pinned: str | None = None) -> str:
    """The ID of ``image`` (pulled if it is not here); refused (exit 2) when there is none.

    ``pinned`` (a relaunch's recorded ID, a prefix is enough) must still be the image's ID.
    """
    # Kept per binary, not per name: another PATH may hold another podman and store.
    binary = shutil.which(engine) or engine
    stamp = image_cache.store_stamp(binary)
    found = image_cache.cached_id(binary, image, stamp) or _inspect(engine, image)
    if found is None:
        pulled = _pull(engine, image)
        found = _inspect(engine, image) if pulled is None else None
        if found is None:
            raise InvalidInput(
                f"image {image!r} is not on this machine and could not be pulled"
                f" ({pulled or 'not found after the pull'}); nothing launched",
                code="image-unknown",
                hint=f"build or pull it first (`{engine} images` lists what is here)",
                image=image,
            )
    image_cache.remember(binary, image, found, stamp)  # a long-lived launcher skips the next
    if pinned and not _same_id(found, pinned):
        raise InvalidInput(
            f"image {image!r} is now {found}, not the recorded {pinned}; nothing launched",
            code="image-digest-mismatch",
            hint="drop image_digest to use the image as it is now, or restore that version",
            image=image,
        )
    return found


def _same_id(found: str, pinned: str) -> bool:
    bare = pinned.removeprefix("sha256:")
    return len(bare) >= 8 and found.removeprefix("sha256:").startswith(bare)


def _inspect(engine: str, image: str) -> str | None:
    """The image's ID, ``sha256:``-prefixed; None when the engine does not have it."""
    try:
        done = _call([engine, "image", "inspect", "--format", "{{.Id}}", image], timeout=QUICK_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _not_working(engine, str(exc)) from None
    if done.returncode == 0 and done.stdout.strip():
        ident = done.stdout.strip().splitlines()[0]
        return ident if ident.startswith("sha256:") else f"sha256:{ident}"
    text = done.stderr.lower()
    if "no such" in text or "not known" in text or "not found" in text:
        return None
    raise _not_working(engine, _last_line(done.stderr))


def _pull(engine: str, image: str) -> str | None:
    """Pull the image; why it failed, or None."""
    try:
        done = _call([engine, "pull", "--quiet", image], timeout=PULL_S)
    except subprocess.TimeoutExpired:
        return f"the pull took over {PULL_S:.0f} s"
    return None if done.returncode == 0 else _last_line(done.stderr)


def _not_working(engine: str, why: str) -> InvalidInput:
    return InvalidInput(
        f"the container engine {engine} is not working: {why}; nothing launched",
        code="container-engine-broken",
        hint=f"run `air doctor` (it checks `{engine} info`) and fix what it says",
    )


@dataclass(frozen=True)
class ContainerJob:
    """What a container job runs in (the job folder's container.json)."""

    engine: str
    image: str
    image_id: str
    # The settings air passes the engine (engine_config.py): the fixes and their environment.
    fixes: tuple[str, ...] = ()
    engine_env: dict[str, str] = field(default_factory=dict)

    def save(self, jdir: Path) -> None:
        record = {**self.__dict__, "fixes": list(self.fixes)}
        write_in(jdir, RECORD, json.dumps(record))  # never through a link left in its place


def load(jdir: Path) -> ContainerJob | None:
    """The job's container record; None for a job that runs on the host."""
    try:
        data = read_job_json(jdir / RECORD)  # never waits on a FIFO put in its place
        env = {str(k): str(v) for k, v in (data.get("engine_env") or {}).items()}
        fixes = tuple(data.get("fixes") or ())
        return ContainerJob(data["engine"], data["image"], data["image_id"], fixes, env)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def container_name(job_id: str) -> str:
    return f"air-{job_id}"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False

    def arg(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


def check_mounts(mounts: list[Mount], workdir: str = WORKDIR) -> None:
    """Refuse a mount that would hide the working directory (at it or above it)."""
    for m in mounts:
        target = os.path.normpath(m.target)
        if target == "/" or workdir == target or workdir.startswith(target.rstrip("/") + "/"):
            raise InvalidInput(
                f"{m.source} would be mounted at {target}, hiding the job's working directory"
                f" {workdir}; nothing launched",
                code="mount-hides-workdir",
                hint="move that data input (or AIR_HOME) out of a folder above the code's path",
            )


def gpu_args(engine: str, gpus: list[int]) -> list[str]:
    """The job's GPUs: CDI devices for podman, ``--gpus device=...`` for docker; none for
    simulated GPUs (AIR_SIMULATED_GPUS: there is no device to pass)."""
    if not gpus or settings.raw("AIR_SIMULATED_GPUS"):
        return []
    if engine.endswith("docker"):
        return ["--gpus", '"device=' + ",".join(str(g) for g in gpus) + '"']
    return [a for g in gpus for a in ("--device", f"nvidia.com/gpu={g}")]


def user_args(engine: str) -> list[str]:
    """Run as the user: rootless podman maps them in (keep-id); otherwise their uid:gid."""
    if engine.endswith("podman") and os.getuid() != 0:
        return ["--userns=keep-id"]
    return ["--user", f"{os.getuid()}:{os.getgid()}"]


def run_argv(
    job: ContainerJob,
    job_id: str,
    command: list[str],
    *,
    code: str | None,
    code_sub: str,
    mounts: list[Mount],
    env_names: list[str],
    env_values: dict[str, str],
    gpus: list[int],
    host_network: bool,
    hidden: Iterable[str] = (),
    code_read_only: bool = False,
) -> list[str]:
    """``<engine> run`` for the job: argv, never a shell.

    ``env_names`` pass from the engine's own environment (``--env NAME``: values, secrets
    among them, stay out of the argv); ``env_values`` are set inside (paths, GPU numbering).
    """
    workdir = f"{WORKDIR}/{code_sub}".rstrip("/") if code_sub else WORKDIR
    argv = [job.engine, "run", "--name", container_name(job_id)]
    argv += ["--workdir", workdir if code else "/"]
    argv += user_args(job.engine)
    if code:
        argv += ["--volume", Mount(code, WORKDIR, read_only=code_read_only).arg()]
    for m in mounts:
        argv += ["--volume", m.arg()]
    # AIR_HOME where a mount above it would show it: an empty read-only tmpfs (podman would
    # copy the folder's files into it by default: notmpcopyup).
    empty = ":notmpcopyup,ro" if job.engine.endswith("podman") else ":ro"
    for path in hidden:
        argv += ["--tmpfs", path + empty]
    if host_network:
        argv += ["--network", "host"]
    argv += gpu_args(job.engine, gpus)
    for name in env_names:
        argv += ["--env", name]
    for name, value in env_values.items():
        argv += ["--env", f"{name}={value}"]
    argv += ["--", job.image_id, *command]
    return argv


def mounts(
    jdir: Path,
    data: list[str] | None = None,
    writable: Iterable[str] = (),
    home: str | None = None,
    kept: Iterable[str | os.PathLike[str]] = (),
) -> list[Mount]:
    """What a container job sees besides its code, each at its own path on the host: the job
    folder (config, checkpoints, rank logs, its own MLflow store: metric_relay.py forwards it),
    each data input read-only (the links in ``$AIR_DATA_DIR`` then resolve inside) and each
    ``writable`` folder. Never AIR_HOME beyond the job's folder: not air.db, the code store,
    other jobs or the shared MLflow store (a data input inside AIR_HOME is not mounted).

    ``data``: the inputs' real paths as checked against the roots at start (launch_env); only
    those are mounted, never what the links in the job's folder point at now. ``kept``: files
    in its folder that air reads back (its launch environment...): read-only over it."""
    out = [Mount(os.fspath(jdir), os.fspath(jdir))]
    for path in kept:
        if os.path.isfile(path) and not os.path.islink(path):
            out.append(Mount(os.fspath(path), os.fspath(path), read_only=True))
    if data is None:
        folder = jdir / "data"
        links = sorted(folder.iterdir()) if folder.is_dir() else []
        data = [os.path.realpath(link) for link in links]
    home_real = os.path.realpath(home) if home else None
    for real in data:
        if home_real is None or not _inside(real, home_real):
            out.append(Mount(real, real, read_only=True))
    for path in writable:
        real = os.path.realpath(path)
        if home_real is None or not (_inside(real, home_real) or _inside(home_real, real)):
            out.append(Mount(real, real))
    check_mounts(out)
    return out


def hidden_home(sources: list[tuple[str, str]], home: str | None) -> list[str]:
    """Where AIR_HOME would show inside the container through a mount of a folder above it
    (``(source, target)`` pairs: a live job's tree, a data root): each gets an empty tmpfs."""
    if not home:
        return []
    home_real = os.path.realpath(home)
    out = []
    for source, target in sources:
        real = os.path.realpath(source)
        if _inside(home_real, real):
            out.append(os.path.normpath(target + home_real[len(real) :]))
    return list(dict.fromkeys(out))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def job_argv(
    job: ContainerJob,
    job_id: str,
    command: list[str],
    *,
    jdir: Path,
    cwd: str | None,
    env: dict[str, str],
    gpus: list[int],
    passed: list[str],
    data: list[str] | None = None,
    writable: Iterable[str] = (),
    home: str | None = None,
    kept: Iterable[str | os.PathLike[str]] = (),
) -> list[str]:
    """The job's command as ``<engine> run``: its code at WORKDIR (a live job's tree read-only,
    as in bwrap's sandbox), its folder, data and writable folders mounted (``mounts``), its
    environment contract (AIR_*, MLflow, ``passed``) and GPUs."""
    code, sub = _code_root(jdir, cwd)
    uri = env.get("MLFLOW_TRACKING_URI")
    found = mounts(jdir, data, writable, home, kept)
    own_view = code is not None and _inside(os.path.realpath(code), os.path.realpath(jdir))
    names = [
        k
        for k in env
        if k.startswith(("AIR_", "MLFLOW_")) or k in passed or k in ("PYTHONUNBUFFERED",)
    ]
    names = [k for k in dict.fromkeys(names) if k != "CUDA_VISIBLE_DEVICES"]
    # Inside, the container's GPUs are numbered from 0 (only the job's are there).
    values = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(gpus)))}
    return run_argv(
        job,
        job_id,
        command,
        code=code,
        code_sub=sub,
        mounts=found,
        env_names=names,
        env_values=values,
        gpus=gpus,
        host_network=bool(uri and uri.startswith(("http://", "https://"))),
        hidden=hidden_home(
            [(m.source, m.target) for m in found] + ([(code, WORKDIR)] if code else []), home
        ),
        code_read_only=code is not None and not own_view,
    )


def _code_root(jdir: Path, cwd: str | None) -> tuple[str | None, str]:
    """(the folder mounted at WORKDIR, the working directory below it): a snapshot's whole
    view (code.json), else the job's working directory itself."""
    try:
        record = read_job_json(jdir / "code.json")
        return str(record["view"]), str(record.get("cwd") or "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return cwd, ""


def stop(engine: str, job_id: str, grace_s: float, env: dict[str, str] | None = None) -> None:
    """Stop the job's container: SIGTERM, then after ``grace_s`` SIGKILL (the engine's stop)."""
    name = container_name(job_id)
    argv = [engine, "stop", "-t", str(max(0, round(grace_s))), name]
    try:
        _call(argv, timeout=grace_s + QUICK_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        _call([engine, "kill", name], timeout=QUICK_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        pass


def remove(engine: str, job_id: str, env: dict[str, str] | None = None) -> None:
    """Remove the job's container, whatever its state (none: nothing to do)."""
    # podman's --force stops it first, with a 10 s grace unless told: it is killed at once.
    quick = ["--ignore", "--time", "0"] if engine.endswith("podman") else []
    try:
        argv = [engine, "rm", "--force", *quick, container_name(job_id)]
        _call(argv, timeout=QUICK_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        pass


def list_images(engine: str) -> list[dict[str, object]]:
    """The engine's images: ``id`` (sha256:...), ``names``, ``size`` (bytes), ``created``."""
    done = _call([engine, "images", "--format", "json"], timeout=QUICK_S)
    if done.returncode != 0:
        raise _not_working(engine, _last_line(done.stderr))
    text = done.stdout.strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    out = []
    for r in rows:
        ident = str(r.get("Id") or r.get("ID") or "")
        names = r.get("Names") or r.get("RepoTags") or []
        if not names and r.get("Repository"):  # docker: one row per tag
            names = [f"{r['Repository']}:{r.get('Tag', '')}"]
        out.append(
            {
                "id": ident if ident.startswith("sha256:") else f"sha256:{ident}",
                "names": list(names),
                "size": r.get("Size"),
                "created": r.get("CreatedAt") or r.get("Created"),
            }
        )
    return out


def _call(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,
    )


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else "no output"
