"""The local backend with real processes, real SQLite and simulated GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import InsufficientGpus, InvalidSpec, InvalidState, NotFound
from air_skills.runtime.process.proc import alive

PY = sys.executable

# A job that records, in its own words, when it ran and on which GPUs.
RECORDER = """
import json, os, sys, time
out = sys.argv[1]
start = time.time()
time.sleep(float(sys.argv[2]))
rec = {"job": os.environ["AIR_JOB_ID"], "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
       "start": start, "end": time.time(), "omp": os.environ.get("OMP_NUM_THREADS")}
with open(os.path.join(out, os.environ["AIR_JOB_ID"] + "-" + str(os.getpid())), "w") as f:
    json.dump(rec, f)
"""


def spec(command: list[str], **kw: object) -> JobSpec:
    return JobSpec(command=command, track=False, **kw)  # type: ignore[arg-type]


def wait_terminal(client: Client, job_id: str, timeout_s: float = 60) -> object:
    infos = client.wait([job_id], timeout_s=timeout_s)
    assert infos[0].status.is_terminal(), infos[0]
    return infos[0]


def test_forty_jobs_on_four_gpus_never_overlap(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the jobs record into tmp_path, outside their folders
    out = tmp_path / "records"
    out.mkdir()
    ids = [
        client.launch(spec([PY, "-c", RECORDER, str(out), "0.3"], gpus=1)).job_id for _ in range(40)
    ]
    infos = client.wait(ids, timeout_s=180, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED] * 40, [i.message for i in infos]
    records = [json.loads(p.read_text()) for p in out.iterdir()]
    assert len(records) == 40
    events = sorted(
        [(r["start"], 1, r["gpus"]) for r in records] + [(r["end"], -1, r["gpus"]) for r in records]
    )
    live: dict[str, int] = {}
    peak = 0
    for _, delta, gpu in events:
        live[gpu] = live.get(gpu, 0) + delta
        assert live[gpu] <= 1, f"GPU {gpu} given to two jobs at once"
        peak = max(peak, sum(live.values()))
    assert peak <= 4
    assert {r["gpus"] for r in records} <= {"0", "1", "2", "3"}
    assert all(r["omp"] and int(r["omp"]) >= 1 for r in records)


def test_job_receives_its_environment(client: Client, tmp_path: Path) -> None:
    code = (
        "import json, os; keys = ['AIR_JOB_ID', 'AIR_CONFIG_FILE', 'AIR_CHECKPOINT_DIR',"
        " 'AIR_DATA_DIR', 'CUDA_VISIBLE_DEVICES', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'MINE'];"
        " print(json.dumps({k: os.environ.get(k) for k in keys}));"
        " print(open(os.environ['AIR_CONFIG_FILE']).read())"
    )
    info = client.launch(
        spec([PY, "-c", code], gpus=2, cpus=1, env={"MINE": "yes"}, config={"lr": 0.1})
    )
    info = wait_terminal(client, info.job_id)
    assert info.status == JobStatus.SUCCEEDED
    lines = client.logs(info.job_id).text.splitlines()
    env = json.loads(lines[0])
    assert env["AIR_JOB_ID"] == info.job_id
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, info.gpus))
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["MINE"] == "yes"
    assert Path(env["AIR_CHECKPOINT_DIR"]).is_dir()
    assert json.loads("\n".join(lines[1:])) == {"lr": 0.1}


def test_preempted_low_job_resumes_with_same_id_and_checkpoint(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    # The low job counts attempts in its checkpoint folder, then runs until stopped (1st time)
    # or finishes (2nd time): a checkpointing script resumes.
    low_code = (
        "import os, time, pathlib; d = pathlib.Path(os.environ['AIR_CHECKPOINT_DIR']);"
        " n = len(list(d.iterdir())); (d / f'attempt{n}').write_text(str(os.getpid()));"
        " print('attempt', n, 'ckpt', d, flush=True);"
        " time.sleep(60 if n == 0 else 0.1)"
    )
    low = client.launch(spec([PY, "-c", low_code], gpus=1, priority="low", preemptible=True))
    wait_until(lambda: "attempt 0" in client.logs(low.job_id).text)
    high = client.launch(spec([PY, "-c", "print('high ran')"], gpus=1, priority="high"))
    infos = client.wait([low.job_id, high.job_id], timeout_s=60, any=False)
    assert [i.status for i in infos] == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]
    low_info = infos[0]
    assert low_info.attempts == 2 and low_info.job_id == low.job_id
    text = client.logs(low.job_id).text
    assert "attempt 0" in text and "attempt 1" in text
    ckpts = {line.split("ckpt ")[1] for line in text.splitlines() if "ckpt " in line}
    assert len(ckpts) == 1  # the same AIR_CHECKPOINT_DIR on both attempts
    kinds = [e["kind"] for e in client.events(low.job_id)]
    assert "stop-preempt" in kinds and "requeued-preempted" in kinds
    assert infos[1].ended_at is not None and low_info.ended_at is not None
    assert infos[1].ended_at < low_info.ended_at  # the high job ran in between


def test_cancel_running_job(client: Client) -> None:
    info = client.launch(
        spec([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"], gpus=1)
    )
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    row = client.store.row(info.job_id)
    cancelled = client.cancel(info.job_id, reason="not needed")
    assert cancelled.status == JobStatus.CANCELLED
    assert "not needed" in cancelled.message
    assert cancelled.signal == "SIGTERM"
    assert not alive(row.job_pid, row.job_start)


def test_cancel_finished_job_is_refused_and_state_unchanged(client: Client) -> None:
    info = wait_terminal(client, client.launch(spec([PY, "-c", "pass"])).job_id)
    with pytest.raises(InvalidState, match="already finished"):
        client.cancel(info.job_id)
    assert client.get(info.job_id).status == JobStatus.SUCCEEDED


def test_cancel_queued_job(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "1")
    blocker = client.launch(spec([PY, "-c", "import time; time.sleep(60)"], gpus=1))
    queued = client.launch(spec([PY, "-c", "pass"], gpus=1))
    assert client.get(queued.job_id).status == JobStatus.QUEUED
    assert client.cancel(queued.job_id).status == JobStatus.CANCELLED
    client.cancel(blocker.job_id)


def test_timeout(client: Client) -> None:
    info = client.launch(spec([PY, "-c", "import time; time.sleep(60)"], timeout_min=0.01))
    info = wait_terminal(client, info.job_id)
    assert info.status == JobStatus.TIMED_OUT
    assert "timeout_min" in info.message


def test_crash_exit_code(client: Client) -> None:
    info = wait_terminal(client, client.launch(spec([PY, "-c", "raise SystemExit(3)"])).job_id)
    assert info.status == JobStatus.FAILED
    assert info.exit_code == 3 and info.failure_kind == "user"
    assert "code 3" in info.message and "air logs" in info.message


def test_retries(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the job counts its tries in tmp_path
    marker = tmp_path / "tries"
    code = (
        f"import pathlib; p = pathlib.Path({str(marker)!r}); n = int(p.read_text())"
        " if p.exists() else 0; p.write_text(str(n + 1)); raise SystemExit(0 if n >= 2 else 1)"
    )
    info = wait_terminal(client, client.launch(spec([PY, "-c", code], max_retries=2)).job_id)
    assert info.status == JobStatus.SUCCEEDED and info.attempts == 3


def test_killed_from_outside(client: Client) -> None:
    info = client.launch(spec([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"]))
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    os.kill(client.store.row(info.job_id).job_pid, signal.SIGKILL)
    info = wait_terminal(client, info.job_id)
    assert info.status == JobStatus.FAILED and info.signal == "SIGKILL"
    assert "SIGKILL" in info.message


def test_supervisor_killed_is_reconciled(client: Client) -> None:
    info = client.launch(
        spec([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"], gpus=1)
    )
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    row = client.store.row(info.job_id)
    os.kill(row.supervisor_pid, signal.SIGKILL)
    wait_until(lambda: not alive(row.supervisor_pid, row.supervisor_start))
    # The next client call settles it: requeued (infra retries left) and restarted.
    after = client.get(info.job_id)
    assert after.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert not alive(row.job_pid, row.job_start), "orphan left running"
    kinds = [e["kind"] for e in client.events(info.job_id)]
    assert "requeued-infra" in kinds
    wait_until(lambda: client.get(info.job_id).attempts == 2)
    client.cancel(info.job_id)


@pytest.mark.slow
def test_concurrent_launches_from_many_processes(air_home: Path) -> None:
    code = (
        "import sys; from air_skills import Client, JobSpec\n"
        "c = Client()\n"
        "for i in range(10):\n"
        "    c.launch(JobSpec(command=['true'], track=False, name=f'p{sys.argv[1]}-{i}'))\n"
    )
    env = {**os.environ, "AIR_CPU_SLOTS": "2"}
    procs = [
        subprocess.Popen([PY, "-c", code, str(n)], env=env, stderr=subprocess.PIPE)
        for n in range(20)
    ]
    errors = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert not any("locked" in e for e in errors)
    client = Client(air_home)
    names = [i.name for i in client.list(limit=1000).items]
    assert len(names) == 200 and len(set(names)) == 200
    ids = [i.job_id for i in client.list(limit=1000).items]
    infos = client.wait(ids, timeout_s=300, any=False)
    assert all(i.status == JobStatus.SUCCEEDED for i in infos)


def test_idempotency_key_returns_same_job(client: Client, air_home: Path) -> None:
    code = (
        "from air_skills import Client, JobSpec\n"
        "print(Client().launch(JobSpec(command=['true'], track=False,"
        " idempotency_key='same-key')).job_id)\n"
    )
    procs = [subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE) for _ in range(6)]
    ids = {p.communicate(timeout=120)[0].decode().strip() for p in procs}
    assert len(ids) == 1
    assert len(client.list(limit=100).items) == 1
    again = client.launch(spec(["true"], idempotency_key="same-key"))
    assert again.job_id in ids


# --- bad input ---------------------------------------------------------------------------------


def test_unknown_field_refused() -> None:
    with pytest.raises(InvalidSpec) as exc:
        JobSpec.parse({"command": ["true"], "gpu": 1, "prio": "x"})
    assert {"gpu: unknown field", "prio: unknown field"} <= set(exc.value.problems)
    assert "valid fields" in exc.value.hint


@pytest.mark.parametrize("gpus", [-1, 10**9])
def test_bad_gpu_counts(gpus: int) -> None:
    with pytest.raises(InvalidSpec, match="gpus"):
        JobSpec.parse({"command": ["true"], "gpus": gpus})


def test_more_gpus_than_exist(client: Client) -> None:
    with pytest.raises(InsufficientGpus) as exc:
        client.launch(spec(["true"], gpus=5))
    assert "4" in exc.value.message and exc.value.code == "insufficient-gpus"
    assert client.list().items == []


def test_empty_command() -> None:
    for command in ([], [""], ""):
        with pytest.raises(InvalidSpec, match="command"):
            JobSpec.parse({"command": command})


def test_command_not_found(client: Client) -> None:
    """Refused at launch (nothing queued); with the check off, a FAILED job that says why."""
    with pytest.raises(InvalidSpec, match="no-such-program-xyz: not found on PATH"):
        client.launch(spec(["no-such-program-xyz", "arg"]))
    assert client.list().items == []
    unchecked = spec(["no-such-program-xyz", "arg"], check_command=False)
    info = wait_terminal(client, client.launch(unchecked).job_id)
    assert info.status == JobStatus.FAILED and info.exit_code == 127
    assert "command not found" in info.message


def test_shell_metacharacters_are_literal(client: Client, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    tricky = [f"; touch {canary}", f"$(touch {canary})", f"`touch {canary}`", f"a\ntouch {canary}"]
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    info = wait_terminal(client, client.launch(spec([PY, "-c", code, *tricky])).job_id)
    assert json.loads(client.logs(info.job_id).text.strip()) == tricky
    assert not canary.exists()
    # A string command is split by shlex, never given to a shell.
    parsed = JobSpec.parse({"command": f"echo 'a; touch {canary}'"})
    assert parsed.command == ["echo", f"a; touch {canary}"]


def test_unknown_and_path_like_job_ids(client: Client) -> None:
    for bad in ("job-0000000000", "../../etc/passwd", "job-../../x", ""):
        with pytest.raises(NotFound):
            client.get(bad)


def test_corrupt_air_home(tmp_path: Path) -> None:
    from air_skills.errors import StoreError

    home = tmp_path / "corrupt"
    home.mkdir()
    (home / "air.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as exc:
        Client(home)
    assert "corrupt" in exc.value.hint


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_air_home(tmp_path: Path) -> None:
    from air_skills.errors import StoreError

    home = tmp_path / "ro"
    home.mkdir()
    home.chmod(0o500)
    with pytest.raises(StoreError, match="read-only"):
        Client(home)


def test_read_only_air_home_file(tmp_path: Path) -> None:
    """As root, permission bits do not stop writes; a path under a file is unusable for all."""
    from air_skills.errors import StoreError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot be created"):
        Client(blocker / "home")
