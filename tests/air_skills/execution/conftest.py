"""Real podman for the container tests: an image built here from busybox-static, no registry,
and no containers.conf of the tests' own (air applies what the engine needs: engine_config.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from air_skills.runtime.containers import engine_check

IMAGE = "localhost/air-test-busybox:1"


def _podman_missing() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (`make install` adds podman, runc, busybox-static)"
    if shutil.which("runc") is None:
        return "runc is not installed (`make install` adds it)"
    if shutil.which("busybox") is None:
        return "busybox-static is not installed (`make install` adds it)"
    return None


@pytest.fixture(scope="session")
def busybox_image() -> str:
    """localhost/air-test-busybox:1: a root file system of busybox-static and its applets,
    built by the same code as `air doctor`'s test image."""
    why = _podman_missing()
    if why:
        pytest.skip(why)
    ident, why = engine_check.busybox_image("podman", IMAGE)
    if ident is None:
        pytest.skip(f"podman cannot import an image here: {why}")
    return IMAGE


def podman_containers() -> list[str]:
    """The names of air's containers (jobs and probes) that podman has, running or not."""
    done = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    return [n for n in done.stdout.split() if n.startswith("air-") and "probe" not in n]


@pytest.fixture
def podman(busybox_image: str, monkeypatch: pytest.MonkeyPatch, air_home: Path) -> Iterator[str]:
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.delenv("CONTAINERS_CONF_OVERRIDE", raising=False)
    monkeypatch.setenv("AIR_CONTAINER_ENGINE", "podman")
    yield busybox_image
    for name in podman_containers():
        subprocess.run(["podman", "rm", "--force", "--time", "0", name], capture_output=True)
