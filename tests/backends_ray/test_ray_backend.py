"""The Ray backend against a real local Ray head (one for the whole suite; see conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from air_skills.backends.images import IMAGE_HOLDS_CODE
from air_skills.errors import BackendUnavailable, InsufficientGpus, InvalidSpec, InvalidState
from air_skills.models import JobStatus

# Each starts a real Ray head (or uses the session's): end-to-end, minutes in all.
pytestmark = pytest.mark.slow

PY = sys.executable


def ray_cli(*args: str) -> list[str]:
    return [str(Path(PY).parent / "ray"), *args]


def status_of(client: Any, job_id: str) -> JobStatus:
    return client.get(job_id).status


def sid_of(client: Any, job_id: str) -> str:
    return client.store.row(job_id).backend_ref.split("@", 1)[0]


def hold(client: Any, workdir: Path, release: Path, **spec: Any) -> Any:
    return client.launch(
        {"command": [PY, "hold.py", str(release)], "workdir": str(workdir), "backend": "ray",
         "track": False, **spec}
    )  # fmt: skip


def test_launch_status_logs_and_mlflow_metrics(ray_client: Any, workdir: Path) -> None:
    spec = {
        "command": [PY, "report.py", "it's", "$(echo not-run)", "a b"],
        "workdir": str(workdir),
        "backend": "ray",
        "gpus": 2,
        "cpus": 1,
        "config": {"lr": 0.5, "opt": {"name": "adam"}},
        "config_as": "file",  # argv exactly as given: no --lr=0.5 flags after it
        "env": {"MY_VAR": "mine"},
        "experiment": "ray-exp",
        "idempotency_key": "ray-test-1",
    }
    info = ray_client.launch(spec)
    assert info.backend == "ray"
    assert info.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert ray_client.launch(spec).job_id == info.job_id  # same idempotency key, same job
    assert sid_of(ray_client, info.job_id) == "air-key-ray-test-1"

    done = ray_client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert done.exit_code == 0 and done.attempts == 1 and done.started_at is not None

    text = ray_client.logs(info.job_id, tail=None).text
    assert 'config {"lr": 0.5, "opt": {"name": "adam"}}' in text
    assert "argv " + json.dumps(["it's", "$(echo not-run)", "a b"]) in text  # no shell
    gpus = next(ln for ln in text.splitlines() if ln.startswith("env CUDA_VISIBLE_DEVICES="))
    assert len(gpus.split("=", 1)[1].split(",")) == 2
    assert "env OMP_NUM_THREADS=1" in text
    assert "env MY_VAR=mine" in text
    assert f"env MLFLOW_RUN_ID={done.run_id}" in text
    assert f"env AIR_CHECKPOINT_DIR={ray_client.home}/jobs/{info.job_id}/checkpoints" in text
    tail = ray_client.logs(info.job_id, tail=2)
    assert tail.text.splitlines() == ["---", "final_score: 0.75"]

    metrics = ray_client.metrics(info.job_id, history=True)
    assert metrics.latest["loss"] == pytest.approx(0.5 / 3)
    assert metrics.latest["final_score"] == 0.75  # the summary block, logged at the end
    assert [p[0] for p in metrics.history["loss"]] == [0, 1, 2]
    run = ray_client.tracker.client.get_run(done.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["opt.name"] == "adam"
    assert run.data.tags["air.job_id"] == info.job_id
    # what it ran on, as the node saw it (the fake GPUs have no model: counted only)
    hardware = ray_client.get(info.job_id).hardware
    assert hardware["backend"] == "ray" and hardware["gpu_count"] == 2, hardware
    assert hardware["host"] and hardware["cpu"]
    assert run.data.tags["air.hardware.backend"] == "ray"
    assert run.data.tags["air.hardware.gpu_count"] == "2"

    listed = ray_client.list().items
    assert [(i.job_id, i.backend) for i in listed] == [(info.job_id, "ray")]


def test_cli_launch_and_follow(ray_client: Any, workdir: Path, ray_head: Any) -> None:
    env = {**os.environ, "AIR_HOME": str(ray_client.home), "RAY_ADDRESS": ray_head.address}
    air = [PY, "-m", "air_skills.cli.app"]
    out = subprocess.run(
        [*air, "launch", "--backend", "ray", "--json", "--name", "hello", "--",
         PY, "-c", "print('hello from ray')"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)
    assert job["backend"] == "ray" and job["name"] == "hello"
    follow = subprocess.run(
        [*air, "logs", job["job_id"], "--follow"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    assert "hello from ray" in follow.stdout
    assert "SUCCEEDED" in follow.stderr
    ls = subprocess.run([*air, "ls", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert [j["status"] for j in json.loads(ls.stdout)] == ["SUCCEEDED"]


def test_logs_while_running_then_cancel(ray_client: Any, workdir: Path, tmp_path: Path) -> None:
    info = hold(ray_client, workdir, tmp_path / "never")
    wait_until(lambda: "line 3" in ray_client.logs(info.job_id).text, timeout_s=120)
    assert status_of(ray_client, info.job_id) == JobStatus.RUNNING
    chunk = ray_client.logs(info.job_id, tail=1)
    assert chunk.text.strip() == "line 3"
    rest = ray_client.logs(info.job_id, tail=None, offset=chunk.next_offset)
    assert rest.text == "" and rest.offset == chunk.next_offset

    cancelled = ray_client.cancel(info.job_id, reason="not needed")
    assert cancelled.status == JobStatus.CANCELLED
    assert cancelled.message == "CANCELLED: not needed"
    from ray.job_submission import JobSubmissionClient

    ray = JobSubmissionClient(os.environ["RAY_ADDRESS"])
    assert str(ray.get_job_status(sid_of(ray_client, info.job_id))) == "STOPPED"
    with pytest.raises(InvalidState):
        ray_client.cancel(info.job_id)
    assert "line 3" in ray_client.logs(info.job_id).text


@pytest.mark.slow
def test_gpu_slots_queue_and_survive_rays_start_timeout(
    ray_client: Any, workdir: Path, tmp_path: Path
) -> None:
    """Three 2-GPU jobs on 4 GPUs: the third waits, outlives Ray's start timeout, then runs."""
    releases = [tmp_path / f"release-{i}" for i in range(3)]
    jobs = [hold(ray_client, workdir, r, gpus=2).job_id for r in releases]

    def states() -> list[JobStatus]:
        return [i.status for i in ray_client.wait(jobs, timeout_s=0)]

    wait_until(lambda: sorted(states()).count(JobStatus.RUNNING) == 2, timeout_s=120)
    waiting = next(j for j in jobs if status_of(ray_client, j) == JobStatus.QUEUED)
    first_sid = sid_of(ray_client, waiting)
    assert "waiting for 2 GPU(s)" in ray_client.get(waiting).message
    # Ray fails a job that waited past its start timeout; it goes back in line, resubmitted.
    wait_until(
        lambda: ray_client.get(waiting) and sid_of(ray_client, waiting) != first_sid,
        timeout_s=120,
    )
    assert sid_of(ray_client, waiting) == first_sid + "-a2"
    assert status_of(ray_client, waiting) == JobStatus.QUEUED

    for job, release in zip(jobs, releases, strict=True):
        if job != waiting:
            release.touch()
            break
    wait_until(lambda: status_of(ray_client, waiting) == JobStatus.RUNNING, timeout_s=120)
    for release in releases:
        release.touch()
    done = ray_client.wait(jobs, timeout_s=120, any=False)
    assert [i.status for i in done] == [JobStatus.SUCCEEDED] * 3, [i.message for i in done]


