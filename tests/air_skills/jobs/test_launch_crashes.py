"""A launcher killed at any step leaves a whole job or nothing: after one client call, no
half-made folder, no RUNNING MLflow run and no environment file of a job that does not exist
is left, and no recorded job lost its folder. Real `air launch` processes, killed (SIGKILL)
at a named step through ``AIR_TEST_CRASH_AT`` (runtime/process/faults.py), or while they wait on the
database lock that the test holds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec
from air_skills.runtime.launch import launch_intent
from air_skills.runtime.launch.orphans import sweep_orphans

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
SECRET = "s3cr3t-value"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A small code folder to launch from (its snapshot is the job's code view)."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "train.py").write_text("print('trained')\n")
    spec = {
        "command": ["sleep", "30"],
        "config": {"lr": 0.1},
        "env": {"API_KEY": SECRET},
        "track": True,
    }
    (folder / "job.yaml").write_text(json.dumps(spec))
    return folder


def air(home: Path, *args: str, crash_at: str | None = None, cwd: Path | None = None):
    """Run `air ARGS` in its own process (``crash_at``: the step where it kills itself)."""
    env = {**os.environ, "AIR_HOME": str(home)}
    env.pop("AIR_TEST_CRASH_AT", None)
    if crash_at:
        env["AIR_TEST_CRASH_AT"] = crash_at
    return subprocess.run(
        [AIR, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


# A launch through the Python API, which makes the job's MLflow run in its own process (the
# `air` CLI leaves it to the job's supervisor or claims a spare run: test_spare_runs.py).
LAUNCHER = [
    sys.executable,
    "-c",
    "import json; from air_skills import Client, JobSpec;"
    " print(Client().launch(JobSpec(**json.load(open('job.yaml')))).model_dump_json())",
]


def launch_killed_at(home: Path, work: Path, step: str) -> None:
    """A launch that dies (SIGKILL) at ``step``."""
    env = {**os.environ, "AIR_HOME": str(home), "AIR_TEST_CRASH_AT": step}
    proc = subprocess.run(LAUNCHER, capture_output=True, text=True, timeout=120, env=env, cwd=work)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


def mlflow_runs(home: Path) -> dict[str, tuple[str, str]]:
    """Every MLflow run of the home's store: job id -> (status, lifecycle stage)."""
    db = home / "mlflow.db"
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT t.value, r.status, r.lifecycle_stage FROM runs r JOIN tags t"
            " ON t.run_uuid = r.run_uuid AND t.key = 'air.job_id'"
        ).fetchall()
    finally:
        conn.close()
    return {job: (status, stage) for job, status, stage in rows}


def assert_nothing_left(home: Path) -> dict[str, str]:
    """Only whole jobs remain; returns the recorded jobs' statuses."""
    conn = sqlite3.connect(home / "air.db")
    try:
        jobs = dict(conn.execute("SELECT job_id, status FROM jobs").fetchall())
    finally:
        conn.close()
    names = set(os.listdir(home / "jobs")) - {launch_intent.INTENTS}
    assert names == set(jobs), f"folders {names} but records {set(jobs)}"
    assert os.listdir(launch_intent.intents_dir(home)) == []
    for job_id, status in jobs.items():
        jdir = home / "jobs" / job_id
        assert (jdir / "config.json").is_file()
        view = Path(json.loads((jdir / "code.json").read_text())["view"])
        assert view == jdir / "code" and (view / "train.py").is_file()
        if status in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"):
            assert not (jdir / "env.json").exists() and not (jdir / "job_env.json").exists()
    for job_id, (status, _) in mlflow_runs(home).items():
        assert job_id in jobs or status != "RUNNING", f"run of the lost {job_id} is RUNNING"
    for path in home.rglob("*"):
        if path.name in ("env.json", "job_env.json"):
            assert path.parent.name in jobs, f"{path} belongs to no job"
    return jobs


STEPS = [
    "prepare:intent",  # nothing made yet but the intent
    "prepare:folder",  # the temporary folder made (config, data, code view)
    "prepare:run-made",  # and the MLflow run, its id not yet noted (found by its tag)
    "prepare:run",  # its id noted
    "launch:locked",  # and the environment, holding the database lock
    "launch:placed",  # the folder renamed into place, before the COMMIT
]


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_a_launch_killed_before_its_commit_leaves_nothing(
    air_home: Path, work: Path, step: str
) -> None:
    assert air(air_home, "ls").returncode == 0
    launch_killed_at(air_home, work, step)
    assert air(air_home, "ls", "--json").returncode == 0  # one client call sweeps
    assert assert_nothing_left(air_home) == {}
    for status, _ in mlflow_runs(air_home).values():
        assert status == "KILLED"
    if step.startswith(("prepare:run", "launch:")):
        assert len(mlflow_runs(air_home)) == 1  # the run was made, and ended


@pytest.mark.slow
def test_a_launch_killed_after_its_commit_is_a_whole_job(air_home: Path, work: Path) -> None:
    launch_killed_at(air_home, work, "launch:committed")
    assert air(air_home, "ls", "--json").returncode == 0
    jobs = assert_nothing_left(air_home)
    assert len(jobs) == 1
    (job_id,) = jobs
    jdir = air_home / "jobs" / job_id
    # A live job keeps its environment (its values only in the owner-only file).
    assert SECRET in (jdir / "job_env.json").read_text()
    row = Client(air_home).store.row(job_id)
    assert SECRET not in row.spec and row.log_path == str(jdir / "output.log")
    assert mlflow_runs(air_home)[job_id][0] == "RUNNING"  # its job runs (or will)


