"""What a job's process receives: its argv, folder, environment (thread caps included) and log.

Stdlib only: the supervisor, the local backend and the Ray entrypoint all build on it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.home import (
    FOLDER_RECORD,
    JOB_ENV,
    LAUNCH_ENV,
    append_job_file,
    job_dir,
    open_job_file,
    read_job_env,
    read_job_json,
    read_launch_env,
)
from air_skills.job_folder import JobFolder
from air_skills.runtime.containers import container
from air_skills.runtime.execution import (
    config_args,
    gang,
    job_env,
    metric_relay,
    rendezvous,
    sandbox,
    sandbox_ahead,
    sandbox_devices,
    sandbox_net,
)
from air_skills.runtime.store.records import JobRecord

# Set by the runtime for every job, never by a spec's ``env``: the GPUs a job may see, where its
# MLflow run is, its rank in a gang. A spec that names one is overridden (AIR_* included).
RESERVED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        # The same choice of GPUs by other names (container runtime, ROCm/HIP, OpenCL): a job
        # that set one would see GPUs the scheduler gave to others.
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "MLFLOW_RUN_ID",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_ID",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


# AIR_* names a spec's ``env`` may set: the study loop's split for its trials (autoresearch).
SPEC_AIR_ENV = frozenset({"AIR_EVAL_SPLIT"})


# Leads a tracked job's PYTHONPATH: its sitecustomize keeps mlflow.set_experiment() working
JOB_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "job_site")


# What air reads back from a job's folder stays as air wrote it: bound read-only over the job's
# own folder (a patch the job rewrote would be what `air rerun` and `air code export` give).
KEPT_FILES = (LAUNCH_ENV, JOB_ENV, "code.json", "code.patch", FOLDER_RECORD)


def is_reserved(name: str) -> bool:
    """Whether a job's own ``env`` may not set ``name`` (see RESERVED_ENV)."""
    return name in RESERVED_ENV or (name.startswith("AIR_") and name not in SPEC_AIR_ENV)


def user_env(env: dict[str, str]) -> dict[str, str]:
    """A spec's ``env`` without the reserved names: the runtime's values always win."""
    return {k: v for k, v in env.items() if not is_reserved(k)}


class JobFolderGone(OSError):
    """The job's folder under AIR_HOME was removed before its command could start."""

    def __init__(self, jdir: Path) -> None:
        super().__init__(f"the job's folder {jdir} is gone (deleted while the job waited)")


def thread_caps(cpus: int) -> dict[str, str]:
    value = str(cpus)
    names = (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "TORCH_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
    )
    return {n: value for n in names}