def test_refuses_more_gpus_than_the_cluster(ray_client: Any, workdir: Path) -> None:
    with pytest.raises(InsufficientGpus) as err:
        ray_client.launch({"command": ["true"], "workdir": str(workdir), "backend": "ray",
                           "gpus": 5})  # fmt: skip
    assert "asks for 5 GPUs" in err.value.message
    assert "4 GPU" in err.value.message and "1 node" in err.value.message
    assert err.value.context["available"] == 4
    with pytest.raises(InvalidSpec) as err2:
        ray_client.launch({"command": ["true"], "workdir": str(workdir), "backend": "ray",
                           "cpus": 3})  # fmt: skip
    assert "cpus: 3 asked" in err2.value.message
    assert ray_client.list().items == []


def test_workdir_over_rays_limit_is_refused(
    ray_client: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.backends.ray import packaging

    monkeypatch.setattr(packaging, "WORKING_DIR_LIMIT_BYTES", 1024 * 1024)
    (workdir / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    with pytest.raises(InvalidSpec) as err:
        ray_client.launch({"command": ["true"], "workdir": str(workdir), "backend": "ray"})
    assert err.value.code == "workdir-too-large"
    assert "weights.bin (2.0 MiB)" in err.value.message and ".rayignore" in err.value.message
    assert ray_client.list().items == []


def test_reconciles_a_job_stopped_with_rays_cli(
    ray_client: Any, workdir: Path, tmp_path: Path
) -> None:
    info = hold(ray_client, workdir, tmp_path / "never")
    wait_until(lambda: status_of(ray_client, info.job_id) == JobStatus.RUNNING, timeout_s=120)
    stop = subprocess.run(
        ray_cli("job", "stop", "--address", os.environ["RAY_ADDRESS"],
                sid_of(ray_client, info.job_id)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert stop.returncode == 0, stop.stderr
    done = ray_client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.CANCELLED
    assert "stopped outside AIR" in done.message


def test_a_ray_job_deleted_behind_our_back(ray_client: Any, workdir: Path, tmp_path: Path) -> None:
    from ray.job_submission import JobSubmissionClient

    ray = JobSubmissionClient(os.environ["RAY_ADDRESS"])
    info = hold(ray_client, workdir, tmp_path / "never")
    wait_until(lambda: status_of(ray_client, info.job_id) == JobStatus.RUNNING, timeout_s=120)
    sid = sid_of(ray_client, info.job_id)
    ray.stop_job(sid)
    wait_until(lambda: ray.get_job_status(sid).is_terminal(), timeout_s=60)
    assert ray.delete_job(sid)  # before our next look: we never see it STOPPED
    gone = ray_client.get(info.job_id)
    assert gone.status == JobStatus.FAILED and gone.failure_kind == "infra"
    assert "no longer exists" in gone.message and sid in gone.message


def test_unreachable_cluster_is_retryable_and_fails_nothing(
    ray_client: Any, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.testing.ray_head import free_port

    info = hold(ray_client, workdir, tmp_path / "release")
    wait_until(lambda: status_of(ray_client, info.job_id) == JobStatus.RUNNING, timeout_s=120)
    real_ref = ray_client.store.row(info.job_id).backend_ref
    sid = real_ref.split("@")[0]
    dead = f"http://127.0.0.1:{free_port()}"
    # The cluster this job lives on goes away (nothing listens there now).
    assert ray_client.store.set_backend_ref(info.job_id, f"{sid}@{dead}", expected=real_ref)
    monkeypatch.delenv("RAY_ADDRESS")
    seen = ray_client.get(info.job_id)
    assert seen.status == JobStatus.RUNNING
    assert "[Ray unreachable" in seen.message
    with pytest.raises(BackendUnavailable) as err:
        ray_client.logs(info.job_id)
    assert err.value.retryable
    with pytest.raises(BackendUnavailable):
        ray_client.cancel(info.job_id)
    monkeypatch.setenv("RAY_ADDRESS", dead)
    with pytest.raises(BackendUnavailable) as err:
        ray_client.launch({"command": ["true"], "workdir": str(workdir), "backend": "ray"})
    assert err.value.retryable and dead in err.value.message
    assert [i.job_id for i in ray_client.list().items] == [info.job_id]
    assert status_of(ray_client, info.job_id) == JobStatus.RUNNING

    # Back on the real cluster, the record picks up where it was.
    assert ray_client.store.set_backend_ref(info.job_id, real_ref, expected=f"{sid}@{dead}")
    monkeypatch.setenv("RAY_ADDRESS", real_ref.split("@", 1)[1])
    (tmp_path / "release").touch()
    done = ray_client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED and "[Ray" not in done.message


def test_timeout_and_retries_on_ray(ray_client: Any, workdir: Path, tmp_path: Path) -> None:
    slow = hold(ray_client, workdir, tmp_path / "never", timeout_min=0.05)
    flaky = ray_client.launch(
        {"command": [PY, "flaky.py"], "workdir": str(workdir), "backend": "ray",
         "max_retries": 1, "track": False}
    )  # fmt: skip
    done = {i.job_id: i for i in ray_client.wait([slow.job_id, flaky.job_id], 120, any=False)}
    assert done[slow.job_id].status == JobStatus.TIMED_OUT, done[slow.job_id].message
    retried = done[flaky.job_id]
    assert retried.status == JobStatus.SUCCEEDED, retried.message
    assert retried.attempts == 2
    text = ray_client.logs(flaky.job_id, tail=None).text
    assert text.index("attempt 1") < text.index("[air] attempt 2") < text.index("attempt 2\n")
    kinds = [e["kind"] for e in ray_client.events(flaky.job_id)]
    assert "requeued-user" in kinds


def test_a_wrong_ray_token_is_refused_not_retried(
    ray_head: Any, air_home: Path, workdir: Path
) -> None:
    env = {
        **os.environ,
        "AIR_HOME": str(air_home),
        "RAY_ADDRESS": ray_head.address,
        "RAY_AUTH_TOKEN": "not-the-token-0123456789abcdef",
    }
    out = subprocess.run(
        [PY, "-m", "air_skills.cli.app", "launch", "--backend", "ray", "--json", "--", "true"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "backend-unavailable" and error["retryable"] is False
    assert "credentials" in error["message"] and "RAY_AUTH_TOKEN" in error["hint"]


def test_a_ray_jobs_image_id_is_recorded_at_launch(
    ray_client: Any, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image_id = "sha256:" + "ab" * 32
    fake = tmp_path / "bin" / "podman"  # this machine's engine, as far as the launch asks
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "image inspect" ] && echo {image_id} && exit 0\nexit 125\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("AIR_CONTAINER_ENGINE", raising=False)
    info = ray_client.launch(
        {"command": [PY, "hold.py", str(tmp_path / "never")], "workdir": str(workdir),
         "backend": "ray", "track": False, "image": "localhost/air-none:1"}
    )  # fmt: skip
    assert info.image_digest == image_id
    events = [e["message"] for e in ray_client.events(info.job_id) if e["kind"] == "image"]
    # Ray takes no working_dir beside image_uri: the image holds the code, no snapshot is taken.
    assert events == [f"image localhost/air-none:1 is {image_id}; {IMAGE_HOLDS_CODE}"]
    assert info.code is None
