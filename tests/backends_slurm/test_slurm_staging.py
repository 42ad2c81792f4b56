"""A home the Slurm nodes cannot read: the job runs from its copy on AIR_SLURM_SHARED_DIR, and
its output is fetched back into the job's folder, where `air logs` pages it as usual."""

from __future__ import annotations

import sys
from pathlib import Path

from air_skills import JobSpec, JobStatus
from air_skills.backends.slurm.staging import stage_dir

PY = sys.executable

JOB = """\
import json, os, pathlib
print("config", json.load(open(os.environ["AIR_CONFIG_FILE"])))
print("config file", os.environ["AIR_CONFIG_FILE"])
print("cwd", os.getcwd())
pathlib.Path(os.environ["AIR_CHECKPOINT_DIR"], "step-1.pt").write_text("w")
for i in range(300):
    print(f"line {i}")
"""


def test_a_job_runs_from_the_shared_folder_and_its_log_comes_back(
    slurm_client, tmp_path, air_home, monkeypatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("AIR_SLURM_SHARED_DIR", str(shared))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(JOB)
    spec = JobSpec(command=[PY, "train.py"], workdir=str(project), config={"lr": 0.5}, track=False)
    info = slurm_client.launch(spec)
    sdir = stage_dir(air_home, info.job_id)
    assert sdir == shared / "air-jobs" / info.job_id
    (done,) = slurm_client.wait([info.job_id], timeout_s=120, any=False)
    log = slurm_client.logs(info.job_id, tail=400).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    # The node read its copies on the shared folder: config, code view, checkpoints there.
    assert "config {'lr': 0.5}" in log
    assert f"config file {sdir / 'config.json'}" in log
    assert f"cwd {sdir / 'code'}" in log
    assert (sdir / "checkpoints" / "step-1.pt").exists()
    # The job folder's log is the staged one, fetched whole: paging from an offset works.
    jdir = Path(slurm_client.store.row(info.job_id).log_path).parent
    assert (jdir / "output.log").read_bytes() == (sdir / "output.log").read_bytes()
    assert "line 299" in log and "line 0" in log
    chunk = slurm_client.logs(info.job_id, offset=0, tail=None)
    assert chunk.text.startswith("[air] Slurm job ")
    assert (jdir / "slurm-exit.json").exists()
    found = slurm_client.search_log(info.job_id, r"line 29\d$", max_matches=20)
    assert found.total == 10, found  # grep reads the fetched log