@dataclass(frozen=True)
class CommandLaunch:
    """How to start one attempt of a job's command: argv, folder, environment and log."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    log_path: str
    banner: bytes = b""  # written to the log first (a later attempt says so)
    # A sandboxed job: its view and command, for a sandbox made ahead (sandbox_ahead.py)
    ahead: tuple[sandbox.View, list[str]] | None = None
    # A sandboxed job that may use the network: the slirp4netns that serves it (sandbox_net)
    slirp: str | None = None

    def popen(self) -> subprocess.Popen[bytes]:
        """Start it (argv, never a shell) in its own process group, output to the log."""
        try:  # a FIFO in the log's place fails the start (NotRegularFile), never blocks it
            log = os.fdopen(append_job_file(self.log_path), "ab")
        except FileNotFoundError:  # the folder went between command_launch and now
            raise JobFolderGone(Path(self.log_path).parent) from None
        try:
            if self.banner:
                log.write(self.banner)
                log.flush()
            if self.ahead is not None:  # bwrap started before the job was known, if any
                child = sandbox_ahead.start(*self.ahead, self.env, log.fileno())
                if child is not None:
                    return child
            how: dict[str, Any] = {
                "cwd": self.cwd,
                "env": self.env,
                "stdin": _devnull(),
                "stdout": log,
                "stderr": subprocess.STDOUT,
                "process_group": 0,
                "close_fds": True,
            }
            if self.slirp is not None:  # bwrap waits until its network is up
                return sandbox_net.popen(self.argv, self.slirp, log, **how)
            return subprocess.Popen(self.argv, **how)
        finally:
            log.close()


_DEVNULL: int | None = None


def _devnull() -> int:
    """/dev/null, opened once per process (every job's stdin)."""
    global _DEVNULL
    if _DEVNULL is None:
        _DEVNULL = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return _DEVNULL


def command_launch(
    home: Path, row: JobRecord, spec: dict[str, Any], gpus: list[int]
) -> CommandLaunch:
    """The launch of a started job's command, from its record: what the job receives."""
    job_id = row.job_id
    jdir = job_dir(home, job_id)
    ckpt = jdir / "checkpoints"
    try:
        with JobFolder.open(jdir) as top:  # a link the job left there is not followed
            if top.lstat("checkpoints") is None:
                top.mkdir("checkpoints")
    except FileNotFoundError:
        raise JobFolderGone(jdir) from None
    # What the job opens by name must be what air wrote: a FIFO there would hang the job's
    # start (the command fails to start instead: NotRegularFile, an OSError, names it).
    with contextlib.suppress(FileNotFoundError):
        os.close(open_job_file(jdir / "config.json"))
    # The environment of the process that launched the job, whoever starts it: its settings
    # are read from ``said``; the job inherits only job_env's allow-list of it (never the
    # launcher's AIR_MCP_TOKEN or API keys: a job is untrusted code).
    launched = read_launch_env(jdir)
    said = launched if launched is not None else job_env.launch_environment(os.environ)
    uri = said.get("MLFLOW_TRACKING_URI") or ""
    env = job_env.job_environment(said, direct_tracking=bool(uri) and not metric_relay.relayed(uri))
    env.update(thread_caps(row.cpus or 1))
    env.update(
        {
            "AIR_HOME": os.fspath(home),
            "AIR_JOB_ID": job_id,
            "AIR_CONFIG_FILE": os.fspath(jdir / "config.json"),
            "AIR_CHECKPOINT_DIR": os.fspath(ckpt),
            "AIR_DATA_DIR": os.fspath(jdir / "data"),
            "AIR_ATTEMPT": str(row.attempts),
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            # CUDA numbers GPUs fastest-first by default; NVML (and our indices) by PCI bus.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "PYTHONUNBUFFERED": "1",
        }
    )
    sandboxed = spec.get("sandbox") == "on"
    if row.run_id:
        from air_skills.tracking.mlflow import tracking_uri

        # Where the launching process created the run.
        env["MLFLOW_TRACKING_URI"] = (launched or {}).get("MLFLOW_TRACKING_URI") or (
            tracking_uri(home)
        )
        env["MLFLOW_RUN_ID"] = row.run_id
        env["MLFLOW_EXPERIMENT_ID"] = row.experiment_id or ""
        uri = env["MLFLOW_TRACKING_URI"]
        # A sandbox has no way to the host's loopback: a server there is relayed to as well.
        if (sandboxed or spec.get("image")) and (
            metric_relay.relayed(uri) or (sandboxed and _on_loopback(uri))
        ):
            # A store of its own: its supervisor forwards each metric to the run (relay). A
            # container's too, whatever its sandbox: the shared store is never mounted in it.
            env.update(metric_relay.prepare(jdir, row.run_id, row.experiment_id or "0"))
    # Data inputs: resolved and checked against the roots again now, the paths bound below.
    data = _data_at_start(jdir, spec, launched) if spec.get("data") else []
    # The values travel in the job's folder, owner-only (the store keeps only the names).
    own = read_job_env(jdir)
    env.update(user_env(own if own is not None else spec.get("env") or {}))
    if row.run_id and not spec.get("image"):  # MLflow habits kept (job_site/sitecustomize.py)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [JOB_SITE, env.get("PYTHONPATH")]))
    if sandboxed and not env.get("WANDB_API_KEY") and "WANDB_MODE" not in env:
        # wandb.init() without a granted key: offline, into the job's folder, not a failure
        env.update({"WANDB_MODE": "offline", "WANDB_DIR": os.fspath(jdir)})
    # A snapshot job runs in its own view of the code (job_code.materialize wrote code.json).
    cwd = spec.get("workdir") or None
    # Only a snapshot job has code.json (and only an image job a container record): a read
    # less on the way to the command's start for the others.
    view = _code_view(jdir) if spec.get("code") != "live" else None
    if view is not None:
        cwd, env["AIR_CODE_DIGEST"] = view
    banner = b""
    ahead: tuple[sandbox.View, list[str]] | None = None
    slirp: str | None = None
    if row.attempts > 1:
        banner = f"[air] attempt {row.attempts} on GPUs {gpus}\n".encode()
    argv = config_args.job_argv(spec)  # the config's flags too (config_as)
    image = container.load(jdir) if spec.get("image") else None
    procs = gang.procs_of(spec, len(gpus))
    if procs > 1:  # a gang: torchrun runs one rank per process, each with its share of CPUs
        env.update(thread_caps(max(1, (row.cpus or 1) // procs)))
        env.update(gang.gang_env())
        grace = settings.get("AIR_GRACE_S")
        if image is None:  # each rank notes its arrival at init_process_group (rendezvous.py)
            argv = rendezvous.boot_command(argv, rendezvous.join_dir(jdir, row.attempts))
        argv = gang.torchrun_argv(
            argv,
            procs,
            gang.rank_log_dir(jdir),
            grace_s=grace,
            rendezvous_s=rendezvous.timeout_s(launched),
        )
    if sandboxed and image is None:  # an image job's container is its sandbox
        # The launch's bwrap (env.json is read-only inside the sandbox: no attempt can name
        # the next one's); probed at launch, not again on the way to the start.
        bwrap = sandbox.bwrap_path(said)
        if bwrap is None:
            raise sandbox.SandboxUnavailable(sandbox.unavailable(said) or "no bwrap")
        command = sandbox.resolved(argv, env.get("PATH"), cwd)
        view = sandbox.view(
            command,
            bwrap=bwrap,
            home=home,
            jdir=jdir,
            cwd=cwd,
            workdir=spec.get("workdir"),
            data=data,
            writable=spec.get("writable") or (),
            network=spec.get("network", True),
            hidden=spec.get("hidden") or (),
            # What air reads back from the job's folder stays as air wrote it.
            kept=[jdir / n for n in KEPT_FILES],
            dev=_dev_args(gpus, said),
            environ={**said, **env},  # its settings, and its caches' variables
            # The user's own code shares the caches; a code-editing trial's reads them only.
            trusted=not spec.get("patch"),
            # its /tmp, a tmpfs, sized as its disk cap (supervision/disk_cap.py)
            tmp_size=sandbox.tmp_bytes(
                spec.get("disk_gb") or settings.get("AIR_JOB_DISK_GB", said)
            ),
        )
        argv = view.argv(command)
        banner += "".join(f"[air] {note}\n" for note in view.notes).encode()
        if view.network:
            slirp = sandbox_net.slirp_path(said)
            if slirp is None:
                banner += sandbox_net.missing_note(said).encode()
        if settings.get("AIR_SANDBOX_AHEAD", said) == "on":  # the launch's say, as for bwrap
            ahead = (view, command)
    if image is not None:  # the engine runs it: the contract's names pass into the container
        passed = [*thread_caps(1), *user_env(own if own is not None else spec.get("env") or {})]
        passed += [*gang.gang_env(), "CUDA_DEVICE_ORDER"]
        argv = container.job_argv(
            image,
            job_id,
            argv,
            jdir=jdir,
            cwd=cwd,
            env=env,
            gpus=gpus,
            passed=passed,
            data=data,
            writable=spec.get("writable") or (),
            home=os.fspath(home),
            kept=[jdir / n for n in KEPT_FILES],
        )
        cwd = os.fspath(jdir)
        env.update(image.engine_env)  # air's engine settings (engine_config.py), if any
        if image.fixes:
            said = ", ".join(f"{k}={v}" for k, v in image.engine_env.items())
            fixes = ", ".join(image.fixes)
            line = f"[air] {image.engine} runs with air's settings for: {fixes} ({said})\n"
            banner += line.encode()
    return CommandLaunch(argv, cwd, env, row.log_path, banner, ahead, slirp)


def _on_loopback(uri: str) -> bool:
    """Whether a tracking server's URI names this machine's loopback."""
    from urllib.parse import urlsplit

    host = (urlsplit(uri).hostname or "").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")


def _dev_args(gpus: list[int], env: dict[str, str]) -> list[str]:
    """The sandboxed job's /dev: its own GPUs' nodes only, where there are GPU nodes."""
    root = settings.get("AIR_SANDBOX_DEV_ROOT", env) or "/dev"
    return sandbox_devices.dev_args(gpus, root, _minors)


def _minors(gpus: list[int]) -> list[int]:
    """The GPUs' device-node numbers: NVML's minor numbers (an index is not always one)."""
    from air_skills.gpu.providers import provider

    found = provider()
    numbers = getattr(found, "minor_numbers", None)
    return numbers(gpus) if found.kind == "nvml" and numbers is not None else gpus


class DataRefusedAtStart(OSError):
    """A data input no longer resolves inside AIR_DATA_ROOTS as the job starts."""


def _data_at_start(jdir: Path, spec: dict[str, Any], launched: dict[str, str] | None) -> list[str]:
    """The real paths of the job's data inputs, resolved and checked against the roots (of
    the launch's environment) now, each ``$AIR_DATA_DIR/<name>`` link pointed at its checked
    path: a folder swapped for a symlink outside the roots since launch is refused here."""
    from air_skills.errors import DataPathRefused
    from air_skills.tracking.data import allowed_roots, resolve_inputs

    env = launched if launched is not None else os.environ
    roots = allowed_roots(settings.raw("AIR_DATA_ROOTS", env))
    try:
        resolved = resolve_inputs(spec["data"], spec.get("workdir"), roots, deep=False)
    except DataPathRefused as exc:
        said = "; ".join(getattr(exc, "problems", None) or [exc.message])
        raise DataRefusedAtStart(f"data inputs refused at start: {said}") from None
    # The job's folder is the last attempt's: ``data`` (or a link in it) may be a link the job
    # put there. Reached by descriptor, nothing followed: a ``data`` that is not a real folder
    # is removed (the link only, never what it points to) and made again, each input's link
    # replaced unless it names its checked path already.
    with JobFolder.open(jdir) as top:
        if not top.is_dir("data"):
            top.remove("data")
        with top.sub("data", create=True) as folder:
            for res in resolved:
                if folder.readlink(res.name) != res.real:
                    folder.symlink(res.real, res.name)
    return [res.real for res in resolved]


def _code_view(jdir: Path) -> tuple[str, str] | None:
    """(cwd inside the job's code view, snapshot digest); None for a ``code: live`` job."""
    try:
        record = read_job_json(jdir / "code.json")
    except (FileNotFoundError, ValueError):
        return None
    view = Path(record["view"])
    return os.fspath(view / record["cwd"] if record["cwd"] else view), record["digest"]
