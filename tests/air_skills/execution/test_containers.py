"""Container jobs with real podman: an image built here from busybox-static, no registry, and no
containers.conf set by the tests (conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import InvalidInput
from air_skills.runtime.containers import container
from air_skills.runtime.containers.container import ContainerJob, Mount
from air_skills.runtime.process.proc import alive


def _containers() -> list[str]:
    done = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    return [n for n in done.stdout.split() if n.startswith("air-") and "probe" not in n]


def _container_id(name: str) -> str | None:
    done = subprocess.run(
        ["podman", "ps", "--all", "--filter", f"name=^{name}$", "--format", "{{.ID}}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None


def _spec(command: list[str], image: str, **kw: object) -> JobSpec:
    return JobSpec(command=command, image=image, track=False, **kw)  # type: ignore[arg-type]


def _log(info: object) -> str:
    return Path(info.log_path).read_text()  # type: ignore[attr-defined]


# --- the engine argv: no engine needed ---------------------------------------------------


def test_gpu_flags_for_podman_and_docker() -> None:
    assert container.gpu_args("podman", [1, 3]) == [
        "--device",
        "nvidia.com/gpu=1",
        "--device",
        "nvidia.com/gpu=3",
    ]
    assert container.gpu_args("docker", [1, 3]) == ["--gpus", '"device=1,3"']
    assert container.gpu_args("podman", []) == []


def test_run_argv_on_a_simulated_pool(tmp_path: Path) -> None:
    """Two GPUs of a simulated pool: CDI devices, renumbered from 0 inside, env by name only."""
    job = ContainerJob("podman", "localhost/x:1", "sha256:" + "a" * 64)
    jdir = tmp_path / "jobs" / "job-1"
    (jdir / "data").mkdir(parents=True)
    argv = container.job_argv(
        job,
        "job-1",
        ["python", "train.py"],
        jdir=jdir,
        cwd=str(tmp_path / "code"),
        env={"AIR_JOB_ID": "job-1", "SECRET": "s3cret", "CUDA_VISIBLE_DEVICES": "2,3"},
        gpus=[2, 3],
        passed=["SECRET"],
    )
    assert argv[:4] == ["podman", "run", "--name", "air-job-1"]
    assert argv[argv.index("--workdir") + 1] == container.WORKDIR
    assert f"{tmp_path / 'code'}:{container.WORKDIR}:ro" in argv  # a live tree: read-only
    assert f"{jdir}:{jdir}" in argv
    assert argv.count("--device") == 2 and "nvidia.com/gpu=2" in argv
    assert "CUDA_VISIBLE_DEVICES=0,1" in argv
    assert "SECRET" in argv and not any("s3cret" in a for a in argv)  # values stay out
    assert argv[-4:] == ["--", job.image_id, "python", "train.py"]
    docker = container.job_argv(
        ContainerJob("docker", "x", job.image_id),
        "job-1",
        ["true"],
        jdir=jdir,
        cwd=None,
        env={},
        gpus=[2, 3],
        passed=[],
    )
    assert docker[docker.index("--gpus") + 1] == '"device=2,3"'


def test_http_tracking_uses_the_host_network_and_a_local_store_is_never_mounted(
    tmp_path: Path,
) -> None:
    jdir = tmp_path / "j"
    jdir.mkdir()
    job = ContainerJob("podman", "x", "sha256:" + "b" * 64)
    common = {"jdir": jdir, "cwd": None, "gpus": [], "passed": []}
    http = container.job_argv(
        job, "j", ["true"], env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}, **common
    )
    assert http[http.index("--network") + 1] == "host"
    store = tmp_path / "store"
    sqlite = container.job_argv(
        job, "j", ["true"], env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}/mlflow.db"}, **common
    )
    # The job logs to its own store, relayed by its supervisor (metric_relay.py).
    assert "--network" not in sqlite and not any(str(store) in a for a in sqlite)


def test_a_mount_that_would_hide_the_working_directory_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        container.check_mounts([Mount("/data/x", "/air")])
    assert err.value.code == "mount-hides-workdir"
    container.check_mounts([Mount("/data/x", "/data/x"), Mount("/air/other", "/air/other")])


def test_a_missing_engine_is_refused_with_what_doctor_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AIR_CONTAINER_ENGINE", "docker")
    with pytest.raises(InvalidInput) as err:
        container.engine_name()
    assert err.value.code == "container-engine-missing" and err.value.exit_code == 2
    assert "air doctor" in (err.value.hint or "")
    engine, problem = container.engine_problem()
    assert engine == "docker" and problem and "not on PATH" in problem


# --- real podman ------------------------------------------------------------------------------


def test_a_job_in_an_image_sees_its_code_config_env_and_data(
    podman: str, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.txt").write_text("the code\n")
    data = tmp_path / "data" / "shards"
    data.mkdir(parents=True)
    (data / "part-0").write_text("the data\n")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(tmp_path / "data"))
    cat = client.launch(_spec(["cat", "train.txt"], podman, workdir=str(code)))
    jobs = str(client.home / "jobs")
    found = ["find", "-L", jobs, "(", "-name", "config.json", "-o", "-path", "*/data/*", ")"]
    found += ["-type", "f", "-exec", "cat", "{}", "+"]
    seen = client.launch(
        _spec(
            found,
            podman,
            workdir=str(code),
            config={"lr": 0.5},
            config_as="file",  # find takes no --lr=0.5 (config_as's default `both` adds it)
            data=[{"name": "shards", "path": str(data)}],
        )
    )
    env = client.launch(_spec(["env"], podman, workdir=str(code), env={"MY_FLAG": "on"}))
    infos = client.wait([cat.job_id, seen.job_id, env.job_id], timeout_s=120, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 3, [i.message for i in infos]
    assert _log(infos[0]).strip().endswith("the code")
    assert '"lr": 0.5' in _log(infos[1]) and "the data" in _log(infos[1])
    lines = set(_log(infos[2]).splitlines())
    assert f"AIR_JOB_ID={env.job_id}" in lines and "MY_FLAG=on" in lines
    assert "PYTHONUNBUFFERED=1" in lines and "OMP_NUM_THREADS=1" in lines
    assert infos[0].image == podman and (infos[0].image_digest or "").startswith("sha256:")
    assert _containers() == []  # each removed once it ended


def test_exit_codes_come_back_and_a_missing_command_is_told_apart(
    podman: str, client: Client
) -> None:
    fails = client.launch(_spec(["false"], podman))
    missing = client.launch(_spec(["no-such-program"], podman))
    own_127 = client.launch(_spec(["sh", "-c", "exit 127"], podman))
    a, b, c = client.wait([fails.job_id, missing.job_id, own_127.job_id], timeout_s=120, any=False)
    assert (a.status, a.exit_code, a.failure_kind) == (JobStatus.FAILED, 1, "user")
    assert b.status == JobStatus.FAILED and b.exit_code == 127 and b.failure_kind == "user"
    assert "has no command 'no-such-program'" in b.message, b.message
    assert c.exit_code == 127 and "its own code failed" in c.message, c.message  # the job's own
    assert _containers() == []


def test_cancel_stops_and_removes_the_container(podman: str, client: Client) -> None:
    info = client.launch(_spec(["sleep", "300"], podman))
    name = container.container_name(info.job_id)
    wait_until(lambda: name in _containers(), timeout_s=60)
    started = time.monotonic()
    out = client.cancel(info.job_id, reason="test")
    assert out.status == JobStatus.CANCELLED, out.message
    assert time.monotonic() - started < 30
    assert name not in _containers()


def test_a_supervisor_killed_with_sigkill_leaves_no_container(podman: str, client: Client) -> None:
    info = client.launch(_spec(["sleep", "300"], podman))
    name = container.container_name(info.job_id)
    wait_until(lambda: name in _containers(), timeout_s=60)
    row = client.store.row(info.job_id)
    assert row is not None and row.supervisor_pid
    os.kill(row.supervisor_pid, signal.SIGKILL)
    wait_until(lambda: not alive(row.supervisor_pid, row.supervisor_start), timeout_s=10)
    lost = _container_id(name)
    assert lost
    client.list()  # any client call reconciles the lost supervisor
    # Whichever process reconciled first (this one, or an idle supervisor's pass) removes it.
    # The job is an infra failure and may be retried at once under the same name: the lost
    # attempt's container is the one that must be gone, told apart by its container ID.
    wait_until(lambda: _container_id(name) != lost, timeout_s=30)
    client.cancel(info.job_id, reason="test")


def test_an_unknown_image_is_refused_at_launch(podman: str, client: Client, air_home: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        client.launch(_spec(["true"], "localhost/air-no-such-image:0"))
    assert err.value.code == "image-unknown" and err.value.exit_code == 2
    assert client.list().items == []
    done = subprocess.run(
        ["air", "launch", "--image", "localhost/air-no-such-image:0", "--", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 2, done.stderr
    assert "[image-unknown]" in done.stderr + done.stdout


@pytest.mark.slow
def test_the_image_id_is_on_the_mlflow_run_and_a_relaunch_pins_it(
    podman: str, client: Client
) -> None:
    info = client.launch(JobSpec(command=["true"], image=podman))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert done.image_digest and done.run_id
    tags = client.tracker.client.get_run(done.run_id).data.tags
    assert tags["air.image"] == podman and tags["air.image.digest"] == done.image_digest
    again = client.launch(_spec(["true"], podman, image_digest=done.image_digest))
    assert again.image_digest == done.image_digest
    with pytest.raises(InvalidInput) as err:
        client.launch(_spec(["true"], podman, image_digest="sha256:" + "0" * 64))
    assert err.value.code == "image-digest-mismatch"


def test_air_images_lists_the_image_and_the_jobs_that_used_it(podman: str, client: Client) -> None:
    info = client.launch(_spec(["true"], podman))
    client.wait([info.job_id], timeout_s=120)
    done = subprocess.run(
        ["air", "images", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    mine = [r for r in rows if podman in r["names"]]
    assert mine and info.job_id in mine[0]["jobs"] and mine[0]["size"]


def test_a_long_lived_launcher_keeps_an_image_id_only_while_the_store_is_unchanged(
    podman: str,
) -> None:
    from air_skills.runtime.containers import image_cache

    tag = "localhost/air-test-moving:1"
    binary = shutil.which("podman")  # answers are kept per executable
    assert binary is not None
    first = container.image_id("podman", podman)
    assert first.startswith("sha256:")
    wait_until(lambda: image_cache.store_stamp(binary) is not None)
    assert container.image_id("podman", podman) == first
    stamp = image_cache.store_stamp(binary)
    assert image_cache.cached_id(binary, podman, stamp) == first  # no inspect next time
    # Re-point a tag at another image: the store changes, so the name is asked again.
    other = subprocess.run(
        ["podman", "commit", "--quiet", "--change", "ENV=MOVED=1", _a_container(podman)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        subprocess.run(["podman", "tag", podman, tag], check=True)
        assert container.image_id("podman", tag) == first
        subprocess.run(["podman", "tag", other, tag], check=True)
        assert image_cache.cached_id(binary, tag, image_cache.store_stamp(binary)) is None
        moved = container.image_id("podman", tag)
        assert moved != first and moved.removeprefix("sha256:").startswith(other[:12])
    finally:
        subprocess.run(["podman", "rmi", "--force", tag, other], capture_output=True)


def _a_container(image: str) -> str:
    """A stopped container of ``image`` (removed by the fixture), for `podman commit`."""
    name = "air-test-commit"
    subprocess.run(["podman", "rm", "--force", name], capture_output=True)
    subprocess.run(
        ["podman", "create", "--name", name, image, "true"], check=True, capture_output=True
    )
    return name
