"""Issue 25: a sandboxed job can change only its own folder; each attack is a real job.

The attacker script tries every attack in turn and prints what happened (a JSON line); the
test then checks both what the job saw and that the host's files are untouched, and that the
job's own checkpoint, outputs and metrics still arrived.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import AirError
from air_skills.runtime.execution import sandbox

PY = sys.executable
pytestmark = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)

ATTACKER = r"""
import json, os, sqlite3, sys
cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except Exception as exc:
        out[name] = f"refused: {type(exc).__name__}"
def rewrite_blob():
    with open(cfg["blob"], "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(b"#" * len(data))
def append_journal():
    with open(cfg["journal"], "a") as f:
        f.write('{"event": "forged"}\n')
def read_other_env():
    out["other_env_text"] = open(cfg["other_env"]).read()
def read_other_proc_env():
    out["other_proc_env"] = open(f"/proc/{cfg['victim_pid']}/environ").read()
def write_air_db():
    c = sqlite3.connect(f"file:{cfg['air_db']}?mode=rw", uri=True)
    c.execute("CREATE TABLE forged (x)")
    c.commit()
def write_mlflow_db():
    c = sqlite3.connect(f"file:{cfg['mlflow_db']}?mode=rw", uri=True)
    c.execute("UPDATE metrics SET value = -100.0")
    c.commit()
def write_outside():
    open(cfg["outside"], "w").write("escaped")
def rewrite_own_launch_env():  # what its next attempt starts from (a bwrap of its choosing)
    jdir = os.path.dirname(os.environ["AIR_CONFIG_FILE"])
    open(os.path.join(jdir, "forged.json"), "w").write('{"AIR_BWRAP": "/bin/env"}')
    os.replace(os.path.join(jdir, "forged.json"), os.path.join(jdir, "env.json"))
attempt("rewrite_blob", rewrite_blob)
attempt("append_journal", append_journal)
attempt("read_other_env", read_other_env)
attempt("read_other_proc_env", read_other_proc_env)
attempt("write_air_db", write_air_db)
attempt("write_mlflow_db", write_mlflow_db)
attempt("write_outside", write_outside)
attempt("rewrite_own_launch_env", rewrite_own_launch_env)
# What the job may do: its checkpoint, an output in its folder, /tmp, its own metrics.
open(os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "ckpt.pt"), "w").write("weights")
open("/tmp/scratch-of-the-job", "w").write("private")
from mlflow.tracking import MlflowClient
MlflowClient().log_metric(os.environ["MLFLOW_RUN_ID"], "loss", 0.25, step=7)
print("ATTACKS " + json.dumps(out), flush=True)
"""


def _wait_ok(client: Client, job_id: str) -> None:
    info = client.wait([job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED, (info.message, client.logs(job_id).text)


def test_every_attack_fails_inside_the_sandbox_and_the_jobs_own_work_still_lands(
    client: Client, air_home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "attack.py").write_text(ATTACKER)
    victim_script = (
        "import os, time\nfrom mlflow.tracking import MlflowClient\n"
        "MlflowClient().log_metric(os.environ['MLFLOW_RUN_ID'], 'loss', 1.0)\n"
        f"while not os.path.exists({str(src / 'stop')!r}): time.sleep(0.05)\n"
    )
    victim = client.launch(  # running while attacked: its environment file exists
        JobSpec(
            command=[PY, "-c", victim_script],
            env={"SECRET_TOKEN": "s3cret-value"},
            name="victim",
            workdir=str(src),
        )
    )
    assert victim.sandbox == "bwrap"
    other_env = air_home / "jobs" / victim.job_id / "job_env.json"
    wait_until(other_env.exists, timeout_s=30)
    victim_pid = wait_until(lambda: client.store.row(victim.job_id).job_pid, timeout_s=30)
    blob = next(p for p in (air_home / "code" / "blobs").rglob("*") if p.is_file())
    blob_bytes = blob.read_bytes()
    journal = air_home / "studies" / "s1" / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"event": "start"}\n')
    outside = src / "outside.txt"  # the user's tree: read-only inside
    attacker = client.launch(
        JobSpec(
            command=[PY, "attack.py"],
            workdir=str(src),
            name="attacker",
            config={
                "blob": str(blob),
                "journal": str(journal),
                "other_env": str(other_env),
                "air_db": str(air_home / "air.db"),
                "mlflow_db": str(air_home / "mlflow.db"),
                "outside": str(outside),
                "victim_pid": victim_pid,
            },
        )
    )
    _wait_ok(client, attacker.job_id)
    (src / "stop").write_text("")
    _wait_ok(client, victim.job_id)
    log = client.logs(attacker.job_id, tail=None).text
    seen = json.loads(log.split("ATTACKS ", 1)[1].splitlines()[0])
    for attack in (
        "rewrite_blob",
        "append_journal",
        "read_other_env",
        "read_other_proc_env",
        "write_air_db",
        "write_mlflow_db",
        "write_outside",
        "rewrite_own_launch_env",
    ):
        assert seen[attack].startswith("refused"), (attack, seen)
    # And on the host nothing changed.
    assert blob.read_bytes() == blob_bytes
    assert journal.read_text() == '{"event": "start"}\n'
    assert "s3cret-value" not in log
    assert not outside.exists()
    tables = sqlite3.connect(air_home / "air.db").execute(
        "SELECT name FROM sqlite_master WHERE name = 'forged'"
    )
    assert tables.fetchall() == []
    assert client.metrics(victim.job_id).latest["loss"] == 1.0  # not rewritten
    # The job's own work: checkpoint in its folder, its metric in its run (forwarded).
    jdir = air_home / "jobs" / attacker.job_id
    assert (jdir / "checkpoints" / "ckpt.pt").read_text() == "weights"
    assert client.metrics(attacker.job_id).latest["loss"] == 0.25


def test_sandbox_on_where_none_can_be_made_is_refused_and_auto_says_why(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIR_BWRAP", str(tmp_path / "no-such-bwrap"))
    with pytest.raises(AirError) as refused:
        client.launch(JobSpec(command=["true"], sandbox="on", track=False))
    assert refused.value.code == "sandbox-unavailable"
    assert "not found" in refused.value.message and "bubblewrap" in refused.value.hint
    assert client.list().items == []  # nothing queued
    # auto: runs, says why
    info = client.launch(JobSpec(command=["true"], track=False, workdir=str(tmp_path)))
    assert info.sandbox is not None and info.sandbox.startswith("none (")
    assert "not found" in info.sandbox
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    monkeypatch.delenv("AIR_BWRAP")  # bwrap is back: a rerun decides again
    again = client.rerun(info.job_id)
    assert again.sandbox == "bwrap"
    assert client.wait([again.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED


def test_off_runs_unsandboxed_and_says_so(client: Client, tmp_path: Path) -> None:
    out = tmp_path / "written-by-host-job"
    cmd = [PY, "-c", f"open({str(out)!r}, 'w').write('x')"]
    info = client.launch(JobSpec(command=cmd, sandbox="off", track=False))
    assert info.sandbox == "none (sandbox: off)"
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    assert out.read_text() == "x"


def test_writable_folders_are_checked_like_data_roots_and_then_writable(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "roots" / "results"
    shared.mkdir(parents=True)
    cmd = [PY, "-c", f"open({str(shared / 'r.txt')!r}, 'w').write('ok')"]
    with pytest.raises(AirError) as refused:  # no AIR_DATA_ROOTS: refused
        client.launch(JobSpec(command=cmd, writable=[str(shared)], track=False))
    assert refused.value.code == "writable-refused"
    monkeypatch.setenv("AIR_DATA_ROOTS", str(tmp_path / "roots"))
    info = client.launch(JobSpec(command=cmd, writable=[str(shared)], track=False))
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    assert (shared / "r.txt").read_text() == "ok"
    # Without `writable` the same write fails inside the sandbox, and the job says what to do.
    other = client.launch(JobSpec(command=cmd, track=False))
    failed = client.wait([other.job_id], timeout_s=60)[0]
    assert failed.status == JobStatus.FAILED
    assert "ran sandboxed" in failed.message and "`writable`" in failed.message


def test_network_false_cuts_the_network(client: Client) -> None:
    probe = (
        "import socket; s = socket.socket(); s.settimeout(2);"
        "import sys; sys.exit(0 if len(socket.if_nameindex()) == 1 else 3)"
    )
    info = client.launch(JobSpec(command=[PY, "-c", probe], network=False, track=False))
    assert info.sandbox == "bwrap, no network"
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, client.logs(info.job_id).text
    with_net = client.launch(JobSpec(command=[PY, "-c", probe], track=False))
    assert client.wait([with_net.job_id], timeout_s=60)[0].exit_code == 3
    with pytest.raises(AirError) as refused:  # only a sandbox cuts it: never dropped silently
        client.launch(JobSpec(command=["true"], network=False, sandbox="off", track=False))
    assert refused.value.code == "invalid-spec" and "network" in refused.value.message


def test_a_job_killed_by_a_signal_inside_the_sandbox_is_reported_as_that_signal(
    client: Client,
) -> None:
    cmd = [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    info = client.launch(JobSpec(command=cmd, track=False))
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.FAILED and done.signal == "SIGSEGV", done


def test_metrics_forwarded_from_a_running_job_appear_while_it_runs(
    client: Client, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    script = (
        "import os, time\nfrom mlflow.tracking import MlflowClient\n"
        "MlflowClient().log_metric(os.environ['MLFLOW_RUN_ID'], 'step_loss', 0.5, step=1)\n"
        f"while not os.path.exists({str(stop)!r}): time.sleep(0.05)\n"
    )
    info = client.launch(JobSpec(command=[PY, "-c", script], workdir=str(tmp_path)))

    def seen() -> bool:
        try:
            return client.metrics(info.job_id).latest.get("step_loss") == 0.5
        except AirError:
            return False

    try:
        wait_until(seen, timeout_s=60)
        assert client.get(info.job_id).status == JobStatus.RUNNING
    finally:
        stop.write_text("")  # seen by the job: its workdir is in its (read-only) view
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED


def _processes_of(job_id: str) -> list[int]:
    """Host pids whose environment names the job (readable: the tests run as the job's user)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"AIR_JOB_ID={job_id}".encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_setsid_child_does_not_outlive_its_sandboxed_job(client: Client) -> None:
    script = "setsid sleep 300 & echo started; sleep 0.3; exit 0"
    info = client.launch(JobSpec(command=["sh", "-c", script], track=False))
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "started" in client.logs(info.job_id).text
    # The sandbox's pid namespace ends with its first process: no escape survives it.
    wait_until(lambda: _processes_of(info.job_id) == [], timeout_s=10)
