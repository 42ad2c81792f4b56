"""Issue 37.11 on the real single-node Slurm: a Slurm job runs under the same sandbox as a local
one (AIR_HOME hidden, its metrics relayed into its run); a sandboxed job is refused where no
sandbox can be made, never run bare; an identity uses only the backends it was granted."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from air_skills import JobSpec, JobStatus
from air_skills.runtime.execution import sandbox
from air_skills.runtime.store.identities import Forbidden, Identity

PY = sys.executable
pytestmark = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)
SPY = textwrap.dedent(
    """\
    import os, sys
    home = os.environ["AIR_HOME"]
    for name in ("air.db", "mlflow.db"):
        try:
            open(os.path.join(home, name), "rb").read(16)
            print(f"read {name}", flush=True)
        except OSError as exc:
            print(f"no {name}: {type(exc).__name__}", flush=True)
    print("token" if "AIR_MCP_TOKEN" in os.environ else "no token", flush=True)
    import mlflow
    mlflow.log_metric("loss", 0.25)
    """
)


def test_a_slurm_job_runs_sandboxed_and_its_metrics_reach_its_run(
    slurm_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_MCP_TOKEN", "owner-token-of-the-submitter")
    (tmp_path / "spy.py").write_text(SPY)
    spec = JobSpec(command=[PY, "spy.py"], workdir=str(tmp_path))
    info = slurm_client.launch(spec)
    (done,) = slurm_client.wait([info.job_id], timeout_s=120, any=False)
    log = slurm_client.logs(info.job_id, tail=50).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert done.sandbox and done.sandbox.startswith("bwrap"), done.sandbox
    assert "read air.db" not in log and "no air.db: FileNotFoundError" in log
    assert "no token" in log
    assert slurm_client.metrics(info.job_id).latest["loss"] == 0.25  # relayed on reconcile


def test_a_sandboxed_slurm_job_is_refused_where_no_sandbox_can_be_made(
    slurm_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.errors import AirError

    monkeypatch.setenv("AIR_BWRAP", str(tmp_path / "no-bwrap"))
    spec = JobSpec(command=[PY, "-c", "pass"], workdir=str(tmp_path), sandbox="on")
    with pytest.raises(AirError) as exc:
        slurm_client.launch(spec)
    assert exc.value.code == "sandbox-unavailable"
    assert not slurm_client.list().items  # nothing submitted


def test_a_node_without_bubblewrap_refuses_the_job(slurm_client, tmp_path: Path) -> None:
    """The node's runner checks for the bwrap the submitter found: a job never runs bare."""
    import json

    info = slurm_client.launch(JobSpec(command=[PY, "-c", "print('ran')"], workdir=str(tmp_path)))
    jdir = Path(slurm_client.store.row(info.job_id).log_path).parent
    (done,) = slurm_client.wait([info.job_id], timeout_s=120, any=False)
    assert done.status == JobStatus.SUCCEEDED
    launch = json.loads((jdir / "slurm-launch.json").read_text())
    assert launch["sandbox"] is True and os.path.basename(launch["argv"][0]) == "bwrap"
    # The same launch on a node whose bwrap is missing: the runner refuses, the job never runs.
    launch["argv"][0] = str(tmp_path / "missing-bwrap")
    (jdir / "slurm-launch.json").write_text(json.dumps(launch))
    (jdir / "output.log").write_text("")
    import subprocess

    env = {**os.environ, "SLURM_JOB_ID": "0"}
    ran = subprocess.run(
        [PY, "-m", "air_skills.backends.slurm.runner", str(jdir)], env=env, timeout=60
    )
    assert ran.returncode == 126
    log = (jdir / "output.log").read_text()
    assert "this node has no bubblewrap" in log and "ran" not in log.split("bubblewrap")[-1]


def test_an_identity_uses_only_the_backends_it_was_granted(slurm_client, tmp_path: Path) -> None:
    slurm_client.add_identity("local-only", "vision")
    agent = slurm_client.as_identity(Identity("local-only", "vision"))
    spec = JobSpec(command=[PY, "-c", "pass"], workdir=str(tmp_path), backend="slurm")
    with pytest.raises(Forbidden) as exc:
        agent.launch(spec)
    assert "backend 'slurm'" in exc.value.message
    slurm_client.add_identity("on-slurm", "vision", backends=["local", "slurm"])
    granted = slurm_client.as_identity(Identity("on-slurm", "vision", backends=("local", "slurm")))
    info = granted.launch(spec)
    (done,) = slurm_client.wait([info.job_id], timeout_s=120, any=False)
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert done.sandbox and done.sandbox.startswith("bwrap")


def test_a_gang_of_several_nodes_runs_unsandboxed_and_says_why(
    slurm_client, tmp_path: Path
) -> None:
    """Its ranks reach each other over the nodes' network, which a sandbox cuts: `auto` runs
    it without one, saying why on the job; `on` is refused before anything is submitted."""
    from air_skills.errors import InvalidSpec

    spec = JobSpec(command=[PY, "-c", "pass"], workdir=str(tmp_path), nodes=2, backend="slurm")
    with pytest.raises(InvalidSpec) as exc:
        slurm_client.launch(spec.model_copy(update={"sandbox": "on"}))
    assert "cannot run sandboxed" in exc.value.message
    info = slurm_client.launch(spec, dry_run=True)
    assert info.job_id == "dry-run"


def test_a_slurm_job_past_its_disk_cap_is_stopped(slurm_client, tmp_path: Path) -> None:
    """Checked on each reconcile (no supervisor of ours runs beside a Slurm job)."""
    from helpers import wait_until

    writer = (
        "import os, time\n"
        "with open(os.path.join(os.environ['AIR_CHECKPOINT_DIR'], 'big.bin'), 'wb') as f:\n"
        "    f.write(os.urandom(20 << 20)); f.flush(); os.fsync(f.fileno())\n"
        "print('wrote', flush=True)\n"
        "time.sleep(120)\n"
    )
    spec = JobSpec(command=[PY, "-c", writer], workdir=str(tmp_path), disk_gb=0.01, track=False)
    info = slurm_client.launch(spec)
    wait_until(lambda: "wrote" in slurm_client.logs(info.job_id).text, timeout_s=90)
    done = wait_until(
        lambda: (i := slurm_client.get(info.job_id)).status.is_terminal() and i, timeout_s=60
    )
    assert done.status == JobStatus.FAILED and "wrote past its cap of 0.01 GB" in done.message
