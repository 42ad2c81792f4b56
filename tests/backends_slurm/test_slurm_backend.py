"""The Slurm backend on a real single-node cluster: launch, logs, MLflow, exit codes, cancel,
timeout, a submitter killed -9, a node daemon killed (infra retry), priorities, dry runs,
refusals, and the MCP tools on a Slurm job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import JobSpec, JobStatus

PY = sys.executable

REPORT = textwrap.dedent(
    """\
    import json, os
    cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
    print("config", json.dumps(cfg, sort_keys=True))
    for key in ("AIR_JOB_ID", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "SLURM_JOB_ID", "MY_VAR"):
        print(f"env {key}={os.environ.get(key)}")
    print("---")
    print("final_score: 0.75")
    """
)


def _spec(tmp_path: Path, code: str, **kw: object) -> JobSpec:
    script = tmp_path / "job.py"
    script.write_text(code)
    return JobSpec(command=[PY, str(script)], workdir=str(tmp_path), **kw)  # type: ignore[arg-type]


def _done(client, job_id: str, timeout_s: float = 90.0):
    (info,) = client.wait([job_id], timeout_s=timeout_s, any=False)
    assert info.status.is_terminal(), f"{job_id} still {info.status}: {info.message}"
    return info


def test_a_job_runs_on_slurm_with_what_a_local_job_receives(slurm_client, tmp_path: Path) -> None:
    spec = _spec(tmp_path, REPORT, gpus=2, config={"lr": 0.1}, env={"MY_VAR": "x"}, cpus=1)
    info = slurm_client.launch(spec)
    assert info.backend == "slurm"
    done = _done(slurm_client, info.job_id)
    log = slurm_client.logs(info.job_id, tail=50).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert 'config {"lr": 0.1}' in log
    assert f"env AIR_JOB_ID={info.job_id}" in log
    assert "env CUDA_VISIBLE_DEVICES=0,1" in log  # the GPUs Slurm gave it
    assert "env OMP_NUM_THREADS=1" in log
    assert "env MY_VAR=x" in log
    assert "env SLURM_JOB_ID=None" not in log
    launch = Path(slurm_client.store.row(info.job_id).log_path).parent / "slurm-launch.json"
    assert launch.stat().st_mode & 0o077 == 0  # it holds the job's environment: owner-only
    hardware = slurm_client.get(info.job_id).hardware  # what the node says it ran on
    assert hardware["backend"] == "slurm" and hardware["gpu_count"] == 2, hardware
    assert hardware["host"] and hardware["cpu"]
    if done.run_id:  # the summary block's value is on the job's MLflow run
        run = slurm_client.tracker.client.get_run(done.run_id)
        assert run.data.metrics["final_score"] == 0.75
        assert run.data.tags["air.hardware.backend"] == "slurm"


def test_a_failing_command_is_failed_with_its_exit_code(slurm_client, tmp_path: Path) -> None:
    info = slurm_client.launch(_spec(tmp_path, "import sys; print('bad'); sys.exit(3)"))
    done = _done(slurm_client, info.job_id)
    assert done.status == JobStatus.FAILED
    assert done.exit_code == 3
    assert "exit code 3" in done.message


def test_cancel_stops_the_slurm_job(slurm_client, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    code = f"import time, pathlib; pathlib.Path({str(marker)!r}).touch(); time.sleep(300)"
    # It writes a marker outside its folder: unsandboxed (sandbox: off), as the owner may.
    info = slurm_client.launch(_spec(tmp_path, code, sandbox="off"))
    wait_until(marker.exists, timeout_s=60)
    cancelled = slurm_client.cancel(info.job_id, reason="test")
    assert cancelled.status == JobStatus.CANCELLED
    sid = slurm_client.store.row(info.job_id).backend_ref.split(":", 1)[1]

    def gone() -> bool:
        out = subprocess.run(
            ["squeue", "-h", "-j", sid, "-o", "%T"], capture_output=True, text=True
        ).stdout
        return "RUNNING" not in out

    wait_until(gone, timeout_s=30)


def test_dry_run_shows_the_sbatch_options_and_submits_nothing(slurm_client, tmp_path) -> None:
    spec = _spec(tmp_path, "print(1)", gpus=1, timeout_min=2.5, priority="high", cpus=2)
    info = slurm_client.launch(spec, dry_run=True)
    assert "--gres=gpu:1" in info.message and "--time=2:30" in info.message
    assert "--nice=0" in info.message and "--cpus-per-task=2" in info.message
    assert slurm_client.store.rows("") == []  # nothing recorded, nothing submitted


def test_a_submitter_killed_after_sbatch_is_found_again(slurm_client, tmp_path, air_home) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('ran on slurm')")
    launcher = textwrap.dedent(
        f"""\
        from air_skills import Client, JobSpec
        Client().launch(JobSpec(command=[{PY!r}, {str(script)!r}], workdir={str(tmp_path)!r},
                                backend="slurm"))
        """
    )
    env = {**os.environ, "AIR_TEST_CRASH_AT": "slurm:submitted", "AIR_HOME": str(air_home)}
    proc = subprocess.run([PY, "-c", launcher], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    (row,) = slurm_client.store.rows("WHERE backend='slurm'")
    assert row.backend_ref is None  # killed before it noted the Slurm id
    done = _done(slurm_client, row.job_id)
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "ran on slurm" in slurm_client.logs(row.job_id, tail=10).text
    kinds = [e["kind"] for e in slurm_client.store.events(row.job_id)]
    assert "slurm-adopted" in kinds


def test_a_job_slurm_forgot_is_settled_from_its_files(slurm_client, tmp_path) -> None:
    from air_skills.backends.slurm.reconcile import settle

    info = slurm_client.launch(_spec(tmp_path, "print('done')"))
    jdir = Path(slurm_client.store.row(info.job_id).log_path).parent
    wait_until(lambda: (jdir / "slurm-exit.json").exists(), timeout_s=60)
    row = slurm_client.store.row(info.job_id)
    settle(slurm_client.runtime, row, "999999", None)  # as if squeue and scontrol forgot it
    final = slurm_client.get(info.job_id)
    assert final.status == JobStatus.SUCCEEDED
    assert json.loads((jdir / "slurm-exit.json").read_text())["exit_code"] == 0


@pytest.mark.slow
def test_timeout_min_becomes_slurms_time_limit(slurm_client, tmp_path) -> None:
    info = slurm_client.launch(_spec(tmp_path, "import time; time.sleep(600)", timeout_min=1))
    done = _done(slurm_client, info.job_id, timeout_s=240)
    assert done.status == JobStatus.TIMED_OUT, done.message


@pytest.mark.slow
def test_a_killed_node_daemon_is_an_infra_retry(slurm, slurm_client, tmp_path) -> None:
    marker = tmp_path / "attempts"
    code = textwrap.dedent(
        f"""\
        import os, pathlib, time
        seen = pathlib.Path({str(marker)!r})
        first = seen.read_text().split()[0] if seen.exists() else os.environ["SLURM_JOB_ID"]
        with open({str(marker)!r}, "a") as f:
            f.write(os.environ["SLURM_JOB_ID"] + "\\n")
        time.sleep(40 if os.environ["SLURM_JOB_ID"] == first else 1)
        """
    )
    info = slurm_client.launch(_spec(tmp_path, code, sandbox="off"))  # its marker: outside
    wait_until(marker.exists, timeout_s=60)
    slurm.kill_slurmd()
    try:
        wait_until(
            lambda: (
                slurm_client.get(info.job_id).message.startswith("QUEUED")
                and slurm_client.store.row(info.job_id).infra_retries >= 1
            ),
            timeout_s=120,
            every_s=1,
        )
    except AssertionError:
        row = slurm_client.store.row(info.job_id)
        raise AssertionError((row.status, row.message, slurm_client.store.events(info.job_id)))
    finally:
        slurm.start_slurmd()
        slurm.wait_idle()
    done = _done(slurm_client, info.job_id, timeout_s=180)
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert len(set(marker.read_text().split())) == 2  # two Slurm jobs: the retry was new


@pytest.mark.slow
def test_priorities_order_two_jobs_waiting_on_a_full_node(slurm_client, tmp_path) -> None:
    gate = tmp_path / "gate"
    order = tmp_path / "order"
    hold = f"import time, pathlib\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.1)"
    blocker = slurm_client.launch(_spec(tmp_path, hold, cpus=2))  # reads the gate only
    wait_until(lambda: slurm_client.get(blocker.job_id).status == JobStatus.RUNNING, 60)
    note = f"import sys\nopen({str(order)!r}, 'a').write(sys.argv[1] + '\\n')"
    script = tmp_path / "note.py"
    script.write_text(note)
    low = slurm_client.launch(
        JobSpec(
            command=[PY, str(script), "low"],
            workdir=str(tmp_path),
            cpus=2,
            priority="low",
            sandbox="off",  # it notes its turn outside its folder
        )
    )
    high = slurm_client.launch(
        JobSpec(
            command=[PY, str(script), "high"],
            workdir=str(tmp_path),
            cpus=2,
            priority="high",
            sandbox="off",
        )
    )
    gate.touch()
    for job in (blocker, low, high):
        assert _done(slurm_client, job.job_id).status == JobStatus.SUCCEEDED
    assert order.read_text().split() == ["high", "low"]


def test_air_doctor_reports_the_cluster(slurm_client) -> None:
    from air_skills.cli.doctor import run_doctor

    report = run_doctor(slurm_client)
    (check,) = [c for c in report["checks"] if c["name"] == "slurm"]
    assert check["status"] == "ok", check
    assert "sinfo answers: 1 node(s)" in check["detail"]


GANG = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()}/{os.environ['WORLD_SIZE']} sum {t.item()}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_two_process_gang_runs_inside_one_allocation(slurm_client, tmp_path) -> None:
    pytest.importorskip("torch")
    spec = JobSpec(command=[PY, "-c", GANG], procs=2, cpus=2, track=False, backend="slurm")
    info = slurm_client.launch(spec)
    done = _done(slurm_client, info.job_id, timeout_s=240)
    log = slurm_client.logs(info.job_id, tail=100).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert "[rank0]: rank 0/2 sum 3.0" in log and "[rank1]: rank 1/2 sum 3.0" in log


def test_the_same_experiment_is_not_submitted_twice(slurm_client, tmp_path) -> None:
    """Issue 29: a launch that asks for the duplicate check is refused before sbatch."""
    from air_skills.errors import AirError

    first = slurm_client.launch(_spec(tmp_path, REPORT, config={"lr": 0.2}))
    assert _done(slurm_client, first.job_id).status == JobStatus.SUCCEEDED
    with pytest.raises(AirError) as refused:
        slurm_client.launch(_spec(tmp_path, REPORT, config={"lr": 0.2}, allow_duplicate=False))
    assert refused.value.code == "duplicate" and refused.value.context["job_id"] == first.job_id
    assert refused.value.context["result"]["metrics"] == {"final_score": 0.75}
    assert len(slurm_client.list(limit=10).items) == 1
