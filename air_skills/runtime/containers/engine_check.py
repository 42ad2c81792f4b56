"""`air doctor`'s container check: the engine answers, and a real container runs.

Stdlib only. The container is a tiny image built here, offline, from busybox-static (a root file
system of its applets, imported by the engine: no registry); the run uses the settings air would
give a job (engine_config.py), probed afresh, so the report says what fails and what air applies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from air_skills import settings
from air_skills.runtime.containers import engine_config
from air_skills.runtime.containers.container import ENGINES, _call, engine_problem, user_args

IMAGE = "localhost/air-busybox:1"
BUILD_S = 120.0
RUN_S = 60.0


def busybox_image(engine: str, tag: str = IMAGE) -> tuple[str | None, str]:
    """(the image's ID, "") built from busybox-static if it is not here yet; (None, why not)."""
    found = _image_id(engine, tag)
    if found:
        return found, ""
    busybox = shutil.which("busybox")
    if busybox is None:
        return None, "busybox-static is not installed (apt-get install busybox-static)"
    with tempfile.TemporaryDirectory(prefix="air-image-") as tmp:
        root = Path(tmp) / "root"
        (root / "bin").mkdir(parents=True)
        shutil.copy2(os.path.realpath(busybox), root / "bin" / "busybox")
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, timeout=30)
        for name in applets.stdout.split():
            if name != "busybox":
                (root / "bin" / name).symlink_to("busybox")
        for folder in ("tmp", "proc", "sys", "dev", "etc"):
            (root / folder).mkdir()
        tar = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar, "w") as t:
            t.add(root, arcname=".")
        argv = [engine, "import", "--change", "ENV=PATH=/bin", os.fspath(tar), tag]
        if engine.endswith("docker"):
            argv = [engine, "import", "--change", "ENV PATH=/bin", os.fspath(tar), tag]
        try:
            done = _call(argv, timeout=BUILD_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"`{engine} import` failed: {exc}"
    if done.returncode != 0:
        return None, f"`{engine} import` failed: {engine_config.error_line(done.stderr)}"
    found = _image_id(engine, tag)
    return (found, "") if found else (None, f"{tag} is not listed after `{engine} import`")


def _image_id(engine: str, tag: str) -> str | None:
    try:
        done = _call([engine, "image", "inspect", "--format", "{{.Id}}", tag], timeout=RUN_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    ident = done.stdout.strip()
    return ident.splitlines()[0] if done.returncode == 0 and ident else None


def doctor_check(home: Path) -> dict[str, str]:
    """The engine answers (`info`) and runs a container; only a chosen engine that fails is a
    failure (jobs without an image need none)."""
    name = "container engine"
    chosen = settings.raw("AIR_CONTAINER_ENGINE")
    engine, problem = engine_problem()
    if problem is not None:
        if not chosen and not any(shutil.which(e) for e in ENGINES):
            detail = "none found (podman or docker); only jobs with an image need one"
            return {"name": name, "status": "ok", "detail": detail, "next": ""}
        return {
            "name": name,
            "status": "fail" if chosen else "warn",
            "detail": problem,
            "next": "install podman (apt-get install podman runc), or fix the engine's"
            " configuration, or set AIR_CONTAINER_ENGINE",
        }
    image, why = busybox_image(engine)
    if image is None:
        detail = f"`{engine} info` works, but no container was run: {why}"
        return {"name": name, "status": "warn", "detail": detail, "next": why}
    setup = engine_config.setup_for(home, engine, image, fresh=True)
    argv = [engine, "run", "--rm", "--network", "none", *user_args(engine), image, "true"]
    try:
        done = _call(argv, timeout=RUN_S, env=setup.env)
        line = engine_config.error_line(done.stderr) or f"exit {done.returncode}"
        ran = done.returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        ran, line = False, str(exc)
    applied = ""
    if setup.fixes:
        why_fixed = "; ".join(setup.seen)
        applied = (
            f", with air's engine settings for {', '.join(setup.fixes)} (its defaults failed:"
            f" {why_fixed}; {', '.join(f'{k}={v}' for k, v in setup.env.items())})"
        )
    if ran:
        detail = f"{engine} works: ran a container of {IMAGE}{applied}"
        return {"name": name, "status": "ok", "detail": detail, "next": ""}
    return {
        "name": name,
        "status": "fail",
        "detail": f"{engine} cannot run a container of {IMAGE}{applied}: {line}",
        "next": f"fix the engine ({engine} run --rm {IMAGE} true must work), or set"
        " AIR_CONTAINER_ENGINE to another engine; jobs without an image are not affected",
    }
