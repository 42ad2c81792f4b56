"""Infra failures on Slurm: NCCL's signatures in a failed job's log and a node drained under
the job are retried as infra and noted in `air gpus`; a job Slurm forgot is asked of sacct,
and settled from its files where the cluster keeps no accounting (this one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import JobSpec, JobStatus
from air_skills.backends.slurm import commands

PY = sys.executable

# One failed attempt, then a good one: the marker tells the attempts apart.
FLAKY = """\
import os, pathlib, sys, time
marker = pathlib.Path({marker!r})
if not marker.exists():
    marker.write_text(os.environ["SLURM_JOB_ID"])
    gate = pathlib.Path({gate!r})
    while {wait} and not gate.exists():
        time.sleep(0.1)
    print({line!r}, flush=True)
    sys.exit(3)
print("second attempt ok")
"""

WATCHDOG = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds"
)


def _flaky(tmp_path: Path, line: str, wait: bool = False) -> JobSpec:
    script = tmp_path / "job.py"
    marker, gate = str(tmp_path / "marker"), str(tmp_path / "gate")
    script.write_text(FLAKY.format(marker=marker, gate=gate, wait=wait, line=line))
    # Its marker lies outside its folder: unsandboxed (sandbox: off), as the owner may.
    return JobSpec(command=[PY, str(script)], workdir=str(tmp_path), track=False, sandbox="off")


def _done(client, job_id: str, timeout_s: float = 180.0):
    (info,) = client.wait([job_id], timeout_s=timeout_s, any=False)
    assert info.status.is_terminal(), f"{job_id} still {info.status}: {info.message}"
    return info


@pytest.mark.slow
def test_an_nccl_signature_in_the_log_is_an_infra_retry_noted_in_air_gpus(
    slurm, slurm_client, tmp_path, air_home
) -> None:
    info = slurm_client.launch(_flaky(tmp_path, WATCHDOG))  # max_retries 0: no user retry
    done = _done(slurm_client, info.job_id)
    row = slurm_client.store.row(info.job_id)
    assert done.status == JobStatus.SUCCEEDED, (done.message, slurm_client.store.events(row.job_id))
    assert row.infra_retries == 1 and row.user_retries == 0
    requeued = [e for e in slurm_client.store.events(row.job_id) if e["kind"] == "requeued-infra"]
    assert "NCCL watchdog" in requeued[0]["message"] and "reason: nccl" in requeued[0]["message"]
    (line,) = slurm_client.excluded_nodes()
    assert line.startswith(f"Slurm node {slurm.host} excluded from job {info.job_id}'s retries")
    assert "UTC: a collective timed out (NCCL watchdog)" in line
    from mcp_server.tools import list_gpus

    assert list_gpus(slurm_client).notes == [line]  # the MCP reply says it too
    shown = subprocess.run(
        [str(Path(PY).parent / "air"), "gpus"],
        env={**os.environ, "AIR_HOME": str(air_home), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert f"Slurm node {slurm.host} excluded from job {info.job_id}" in shown.stdout, shown


@pytest.mark.slow
def test_an_attempt_that_ended_before_air_saw_it_run_is_counted(slurm, slurm_client, tmp_path):
    """Issue 37.15, the cause of the flaky test above: at load, the first attempt ran and failed
    between two of air's looks; its record was still QUEUED, so the retry went uncounted (no
    requeue) and the job ended SUCCEEDED with infra_retries 0."""
    info = slurm_client.launch(_flaky(tmp_path, WATCHDOG))
    sid = slurm_client.store.row(info.job_id).backend_ref.split(":", 1)[1]
    # Slurm's own view only: nothing of air looks until the attempt has ended
    ended = wait_until(lambda: (j := commands.show(sid)) and j.state == "FAILED", timeout_s=90)
    assert ended and slurm_client.store.row(info.job_id).status == "QUEUED"
    done = _done(slurm_client, info.job_id)
    row = slurm_client.store.row(info.job_id)
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert row.infra_retries == 1 and row.user_retries == 0 and row.attempts == 2
    kinds = [e["kind"] for e in slurm_client.store.events(info.job_id)]
    assert kinds.count("requeued-infra") == 1 and kinds.count("slurm-submitted") == 2


@pytest.mark.slow
def test_a_node_drained_under_a_failed_job_is_an_infra_retry(slurm, slurm_client, tmp_path):
    info = slurm_client.launch(_flaky(tmp_path, "lost my node?", wait=True))
    wait_until((tmp_path / "marker").exists, timeout_s=90)
    update = ["scontrol", "update", f"nodename={slurm.host}"]
    subprocess.run([*update, "state=drain", "reason=air-test"], check=True)
    try:
        (tmp_path / "gate").touch()
        wait_until(
            lambda: (
                slurm_client.get(info.job_id)
                and slurm_client.store.row(info.job_id).infra_retries >= 1
            ),
            timeout_s=90,
            every_s=0.5,
        )
    finally:
        subprocess.run([*update, "state=resume"], check=True)
    done = _done(slurm_client, info.job_id)
    assert done.status == JobStatus.SUCCEEDED, done.message
    requeued = [e for e in slurm_client.store.events(info.job_id) if e["kind"] == "requeued-infra"]
    assert f"node {slurm.host} (drain" in requeued[0]["message"], requeued


def test_a_job_slurm_forgot_is_settled_from_its_files_without_accounting(slurm_client, tmp_path):
    assert commands.accounting(["1"]) is None  # accounting_storage/none: sacct says disabled
    script = tmp_path / "job.py"
    script.write_text("print('done')")
    info = slurm_client.launch(JobSpec(command=[PY, str(script)], track=False))
    row = slurm_client.store.row(info.job_id)
    jdir = Path(row.log_path).parent
    wait_until((jdir / "slurm-exit.json").exists, timeout_s=90)
    # As if squeue, scontrol and sacct had all forgotten it: an id Slurm never gave.
    fresh = slurm_client.store.row(info.job_id)
    assert slurm_client.store.set_backend_ref(
        info.job_id, "slurm:999999", expected=fresh.backend_ref
    )
    assert slurm_client.get(info.job_id).status == JobStatus.SUCCEEDED


# sacct -n -X --parsable2 -o JobID,State,ExitCode,NodeList, in the format Slurm documents
# (written by hand: this cluster keeps no accounting to capture from).
SACCT = textwrap.dedent(
    """\
    4242|COMPLETED|0:0|gpu-a01
    4243|CANCELLED by 1000|0:15|gpu-a02
    4244|NODE_FAIL|0:0|gpu-a[03-04]
    4245|FAILED|1:0|gpu-a05
    4246|PENDING|0:0|None assigned
    4245.batch|FAILED|1:0|gpu-a05
    """
)


def test_sacct_lines_are_read_as_slurm_jobs() -> None:
    jobs = commands.parse_sacct(SACCT)
    assert sorted(jobs) == ["4242", "4243", "4244", "4245", "4246"]
    assert jobs["4243"].state == "CANCELLED" and jobs["4243"].signal == 15
    assert jobs["4244"].state == "NODE_FAIL" and jobs["4244"].node == "gpu-a[03-04]"
    assert jobs["4245"].exit_code == 1 and jobs["4246"].node == ""
