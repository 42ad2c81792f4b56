"""`air launch --backend slurm` from a shell keeps MLflow out of the launching process: with
no spare run the home's tracking writer makes the job's run before sbatch, with one it is
claimed and completed after sbatch (slurm/backend.py), or at the job's end when the launcher
was killed in between; either way the job has its run id from its first instruction, and the
run holds the job's name, tags and params."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from air_skills.runtime.store.store import Store

FIRST = "import os; print('run', os.environ.get('MLFLOW_RUN_ID'))\n"
PROBE = (
    "import json, sys\n"
    "from air_skills.cli.fast import answer\n"
    "code = answer(sys.argv[1:])\n"
    "heavy = [m for m in ('mlflow', 'pydantic', 'typer') if m in sys.modules]\n"
    "print(heavy, file=sys.stderr)\n"
    "sys.exit(code or (3 if heavy else 0))\n"
)


def _launch(work: Path, env: dict[str, str], killed: bool = False) -> dict:
    args = ["launch", "--backend", "slurm", "--code", "live", "--set", "lr=0.1", "--json"]
    args += ["--allow-duplicate", "--", sys.executable, "first.py"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=work, env=env
    )
    if killed:  # AIR_TEST_CRASH_AT: killed -9 just after sbatch
        assert done.returncode == -9, (done.stdout, done.stderr)
        return {}
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def _wait(what, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_a_cli_launch_on_slurm_never_imports_mlflow(slurm, air_home, tmp_path) -> None:
    from air_skills import Client

    env = {**os.environ, "SLURM_CONF": str(slurm.conf)}
    os.environ["SLURM_CONF"] = str(slurm.conf)
    work = tmp_path / "work"
    work.mkdir()
    (work / "first.py").write_text(FIRST)
    store = Store(air_home)
    jobs = [_launch(work, env)]  # no spare: the writer makes the run
    assert jobs[0]["run_id"]
    # the pool's spares, made by the writer meanwhile: the next launch claims one
    _wait(lambda: store.read("SELECT count(*) AS n FROM spare_runs")[0]["n"] >= 1)
    jobs.append(_launch(work, env))
    # a launcher killed after sbatch, before it handed its claimed run on: the job's end
    # completes the run from the plan it left (backends/settle.py)
    _wait(lambda: store.read("SELECT count(*) AS n FROM spare_runs")[0]["n"] >= 1)
    _launch(work, {**env, "AIR_TEST_CRASH_AT": "slurm:submitted"}, killed=True)
    client = Client(air_home)
    (row,) = [r for r in client.store.rows("WHERE backend='slurm'") if r.job_id not in
              {j["job_id"] for j in jobs}]  # fmt: skip
    assert row.run_id  # the claimed spare
    jobs.append({"job_id": row.job_id, "run_id": row.run_id, "name": row.name})
    for job in jobs:
        (done,) = client.wait([job["job_id"]], timeout_s=120, any=False)
        log = client.logs(job["job_id"], tail=20).text
        assert done.status.value == "SUCCEEDED", (done.message, log)
        assert done.run_id == job["run_id"]
        assert f"run {done.run_id}" in log  # the job's first instruction knew it
    tracker = client.tracker
    for job in jobs:  # completed from the plan (the claimed one after sbatch, by the writer)
        run = _wait(lambda j=job: _completed(tracker, j["run_id"], j["job_id"]))
        assert run.data.params["lr"] == "0.1"
        assert run.info.run_name == job["name"]


def _completed(tracker, run_id: str, job_id: str):
    run = tracker.client.get_run(run_id)
    return run if run.data.tags.get("air.job_id") == job_id and run.data.params else None


def test_a_plain_cli_launch_on_slurm_takes_the_light_path(slurm, air_home, tmp_path) -> None:
    """`air launch --backend slurm` without --json (41.5): the real `air` process, timed by
    its own imports, loads neither typer, rich nor MLflow, prints the job's line, and the job
    runs on the cluster with its run id from its first instruction."""
    from air_skills import Client

    work = tmp_path / "work"
    work.mkdir()
    (work / "first.py").write_text(FIRST)
    air = str(Path(sys.executable).parent / "air")
    args = ["launch", "--backend", "slurm", "--code", "live", "--name", "plain", "--"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", air, *args, sys.executable, "first.py"],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, "SLURM_CONF": str(slurm.conf)},
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert done.returncode == 0, done.stderr[-2000:]
    assert not {"typer", "rich", "click", "mlflow"} & imported, sorted(imported)
    job_id, status, gpus, message = done.stdout.rstrip("\n").split("  ", 3)
    assert done.stdout.count("\n") == 1 and gpus == "gpus=-" and message, done.stdout
    client = Client(air_home)
    (row,) = client.store.rows("WHERE backend='slurm'")
    assert row.job_id == job_id and row.name == "plain"
    assert status in ("QUEUED", "RUNNING", "SUCCEEDED")
    (info,) = client.wait([job_id], timeout_s=120, any=False)
    log = client.logs(job_id, tail=20).text
    assert info.status.value == "SUCCEEDED", (info.message, log)
    assert info.run_id and f"run {info.run_id}" in log
