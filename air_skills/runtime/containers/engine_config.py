"""The engine settings air applies itself: what podman's defaults fail on here, and the fix.

Stdlib only. Where the engine works but its defaults do not (rootful podman sets ulimits that
a process without CAP_SYS_RESOURCE cannot raise: ``error setting rlimit type 7``; a systemd
cgroup manager with no systemd; a default runtime that is not installed), a probe container
(the job's image, a command that does not exist: the engine's own failures come before the
command is looked up) names the fault, and air writes its own ``containers.conf`` overlay under
``AIR_HOME/containers`` and passes it to the engine (``CONTAINERS_CONF_OVERRIDE`` on podman
4.4 and later, ``CONTAINERS_CONF`` before). What was found is kept per engine binary, so the
probe runs once, and each job records the settings it ran with (its ``container.json``).
``AIR_CONTAINER_FIXES=off`` turns it off (the engine runs with its own configuration).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from air_skills import settings

PROBE_COMMAND = "/air-engine-probe-no-such-command"
PROBE_S = 60.0
FOLDER = "containers"  # under AIR_HOME
OVERLAY = "engine.conf"
CHOICE = "engine.json"


@dataclass(frozen=True)
class Fault:
    """A known way the engine's defaults fail, and the settings that avoid it."""

    name: str
    signatures: tuple[str, ...]  # lower-case text in the engine's error line
    settings: dict[str, dict[str, str]]  # containers.conf table -> key -> TOML value
    why: str
    needs: str | None = None  # an executable the fix needs on PATH


FAULTS: tuple[Fault, ...] = (
    Fault(
        "ulimits",
        ("error setting rlimit",),
        {"containers": {"default_ulimits": "[]"}},
        "the engine's default ulimits cannot be set here (no CAP_SYS_RESOURCE, e.g. inside"
        " a container): jobs keep the limits of the process that launches them",
    ),
    Fault(
        "cgroup-manager",
        ("systemd", "dbus", "sd-bus", "cgroup"),
        {"engine": {"cgroup_manager": '"cgroupfs"'}},
        "the engine's cgroup manager does not work here: cgroupfs is used",
    ),
    Fault(
        "runtime",
        ('"crun" not found', "crun: executable file not found", "no such file or directory: crun"),
        {"engine": {"runtime": '"runc"'}},
        "the engine's default OCI runtime (crun) is missing: runc is used",
        needs="runc",
    ),
)


@dataclass(frozen=True)
class EngineSetup:
    """What air passes to the engine for a job: ``env`` beside its own, and why."""

    fixes: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    seen: tuple[str, ...] = ()  # the engine's error lines that called for each fix


def match(line: str, skip: tuple[str, ...] = ()) -> Fault | None:
    """The known fault an engine error line names (None: not a known one)."""
    text = line.lower()
    for fault in FAULTS:
        if fault.name in skip or (fault.needs and shutil.which(fault.needs) is None):
            continue
        if any(sig in text for sig in fault.signatures):
            return fault
    return None


def overlay_text(fixes: tuple[str, ...]) -> str:
    """The containers.conf overlay for ``fixes``: one TOML table per section."""
    tables: dict[str, dict[str, str]] = {}
    for fault in FAULTS:
        if fault.name in fixes:
            for table, values in fault.settings.items():
                tables.setdefault(table, {}).update(values)
    parts = ["# Written by air (engine_config.py): the engine's defaults fail here."]
    for table, values in tables.items():
        parts.append(f"[{table}]")
        parts += [f"{key} = {value}" for key, value in values.items()]
    return "\n".join(parts) + "\n"


