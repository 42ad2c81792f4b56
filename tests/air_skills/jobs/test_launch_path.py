"""The fast launch path: command started before its supervisor boots, supervisors that run the
next job themselves, stop pokes, and the scheduling pass's window over the queue."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import GATED, open_gate, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.process.proc import alive
from air_skills.runtime.scheduling.passes import POKE_SIGNAL

PY = sys.executable
SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def spec(command: list[str], **kw: object) -> JobSpec:
    return JobSpec(command=command, track=False, **kw)  # type: ignore[arg-type]


def parent_of(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2 :].split()[1])


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for the signal (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def test_command_starts_before_its_supervisor_and_stays_its_child(client: Client) -> None:
    info = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    row = client.store.row(info.job_id)
    # Recorded before launch() returns: no window in which a lost supervisor leaves an orphan.
    assert row.supervisor_pid and row.job_pid and row.job_start
    assert info.message.startswith("RUNNING on GPUs")
    assert parent_of(row.job_pid) == row.supervisor_pid
    cmdline = Path(f"/proc/{row.supervisor_pid}/cmdline")
    wait_until(lambda: b"--job-pid" in cmdline.read_bytes().split(b"\0"))  # after exec
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    cancelled = client.cancel(info.job_id, reason="done here")
    assert cancelled.status == JobStatus.CANCELLED and cancelled.signal == "SIGTERM"
    assert not alive(row.job_pid, row.job_start)


def test_cancel_while_the_supervisor_boots(client: Client) -> None:
    info = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    row = client.store.row(info.job_id)
    cancelled = client.cancel(info.job_id, reason="changed my mind")
    assert cancelled.status == JobStatus.CANCELLED, cancelled.message
    assert "changed my mind" in cancelled.message
    assert not alive(row.job_pid, row.job_start)


def test_supervisor_runs_the_jobs_its_pass_starts(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    first = client.launch(spec([PY, "-c", GATED], gpus=1))
    rest = [client.launch(spec([PY, "-c", "pass"], gpus=1)) for _ in range(2)]
    assert [i.status for i in rest] == [JobStatus.QUEUED, JobStatus.QUEUED]
    assert rest[0].message == "QUEUED: waiting for 1 GPUs; 0 free of 1"
    open_gate(client.home / "jobs" / first.job_id)
    ids = [first.job_id] + [i.job_id for i in rest]
    infos = client.wait(ids, timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 3
    supervisors = {client.store.row(j).supervisor_pid for j in ids}
    assert len(supervisors) == 1  # one process, no interpreter boot per job
    kinds = [e["kind"] for e in client.events(rest[1].job_id)]
    assert kinds == ["queued", "started", "succeeded"]


def test_a_poke_without_a_stop_request_changes_nothing(client: Client) -> None:
    info = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    row = client.store.row(info.job_id)
    os.kill(row.supervisor_pid, POKE_SIGNAL)  # late, for a job that ended: harmless
    time.sleep(0.5)
    assert client.get(info.job_id).status == JobStatus.RUNNING
    assert alive(row.job_pid, row.job_start)
    assert alive(row.supervisor_pid, row.supervisor_start)
    client.cancel(info.job_id)


def test_supervisor_sigterm_still_stops_the_job(client: Client) -> None:
    info = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    row = client.store.row(info.job_id)
    wait_until(lambda: catches(row.supervisor_pid, signal.SIGTERM))  # it has booted
    os.kill(row.supervisor_pid, signal.SIGTERM)
    done = client.wait([info.job_id], timeout_s=30)[0]
    assert done.status == JobStatus.FAILED and done.signal == "SIGTERM"
    assert not alive(row.job_pid, row.job_start)


def test_cpu_job_beyond_the_queue_window_still_gets_a_free_slot(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    monkeypatch.setenv("AIR_QUEUE_WINDOW", "2")
    monkeypatch.setenv("AIR_CPU_SLOTS", "1")
    blocker = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    waiting = [client.launch(spec([PY, "-c", "pass"], gpus=1)) for _ in range(3)]
    cpu = client.launch(spec([PY, "-c", "pass"], gpus=0))
    assert client.wait([cpu.job_id], timeout_s=30)[0].status == JobStatus.SUCCEEDED
    client.cancel(blocker.job_id)
    infos = client.wait([i.job_id for i in waiting], timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 3  # deeper ones too, in turn


def test_a_gpu_job_beyond_the_queue_window_fits_the_idle_gpus(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41.4: the pass reads the head of each GPU count that fits the idle GPUs, so a
    1-GPU job deep in the queue starts beside a blocker while 2-GPU jobs ahead cannot."""
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "3")
    monkeypatch.setenv("AIR_QUEUE_WINDOW", "2")
    monkeypatch.setenv("AIR_STARVATION_S", "600")  # no head reserves the idle GPU meanwhile
    blocker = client.launch(spec([PY, "-c", SLEEPER], gpus=2))
    ahead = [client.launch(spec([PY, "-c", "pass"], gpus=2)) for _ in range(3)]
    deep = client.launch(spec([PY, "-c", "pass"], gpus=1))
    assert client.wait([deep.job_id], timeout_s=30)[0].status == JobStatus.SUCCEEDED
    assert [client.get(i.job_id).status for i in ahead] == [JobStatus.QUEUED] * 3
    client.cancel(blocker.job_id)
    infos = client.wait([i.job_id for i in ahead], timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 3


def test_a_quota_reclaims_for_a_job_beyond_the_queue_window(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With quotas the pass reads each project's head, not the whole queue (issue 41.4): B's
    one job, queued behind more of A's than the window holds, still reclaims its quota."""
    from air_skills.quotas import set_quota

    monkeypatch.setenv("AIR_SIMULATED_GPUS", "4")
    monkeypatch.setenv("AIR_QUEUE_WINDOW", "2")
    set_quota(client.store, "A", 2)
    set_quota(client.store, "B", 2)
    a = [
        client.launch(spec([PY, "-c", SLEEPER], gpus=1, project="A")).job_id for _ in range(7)
    ]  # four run (two borrow B's GPUs), three wait
    wait_until(lambda: sum(client.get(j).status == JobStatus.RUNNING for j in a) == 4)
    b = client.launch(spec([PY, "-c", SLEEPER], gpus=1, project="B")).job_id
    wait_until(lambda: client.get(b).status == JobStatus.RUNNING)
    assert not client.get(b).borrowing
    client.cancel_all()


def idle_supervisors(client: Client) -> list[int]:
    return [r["pid"] for r in client.store.conn.execute("SELECT pid FROM idle_supervisors")]


def test_an_idle_supervisor_runs_the_next_job_at_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "60")
    first = client.launch(spec([PY, "-c", "pass"], gpus=1))
    assert client.wait([first.job_id], timeout_s=30)[0].status == JobStatus.SUCCEEDED
    sup = client.store.row(first.job_id).supervisor_pid
    wait_until(lambda: idle_supervisors(client) == [sup])
    second = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    assert idle_supervisors(client) == []  # taken by the pass that started the job
    row = client.store.row(second.job_id)
    assert row.supervisor_pid == sup
    wait_until(lambda: "up" in client.logs(second.job_id).text)
    row = client.store.row(second.job_id)
    assert parent_of(row.job_pid) == sup
    assert client.cancel(second.job_id).status == JobStatus.CANCELLED
    assert not alive(row.job_pid, row.job_start)


def test_an_idle_supervisor_leaves_on_sigterm(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "60")
    first = client.launch(spec([PY, "-c", "pass"], gpus=1))
    client.wait([first.job_id], timeout_s=30)
    row = client.store.row(first.job_id)
    wait_until(lambda: idle_supervisors(client) == [row.supervisor_pid])
    os.kill(row.supervisor_pid, signal.SIGTERM)
    wait_until(lambda: not alive(row.supervisor_pid, row.supervisor_start))
    assert idle_supervisors(client) == []
    later = client.launch(spec([PY, "-c", "pass"], gpus=1))  # a fresh supervisor, as usual
    assert client.wait([later.job_id], timeout_s=30)[0].status == JobStatus.SUCCEEDED


def test_a_job_runs_in_the_environment_it_was_launched_from(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "60")
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the job writes into tmp_path, outside its folder
    first = client.launch(spec([PY, "-c", "pass"], gpus=1))
    client.wait([first.job_id], timeout_s=30)
    wait_until(lambda: idle_supervisors(client))  # the next job goes to this process
    monkeypatch.setenv("TORCH_HOME", "from-the-launcher")  # a name job_env.py passes
    out = tmp_path / "env"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ['TORCH_HOME'])"
    second = client.launch(spec([PY, "-c", code], gpus=1))
    assert client.wait([second.job_id], timeout_s=30)[0].status == JobStatus.SUCCEEDED
    assert client.store.row(second.job_id).supervisor_pid == (
        client.store.row(first.job_id).supervisor_pid
    )
    assert out.read_text() == "from-the-launcher"


