"""Ray backend parts that need no cluster: quoting, ids, the package check, settings, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from air_skills.backends.ray import packaging, refs
from air_skills.backends.ray.backend import RayBackend
from air_skills.backends.ray.settings import configure
from air_skills.errors import BackendUnavailable, InvalidInput
from air_skills.testing.ray_head import free_port


def test_entrypoint_runs_the_argv_without_a_shell(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))",
            "it's", "$(touch pwned)", "a  b", "`id`", ";", "&&", "*"]  # fmt: skip
    env = {
        **os.environ,
        "AIR_CHECKPOINT_DIR": str(tmp_path / "job" / "checkpoints"),
        "AIR_DATA_DIR": str(tmp_path / "job" / "data"),
        "AIR_CONFIG_FILE": str(tmp_path / "job" / "config.json"),
        "AIR_CONFIG_JSON": json.dumps({"lr": 0.1, "note": "100% $HOME 'quoted'"}),
    }
    out = subprocess.run(
        ["/bin/sh", "-c", RayBackend.entrypoint(argv)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    first, *_, last = out.stdout.splitlines()
    assert json.loads(last) == argv[3:]
    assert first.startswith("[air] hardware {")  # the node's record, the log's first line
    assert not (tmp_path / "pwned").exists()
    config = json.loads((tmp_path / "job" / "config.json").read_text())
    assert config == {"lr": 0.1, "note": "100% $HOME 'quoted'"}
    assert (tmp_path / "job" / "checkpoints").is_dir()


def test_submission_ids() -> None:
    assert refs.submission_id("job-0123456789", None) == "air-job-0123456789"
    assert refs.submission_id("job-0123456789", None, 3) == "air-job-0123456789-a3"
    assert refs.submission_id("job-0123456789", "sweep-1.trial_2") == "air-key-sweep-1.trial_2"
    odd = refs.submission_id("job-0123456789", "a/b c?")
    assert odd.startswith("air-key-") and len(odd) == len("air-key-") + 32
    assert refs.split_ref("air-x@http://h:8265") == ("air-x", "http://h:8265")
    assert refs.split_ref(None) == (None, None)


def test_working_dir_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setattr(packaging, "WORKING_DIR_LIMIT_BYTES", 1024 * 1024)
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert packaging.working_dir_problem(str(tmp_path)) is None
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "w.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    problem = packaging.working_dir_problem(str(tmp_path))
    assert problem is not None
    assert "over Ray's 1.0 MiB limit" in problem and "ckpt (2.0 MiB)" in problem
    (tmp_path / ".rayignore").write_text("ckpt/\n")
    assert packaging.working_dir_problem(str(tmp_path)) is None
    (tmp_path / ".rayignore").unlink()
    (tmp_path / ".venv").mkdir()  # Ray leaves .venv, .git and __pycache__ out by default
    (tmp_path / "ckpt" / "w.bin").rename(tmp_path / ".venv" / "w.bin")
    assert packaging.working_dir_problem(str(tmp_path)) is None


def test_ray_not_installed_names_the_extra(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray.job_submission", None)
    with pytest.raises(BackendUnavailable) as err:
        client.launch({"command": ["true"], "workdir": str(tmp_path), "backend": "ray"})
    assert "pip install 'air-skills[ray]'" in err.value.hint
    assert not err.value.retryable
    assert client.list().items == []


def test_default_backend_and_address_from_air_home(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray.job_submission")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    dead = f"http://127.0.0.1:{free_port()}"
    settings = configure(client.store, backend="ray", address=dead)
    assert settings["backend"] == "ray" and settings["ray_address"] == dead
    with pytest.raises(BackendUnavailable) as err:  # no backend named: AIR_HOME's default
        client.launch({"command": ["true"], "workdir": str(tmp_path)})
    assert dead in err.value.message and err.value.retryable
    other = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", other)  # the environment wins over the setting
    with pytest.raises(BackendUnavailable) as err:
        client.launch({"command": ["true"], "workdir": str(tmp_path)})
    assert other in err.value.message
    local = client.launch({"command": ["true"], "workdir": str(tmp_path), "backend": "local"})
    assert local.backend == "local"
    assert client.wait([local.job_id], timeout_s=60)[0].status.value == "SUCCEEDED"
    assert configure(client.store, backend="", address="")["backend"] is None
    with pytest.raises(InvalidInput) as bad:
        configure(client.store, backend="kubernetes", job_root="relative/path")
    assert "kubernetes" in bad.value.message and "absolute" in bad.value.message
    assert configure(client.store, backend="slurm")["backend"] == "slurm"  # a backend now


def test_config_command(air_home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    argv = [sys.executable, "-m", "air_skills.backends.ray", "config"]
    out = subprocess.run(
        [*argv, "--backend", "ray", "--address", "http://head:8265", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ray_address"] == "http://head:8265"
    bad = subprocess.run(
        [*argv, "--backend", "kubernetes"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "[invalid-input]" in bad.stderr


FAKE_ID = "sha256:" + "ab" * 32


def _engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inspect: str | None) -> None:
    """A stand-in `podman` alone on PATH: ``image inspect`` prints ``inspect`` (None: no such
    image), and a pull fails (no registry here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if inspect is not None:
        answer = f'[ "$1 $2" = "image inspect" ] && echo {inspect} && exit 0'
    else:
        answer = '[ "$1 $2" = "image inspect" ] && echo "Error: no such image" >&2 && exit 1'
    script = bin_dir / "podman"
    script.write_text(f"#!/bin/sh\n{answer}\necho 'Error: no registry here' >&2\nexit 125\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("AIR_CONTAINER_ENGINE", raising=False)


def test_ray_image_id_is_recorded_when_an_engine_here_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.backends.ray.image import resolve_ray_image
    from air_skills.models import JobSpec

    spec = JobSpec(command=["python", "t.py"], image="localhost/train:1", backend="ray")
    _engine(tmp_path, monkeypatch, FAKE_ID)
    resolved, image, note = resolve_ray_image(spec)
    assert resolved.image_digest == FAKE_ID and image is not None and image.image_id == FAKE_ID
    assert note == f"image localhost/train:1 is {FAKE_ID}"
    pinned = spec.model_copy(update={"image_digest": "cd" * 8})
    with pytest.raises(InvalidInput) as err:  # a pin the image no longer has: refused
        resolve_ray_image(pinned)
    assert err.value.code == "image-digest-mismatch"


@pytest.mark.parametrize("engine", [False, True])
def test_ray_image_without_an_id_here_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: bool
) -> None:
    from air_skills.backends.ray.image import resolve_ray_image
    from air_skills.models import JobSpec

    spec = JobSpec(command=["python", "t.py"], image="localhost/train:1", backend="ray")
    if engine:  # an engine that neither has the image nor can pull it
        _engine(tmp_path, monkeypatch, None)
    else:
        monkeypatch.setenv("PATH", str(tmp_path))
        monkeypatch.delenv("AIR_CONTAINER_ENGINE", raising=False)
    resolved, image, note = resolve_ray_image(spec)
    assert resolved.image_digest is None and image is None
    assert note.startswith("image localhost/train:1: ID not recorded (")
    assert note.endswith("Ray's nodes pull it by name")
    assert ("could not be pulled" if engine else "no container engine found") in note
