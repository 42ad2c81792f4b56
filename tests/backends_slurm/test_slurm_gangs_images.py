"""Multi-node gangs and images on Slurm: the batch script and srun steps the backend emits, a
gang run for real through srun (one node here: this Slurm has no multiple-slurmd), and the
refusal of an image on a cluster without pyxis."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from air_skills import JobSpec, JobStatus
from air_skills.backends.slurm import runner, steps
from air_skills.backends.slurm.submit import batch_script, sbatch_options
from air_skills.errors import InvalidSpec

PY = sys.executable

GANG = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
r = os.environ
print(f"rank {dist.get_rank()}/{r['WORLD_SIZE']} sum {t.item()} node {r['AIR_NODE_RANK']}"
      f" of {r['AIR_NUM_NODES']} master {r['MASTER_ADDR']}", flush=True)
dist.destroy_process_group()
"""


def test_several_nodes_become_one_srun_task_per_node(tmp_path: Path) -> None:
    spec = JobSpec(command=[PY, "-c", "1"], nodes=3, gpus=2, procs=2, backend="slurm")
    opts = sbatch_options("job-1", spec, tmp_path)
    assert "--nodes=3" in opts and "--ntasks-per-node=1" in opts and "--gres=gpu:2" in opts
    script = batch_script(tmp_path, 3)
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in script
    assert "exec srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=1 " in script
    assert "air_skills.backends.slurm.runner" in script
    assert "srun" not in batch_script(tmp_path, 1)


def test_each_node_fills_its_rank_the_first_node_and_the_port() -> None:
    slurm_env = {
        "SLURM_JOB_ID": "123",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NUM_NODES": "4",
        "MASTER_ADDR": "gpu-a01",
    }
    values = runner.node_values(slurm_env)
    assert values == {
        "AIR_NODE_RANK": "2",
        "AIR_NUM_NODES": "4",
        "MASTER_ADDR": "gpu-a01",
        "MASTER_PORT": "20123",
    }
    argv = ["torchrun", "--nnodes", steps.NUM_NODES, "--node-rank", steps.NODE_RANK]
    argv += ["--master-addr", steps.MASTER_ADDR, "--master-port", steps.MASTER_PORT, "{x}"]
    assert runner.fill(argv, values) == [
        *("torchrun", "--nnodes", "4", "--node-rank", "2"),
        *("--master-addr", "gpu-a01", "--master-port", "20123", "{x}"),
    ]


def test_an_image_becomes_a_pyxis_step_with_the_job_folder_mounted(tmp_path: Path) -> None:
    argv = steps.container_argv("nvcr.io/nvidia/pytorch:24.05", ["python", "t.py"], tmp_path, "/w")
    assert argv[:3] == ["srun", "--ntasks=1", "--export=ALL"]
    assert "--container-image=nvcr.io/nvidia/pytorch:24.05" in argv
    assert f"--container-mounts={tmp_path}:{tmp_path},/w:/w" in argv
    assert "--container-workdir=/w" in argv and argv[-2:] == ["python", "t.py"]


def test_an_image_is_refused_on_a_cluster_without_pyxis(slurm_client, tmp_path) -> None:
    steps.has_pyxis.cache_clear()
    with pytest.raises(InvalidSpec) as refused:
        slurm_client.launch(JobSpec(command=[PY, "-c", "1"], image="localhost/x:1"))
    err = refused.value
    assert err.code and "no container plugin" in err.message and "--container-image" in err.message
    assert "drop --image" in err.hint and "pyxis" in err.hint
    assert slurm_client.store.rows("") == []  # refused before anything was made
    with pytest.raises(InvalidSpec, match="several Slurm nodes"):
        slurm_client.launch(JobSpec(command=[PY, "-c", "1"], image="x:1", nodes=2, backend="slurm"))


def _one_node_sbatch(folder: Path) -> str:
    """An ``sbatch`` in front of the real one that asks for one node where the job asks for
    several: this cluster has one node (Debian's Slurm is built without multiple-slurmd)."""
    shim = folder / "sbatch"
    shim.write_text(
        f"#!{PY}\nimport os, shutil, sys\n"
        "path = os.environ['PATH'].split(os.pathsep, 1)[1]\n"
        "real = shutil.which('sbatch', path=path)\n"
        "args = ['--nodes=1' if a.startswith('--nodes=') else a for a in sys.argv[1:]]\n"
        "os.execv(real, [real, *args])\n"
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.slow
def test_a_node_gang_runs_through_srun_with_node_ranks(slurm_client, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    shims = tmp_path / "shims"
    shims.mkdir()
    monkeypatch.setenv("PATH", _one_node_sbatch(shims))
    spec = JobSpec(command=[PY, "-c", GANG], nodes=2, procs=2, cpus=2, track=False, backend="slurm")
    info = slurm_client.launch(spec)
    (done,) = slurm_client.wait([info.job_id], timeout_s=240, any=False)
    log = slurm_client.logs(info.job_id, tail=100).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    # srun started the runner as node 0 of the allocation; torchrun's ranks are prefixed.
    assert " node 0 on " in log
    host = os.uname().nodename
    for rank in (0, 1):
        assert f"[rank{rank}]: rank {rank}/2 sum 3.0 node 0 of 1 master {host}" in log, log
    jdir = Path(slurm_client.store.row(info.job_id).log_path).parent
    assert (jdir / "slurm-exit.json").exists()
