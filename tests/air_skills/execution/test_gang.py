"""Gangs on the local backend: torchrun ranks as real processes (gloo on CPU)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import InvalidSpec

pytest.importorskip("torch")

PY = sys.executable

# One all-reduce, then (given a mode) a failure on rank 1 while rank 0 waits in a barrier.
GANG = """
import os, sys, time
import torch, torch.distributed as dist
mode = sys.argv[1]
if mode == "late" and os.environ["RANK"] == "1":
    print("rank 1 is loading a huge dataset", flush=True)
    time.sleep(600)  # never reaches the rendezvous in time
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
print(f"rank {rank}/{os.environ['WORLD_SIZE']} local {os.environ['LOCAL_RANK']}"
      f" sum {t.item()} omp {os.environ['OMP_NUM_THREADS']}"
      f" master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
if mode == "fail" and rank == 1:
    print("ValueError: rank 1 gives up", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "nccl" and rank == 1 and os.environ["AIR_ATTEMPT"] == "1":
    print("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7,"
          " OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.", flush=True)
    sys.exit(6)
if mode in ("fail", "hang"):
    dist.barrier()  # rank 0 waits here for a rank that never comes
    time.sleep(120)
dist.destroy_process_group()
"""


def gang_spec(mode: str, token: str, **kw: object) -> JobSpec:
    # The token marks the job's processes in the process table (cmdline).
    command = [PY, "-c", GANG, mode, token]
    return JobSpec(command=command, procs=2, cpus=2, track=False, **kw)  # type: ignore[arg-type]


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds ``token`` (the job's ranks and torchrun)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state != b"Z":
            found.append(int(name))
    return found


def test_two_rank_allreduce_succeeds_and_logs_both_ranks(client: Client) -> None:
    token = uuid.uuid4().hex
    info = client.launch(gang_spec("ok", token))
    info = client.wait([info.job_id], timeout_s=90)[0]
    log = client.logs(info.job_id, tail=None).text
    assert info.status == JobStatus.SUCCEEDED, (info.message, log)
    lines = [ln for ln in log.splitlines() if " sum " in ln]
    assert any(ln.startswith("[rank0]: rank 0/2 local 0 sum 3.0") for ln in lines), log
    assert any(ln.startswith("[rank1]: rank 1/2 local 1 sum 3.0") for ln in lines), log
    # Each rank gets its share of the job's CPUs (2 // 2).
    assert all(" omp 1 " in ln for ln in lines), lines
    assert not processes_with(token)


def test_failing_rank_fails_the_gang_with_its_code_and_leaves_nothing(client: Client) -> None:
    token = uuid.uuid4().hex
    info = client.launch(gang_spec("fail", token))
    wait_until(lambda: " sum " in client.logs(info.job_id, tail=None).text, timeout_s=90)
    # Rank 0 would wait in its barrier for gloo's 30 minutes: a gang left waiting is still
    # RUNNING when this wait gives up, and the status check below fails (no timed assertion).
    info = client.wait([info.job_id], timeout_s=60)[0]
    assert info.status == JobStatus.FAILED, info.message
    assert info.exit_code == 3
    assert info.failure_kind == "user"
    assert "rank 1 exited with code 3" in info.message
    assert "ValueError: rank 1 gives up" in info.message
    wait_until(lambda: not processes_with(token), timeout_s=5)


def test_cancel_stops_every_rank(client: Client) -> None:
    token = uuid.uuid4().hex
    info = client.launch(gang_spec("hang", token))
    log = lambda: client.logs(info.job_id, tail=None).text  # noqa: E731
    wait_until(lambda: log().count(" sum ") == 2, timeout_s=90)
    assert len(processes_with(token)) >= 3  # torchrun and two ranks
    info = client.cancel(info.job_id, reason="test")
    info = client.wait([info.job_id], timeout_s=30)[0]
    assert info.status == JobStatus.CANCELLED, info.message
    wait_until(lambda: not processes_with(token), timeout_s=5)


def test_rank_that_never_joins_fails_the_gang_after_the_rendezvous_timeout(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "5")
    token = uuid.uuid4().hex
    info = client.launch(gang_spec("late", token))
    info = client.wait([info.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.FAILED, info.message
    assert info.failure_kind == "user"
    assert "rendezvous timed out after 5 s: rank 0 joined; rank 1 never joined" in info.message
    assert "rank 1 is loading a huge dataset" in info.message  # its last line
    assert "init_process_group" in info.message and "Next:" in info.message
    wait_until(lambda: not processes_with(token), timeout_s=10)


def test_a_gang_that_never_calls_init_is_not_bound_by_the_rendezvous_timeout(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIR_RENDEZVOUS_TIMEOUT_S", "1")
    script = tmp_path / "plain.py"
    script.write_text("import os, time\ntime.sleep(4)\nprint('done', os.environ['RANK'])\n")
    info = client.launch(JobSpec(command=[PY, str(script)], procs=2, cpus=2, track=False))
    info = client.wait([info.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    log = client.logs(info.job_id, tail=None).text
    assert "[rank0]: done 0" in log and "[rank1]: done 1" in log


@pytest.mark.slow
def test_nccl_watchdog_is_infra_and_retried(client: Client) -> None:
    token = uuid.uuid4().hex
    info = client.launch(gang_spec("nccl", token))
    info = client.wait([info.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.attempts == 2
    events = [dict(e) for e in client.store.events(info.job_id)]
    requeued = [e for e in events if e["kind"].startswith("requeued-")]
    assert [e["kind"] for e in requeued] == ["requeued-infra"]
    assert "reason: nccl" in requeued[0]["message"]
    assert "Watchdog caught collective operation timeout" in requeued[0]["message"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"procs": 0}, "procs must be between 1"),
        ({"procs": "gpu"}, "procs: gpu runs one process per GPU"),
        ({"nodes": 2}, "use backend 'ray'"),
        ({"procs": "four"}, "procs"),
    ],
)
def test_bad_gang_input_is_refused(fields: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        JobSpec.parse({"command": ["python", "t.py"], **fields})
    assert words in str(err.value)


def test_procs_gpu_is_one_per_gpu() -> None:
    spec = JobSpec.parse({"command": ["python", "t.py"], "procs": "gpu", "gpus": 3})
    assert spec.procs_per_node() == 3


def test_logs_rank_filter(client: Client, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from air_skills.cli.app import app

    log = "[rank0]: zero\n[rank1]: one\nplain\n[rank1]: [rank1]: two\n"
    script = tmp_path / "p.py"
    script.write_text(f"import sys; sys.stdout.write({log!r})\n")
    info = client.launch(JobSpec(command=[PY, str(script)], track=False))
    client.wait([info.job_id], timeout_s=30)
    out = CliRunner().invoke(app, ["logs", info.job_id, "--rank", "1"])
    assert out.exit_code == 0, out.output
    assert out.output == "[rank1]: one\n[rank1]: [rank1]: two\n"


def test_ranks_of_a_gang_whose_supervisor_died_are_ended(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from air_skills.runtime.process import proc

    token = uuid.uuid4().hex
    info = client.launch(gang_spec("hang", token))
    log = lambda: client.logs(info.job_id, tail=None).text  # noqa: E731
    wait_until(lambda: log().count(" sum ") == 2, timeout_s=90)
    assert len(proc.job_processes(info.job_id)) >= 3  # torchrun and two ranks
    row = client.store.row(info.job_id)
    os.kill(row.supervisor_pid, signal.SIGKILL)
    wait_until(lambda: not proc.alive(row.supervisor_pid, row.supervisor_start), 10)
    # No retry: a retry's processes would carry the same AIR_JOB_ID.
    monkeypatch.setenv("AIR_MAX_INFRA_RETRIES", "0")
    client.list()  # reconciles: the lost supervisor's job is settled and its ranks ended
    assert client.store.row(info.job_id).status == "FAILED"
    wait_until(lambda: not proc.job_processes(info.job_id), timeout_s=5)
    assert not processes_with(token)


def test_a_gang_of_a_non_python_command_needs_torch_here(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It runs under torchrun --no-python with AIR's interpreter, which must import torch.
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec("torch") is then None
    with pytest.raises(InvalidSpec) as err:
        client.launch({"command": ["bash", "-c", "true"], "procs": 2, "track": False})
    assert "pip install 'air-skills[torch]'" in err.value.message
    assert client.list().items == []
    # A Python command's gang runs torchrun under that Python: its own torch is what counts.
    info = client.launch({"command": [PY, "-c", "pass"], "procs": 2, "track": False}, dry_run=True)
    assert info.job_id == "dry-run"
