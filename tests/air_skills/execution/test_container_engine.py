"""The engine settings air applies itself, `air doctor`'s real container, and engine errors
quoted as the engine's (real podman, no containers.conf set by the tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.containers import container, engine_config

RLIMIT = (
    "Error: runc: runc create failed: unable to start container process: error during container"
    " init: error setting rlimits for ready process: error setting rlimit type 7: operation not"
    " permitted: OCI permission denied"
)
MISSING = (
    'Error: runc: runc create failed: unable to start container process: exec: "/nope": stat'
    " /nope: no such file or directory: OCI runtime attempted to invoke a command that was not"
    " found"
)


def _air(*args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["air", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize(
    ("line", "fault", "missing"),
    [
        (RLIMIT, "ulimits", False),
        (
            "Error: cannot open sd-bus: No such file or directory: OCI not found",
            "cgroup-manager",
            False,
        ),
        (
            "Error: systemd cgroup flag passed, but systemd support for managing cgroups is"
            " not available: OCI runtime error",
            "cgroup-manager",
            False,
        ),
        (MISSING, None, True),
        ("Error: some other engine trouble", None, False),
    ],
)
def test_known_engine_faults_are_told_from_a_missing_command(
    line: str, fault: str | None, missing: bool
) -> None:
    found = engine_config.match(line)
    assert (found.name if found else None) == fault
    assert engine_config.command_missing(line) is missing


def test_the_overlay_holds_one_table_per_section() -> None:
    text = engine_config.overlay_text(("ulimits", "cgroup-manager"))
    assert "[containers]\ndefault_ulimits = []" in text
    assert '[engine]\ncgroup_manager = "cgroupfs"' in text
    assert text.count("[containers]") == 1


def test_simulated_gpus_ask_the_engine_for_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    assert container.gpu_args("podman", [0, 1]) == []
    monkeypatch.delenv("AIR_SIMULATED_GPUS")
    assert container.gpu_args("podman", [1]) == ["--device", "nvidia.com/gpu=1"]


def test_doctor_runs_a_real_container_and_says_what_it_applied(podman: str, air_home: Path) -> None:
    done = _air("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    check = checks["container engine"]
    assert check["status"] == "ok", check
    assert "ran a container" in check["detail"]
    choice = json.loads((air_home / "containers" / "engine.json").read_text())
    for fix in choice["fixes"]:  # what this machine needed, said in the report
        assert fix in check["detail"]


def test_a_job_on_simulated_gpus_runs_with_the_settings_recorded(
    podman: str, client: Client
) -> None:
    info = client.launch(JobSpec(command=["sh", "-c", "echo in-the-box"], image=podman, gpus=1))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    record = container.load(client.home / "jobs" / info.job_id)
    assert record is not None
    choice = json.loads((client.home / "containers" / "engine.json").read_text())
    assert list(record.fixes) == choice["fixes"] and record.engine_env == choice["env"]
    log = Path(done.log_path or "").read_text()
    assert "in-the-box" in log
    assert ("air's settings" in log) is bool(record.fixes)


def test_an_engine_failure_is_reported_with_the_engines_line(
    podman: str, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With air's settings off, an engine whose defaults fail here fails the job with its own
    line, never as the image being unable to run the command."""
    image_id = container.image_id("podman", podman)
    needed = engine_config.setup_for(client.home, "podman", image_id)
    if not needed.fixes:
        pytest.skip("podman's defaults work on this machine: no engine failure to report")
    monkeypatch.setenv("AIR_CONTAINER_FIXES", "off")
    info = client.launch(JobSpec(command=["sh", "-c", "true"], image=podman, track=False))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.FAILED and done.failure_kind == "infra", done.message
    assert needed.seen[0].split(": ")[-2] in done.message, done.message
    assert "cannot run the command" not in done.message and "air doctor" in done.message