@pytest.mark.slow
def test_a_launch_killed_while_waiting_on_the_lock_leaves_nothing(
    air_home: Path, work: Path
) -> None:
    assert air(air_home, "ls").returncode == 0
    holder = sqlite3.connect(air_home / "air.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        env = {**os.environ, "AIR_HOME": str(air_home)}
        env.pop("AIR_TEST_CRASH_AT", None)
        launcher = subprocess.Popen(LAUNCHER, cwd=work, env=env, stdout=subprocess.DEVNULL)
        try:
            # The environment is the last thing written before the transaction.
            wait_until(lambda: list((air_home / "jobs").glob(".tmp-*/env.json")), timeout_s=60)
            launcher.kill()
            launcher.wait(timeout=30)
        finally:
            if launcher.poll() is None:
                launcher.kill()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(mlflow_runs(air_home)) == 1
    assert air(air_home, "ls", "--json").returncode == 0
    assert assert_nothing_left(air_home) == {}
    assert [s for s, _ in mlflow_runs(air_home).values()] == ["KILLED"]


def test_a_whole_launch_leaves_no_intent_and_names_its_final_folder(client: Client) -> None:
    info = client.launch(JobSpec(command=["true"], track=False, env={"API_KEY": SECRET}))
    jdir = client.home / "jobs" / info.job_id
    assert info.log_path == str(jdir / "output.log")
    assert not list((client.home / "jobs").glob(".tmp-*"))
    assert launch_intent.pending(client.home) == []
    assert json.loads((jdir / "record.json").read_text())["log_path"] == info.log_path


def test_a_launch_in_progress_is_never_swept(client: Client) -> None:
    """An intent whose launcher lives (this process) is a launch in progress: left alone."""
    launch_intent.write(client.home, "job-00000000aa", track=False)
    build = launch_intent.build_dir(client.home, "job-00000000aa")
    build.mkdir()
    assert sweep_orphans(client.runtime, force=True) == 0
    assert build.is_dir() and launch_intent.pending(client.home) == ["job-00000000aa"]


def test_an_ended_jobs_environment_files_are_removed_by_a_thorough_sweep(
    client: Client,
) -> None:
    """A job that ended under an older version kept its environment: `air doctor` removes it."""
    info = client.launch(JobSpec(command=["true"], track=False))
    wait_until(lambda: client.get(info.job_id).status.is_terminal())
    jdir = client.home / "jobs" / info.job_id
    (jdir / "env.json").write_text("{}")
    sweep_orphans(client.runtime, force=True)
    assert (jdir / "env.json").exists()  # the regular sweep reads only the intents
    sweep_orphans(client.runtime, force=True, thorough=True)
    assert not (jdir / "env.json").exists()


# --- a full disk while the job's folder is written --------------------------------------------


def test_a_full_disk_while_writing_the_job_folder_is_named_and_leaves_nothing(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_DISK_RESERVE_MB", "0")  # no reserve: the write itself fails
    home = small_disk / "home"
    assert air(home, "ls").returncode == 0
    st = os.statvfs(small_disk)
    with open(small_disk / "filler", "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 200 * 1024))
    work = tmp_path / "work"
    work.mkdir()
    # The folder's first files fit; the environment's values (written last) do not.
    big = {"command": ["true"], "track": False, "code": "live", "env": {"BIG": "y" * 300_000}}
    (work / "big.json").write_text(json.dumps(big))
    proc = air(home, "launch", "--json", "big.json", cwd=work)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "disk-full" and str(home) in error["context"]["path"]
    assert error["message"].startswith("the disk is full writing ")
    assert set(os.listdir(home / "jobs")) <= {launch_intent.INTENTS}
    assert launch_intent.pending(home) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "step", ["prepare:folder", "launch:locked", "launch:placed", "launch:committed"]
)
def test_a_sweep_killed_in_its_groups_transaction_leaves_all_or_nothing(
    air_home: Path, work: Path, step: str
) -> None:
    """A sweep's items are queued LAUNCH_GROUP at a time in one transaction (batch.py,
    LocalBackend.queue_group): killed with the first item's folder built (prepare:folder),
    with every item's folder built (locked), or with one renamed into place (placed), none is
    queued and the next call sweeps every folder; killed after the COMMIT, all five are whole
    jobs. The group has one intent, listing its five jobs (launch_intent.write_group)."""
    assert air(air_home, "ls").returncode == 0
    argv = ["launch", "--gpus", "0", "--seeds", "0,1,2,3,4", "--", "sleep", "30"]
    proc = air(air_home, *argv, crash_at=step, cwd=work)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    intents = os.listdir(launch_intent.intents_dir(air_home))
    assert len(intents) == 1, intents  # the group's, no intent per job
    members = json.loads((launch_intent.intents_dir(air_home) / intents[0]).read_text())["group"]
    assert len(members) == 5
    built = {p.name.removeprefix(".tmp-") for p in (air_home / "jobs").glob(".tmp-job-*")}
    assert built <= set(members)
    if step != "launch:committed":  # built, not recorded
        assert len(built) >= (1 if step == "prepare:folder" else 4)
    assert air(air_home, "ls", "--json").returncode == 0  # one client call sweeps
    jobs = assert_nothing_left(air_home)
    assert len(jobs) == (5 if step == "launch:committed" else 0), jobs