def setup_for(home: Path, engine: str, image_id: str, fresh: bool = False) -> EngineSetup:
    """The settings a job of ``engine`` needs here: kept from an earlier probe of the same
    engine binary, or probed now with ``image_id`` (``fresh``: probed again, as the doctor does).
    """
    if settings.get("AIR_CONTAINER_FIXES") == "off" or not engine.endswith("podman"):
        return EngineSetup()
    key = _binary_key(engine)
    folder = home / FOLDER
    if not fresh:
        kept = _read_choice(folder, key)
        if kept is not None:
            return kept
    fixes: list[str] = []
    seen: list[str] = []
    var = _overlay_variable(engine)
    for _ in range(len(FAULTS) + 1):
        env = _write_overlay(folder, tuple(fixes), var) if fixes else {}
        started, line = probe(engine, image_id, env)
        if started:
            setup = EngineSetup(tuple(fixes), env, tuple(seen))
            _write_choice(folder, key, setup)
            return setup
        fault = match(line, skip=tuple(fixes))
        if fault is None:  # not a known fault: the job runs as it is, and says the line
            break
        fixes.append(fault.name)
        seen.append(line)
    env = _write_overlay(folder, tuple(fixes), var) if fixes else {}
    return EngineSetup(tuple(fixes), env, tuple(seen))


def probe(engine: str, image: str, env: dict[str, str]) -> tuple[bool, str]:
    """Run ``image`` with a command that does not exist: (the container started, the engine's
    last error line). The command not found means the engine did its part."""
    name = f"air-probe-{uuid.uuid4().hex[:12]}"
    argv = [engine, "run", "--rm", "--name", name, "--network", "none", image, PROBE_COMMAND]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_S,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        subprocess.run([engine, "rm", "--force", name], capture_output=True, timeout=PROBE_S)
        return False, f"`{engine} run` took over {PROBE_S:.0f} s"
    except OSError as exc:
        return False, str(exc)
    line = error_line(done.stderr) or f"exit {done.returncode}"
    if done.returncode == 0:
        return True, ""
    return command_missing(line), line


def command_missing(line: str) -> bool:
    """Whether an engine error line says the command itself was not found or not runnable."""
    text = line.lower()
    return (
        any(
            s in text
            for s in (
                "executable file not found",
                "no such file or directory",
                "command that was not found",
                "permission denied: oci permission denied",
            )
        )
        and match(line) is None
    )


def error_line(text: str) -> str:
    """The engine's own error line in its output: the last ``Error:`` line, else the last."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    for line in reversed(lines):
        low = line.lower()
        if low.startswith(("error:", "docker: error")) or "oci runtime" in low:
            return line
    return lines[-1] if lines else ""


def _overlay_variable(engine: str) -> str:
    """CONTAINERS_CONF_OVERRIDE where podman reads it (4.4 and later), else CONTAINERS_CONF."""
    try:
        done = subprocess.run(
            [engine, "version", "--format", "{{.Client.Version}}"],
            capture_output=True,
            text=True,
            timeout=PROBE_S,
            stdin=subprocess.DEVNULL,
        )
        major, minor = (int(x) for x in done.stdout.strip().split(".")[:2])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return "CONTAINERS_CONF"
    return "CONTAINERS_CONF_OVERRIDE" if (major, minor) >= (4, 4) else "CONTAINERS_CONF"


def _write_overlay(folder: Path, fixes: tuple[str, ...], var: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'-'.join(fixes)}.conf"
    _atomic_write(path, overlay_text(fixes))
    return {var: os.fspath(path)}


def _binary_key(engine: str) -> str:
    binary = shutil.which(engine) or engine
    try:
        st = os.stat(binary)
    except OSError:
        return binary
    return f"{binary}:{st.st_size}:{st.st_mtime_ns}"


def _read_choice(folder: Path, key: str) -> EngineSetup | None:
    try:
        data = json.loads((folder / CHOICE).read_text())
        if data["key"] != key:
            return None
        env = {str(k): str(v) for k, v in data["env"].items()}
        if any(not Path(v).is_file() for v in env.values()):
            return None  # the overlay went away: probe again
        return EngineSetup(tuple(data["fixes"]), env, tuple(data.get("seen", ())))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_choice(folder: Path, key: str, setup: EngineSetup) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "fixes": list(setup.fixes), "env": setup.env, "seen": list(setup.seen)}
    _atomic_write(folder / CHOICE, json.dumps(record))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    tmp.write_text(text)
    os.replace(tmp, path)