def test_the_launch_environment_is_private_and_removed_at_the_end(client: Client) -> None:
    info = client.launch(spec([PY, "-c", SLEEPER], gpus=1))
    saved = Path(client.store.row(info.job_id).log_path).parent / "env.json"
    assert saved.stat().st_mode & 0o777 == 0o600  # it may hold API keys
    client.cancel(info.job_id)
    assert not saved.exists()


def test_idle_supervisors_leave_after_their_time_and_are_capped(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    monkeypatch.setenv("AIR_CPU_SLOTS", "1")
    monkeypatch.setenv("AIR_SUPERVISOR_LINGER_S", "1")
    jobs = [client.launch(spec([PY, "-c", "pass"], gpus=0)) for _ in range(3)]
    jobs += [client.launch(spec([PY, "-c", "pass"], gpus=1)) for _ in range(3)]
    client.wait([j.job_id for j in jobs], timeout_s=60, any=False)
    assert len(idle_supervisors(client)) <= 2  # 1 GPU + 1 CPU slot: no more can be handed one
    sups = {client.store.row(j.job_id).supervisor_pid for j in jobs}
    wait_until(lambda: not idle_supervisors(client), timeout_s=10)
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in sups), timeout_s=10)


def test_launch_env_is_private_and_removed_when_a_queued_job_is_cancelled(
    client, monkeypatch
) -> None:
    import stat

    from air_skills import JobSpec

    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    blocker = client.launch(JobSpec(command=["sleep", "60"], gpus=1, track=False))
    queued = client.launch(JobSpec(command=["true"], gpus=1, track=False))
    env_file = client.home / "jobs" / queued.job_id / "env.json"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    client.cancel(queued.job_id)
    assert not env_file.exists()
    client.cancel(blocker.job_id)
    assert not (client.home / "jobs" / blocker.job_id / "env.json").exists()
