"""AIR_HOME keeps its secrets from other users, and never silently loses or leaves a job."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import GATED, open_gate, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import StoreError
from air_skills.runtime.process import proc
from air_skills.runtime.store.rebuild import rebuild_records
from air_skills.runtime.store.store import Store

PY = sys.executable
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to uid 65534: needs root")
def test_another_user_cannot_read_the_home_or_a_jobs_secret(
    air_home: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # Under /tmp, not pytest's 0700 tmp_path: only AIR_HOME's own modes may keep others out.
    base = Path(tempfile.mkdtemp(prefix="air-home-safety-"))
    base.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    home = base / "home"
    monkeypatch.setenv("AIR_HOME", str(home))
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the job writes what it got outside its folder
    secret = "sk-" + os.urandom(12).hex()
    seen = base / "seen"
    # Runs until the checks below are done (its gate): they look at a running job's files.
    code = GATED + f"open({str(seen)!r}, 'w').write(os.environ['API_KEY'])\n"
    client = Client(home)
    info = client.launch(JobSpec(command=[PY, "-c", code], env={"API_KEY": secret}, track=False))
    jdir = home / "jobs" / info.job_id
    assert as_nobody("cat", str(home / "air.db")).returncode != 0
    assert as_nobody("ls", str(jdir)).returncode != 0
    found = as_nobody("grep", "-r", "-l", secret, str(base))
    assert str(home) not in found.stdout, found.stdout
    assert client.get(info.job_id).status == JobStatus.RUNNING  # all the above while it ran
    open_gate(jdir)
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert seen.read_text() == secret  # the job still received its env
    # Not even the owner's files keep it once the job has ended: the record holds the name.
    assert (home / "air.db").stat().st_mode & 0o077 == 0
    for path in home.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert '"API_KEY"' in Store(home).row(info.job_id).spec


def _run_job_in_subprocess(home: Path, code: str) -> str:
    env = {**os.environ, "AIR_HOME": str(home), "AIR_SUPERVISOR_LINGER_S": "0"}
    out = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_emptied_state_database_is_an_error_and_records_can_be_rebuilt(air_home: Path) -> None:
    job_id = _run_job_in_subprocess(
        air_home,
        "from air_skills import Client, JobSpec\n"
        "c = Client()\n"
        "i = c.launch(JobSpec(command=['true'], name='kept-name', track=False))\n"
        "c.wait([i.job_id], timeout_s=60)\n"
        "print(i.job_id)",
    )
    store = Store(air_home)
    sup = store.row(job_id).supervisor_pid
    store.close()
    wait_until(lambda: not proc.alive(sup, None), 30)  # nothing holds the database open
    (air_home / "air.db").write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        Path(f"{air_home / 'air.db'}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreError) as err:
        Client(air_home).list()
    assert "job folders" in err.value.message and "--rebuild" in err.value.hint
    assert rebuild_records(air_home) == [job_id]
    (info,) = Client(air_home).list().items
    assert info.job_id == job_id and info.name == "kept-name"
    assert info.status == JobStatus.FAILED and "rebuilt" in info.message


@pytest.mark.slow
def test_job_whose_supervisor_died_has_its_mlflow_run_ended(air_home: Path) -> None:
    client = Client(air_home)
    info = client.launch(JobSpec(command=["sleep", "60"], track=True))
    row = wait_until(lambda: (r := Store(air_home).row(info.job_id)).job_pid and r, 60)
    assert row.run_id
    os.kill(row.supervisor_pid, signal.SIGKILL)
    proc.kill_group(row.job_pid)
    wait_until(lambda: not proc.alive(row.supervisor_pid, row.supervisor_start), 10)
    # No infra retry left: settling the lost job ends it (reconcile runs in `air ls`).
    env = {**os.environ, "AIR_HOME": str(air_home), "AIR_MAX_INFRA_RETRIES": "0"}
    subprocess.run(
        [PY, "-c", "from air_skills import Client; Client().list()"], env=env, check=True
    )
    assert Store(air_home).row(info.job_id).status == "FAILED"
    from mlflow.tracking import MlflowClient

    from air_skills.tracking.mlflow import tracking_uri

    run = MlflowClient(tracking_uri(air_home)).get_run(row.run_id)
    assert run.info.status == "FAILED"
