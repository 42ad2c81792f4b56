"""Issue 25: a sandbox made ahead by an idle supervisor gives its job the very view bwrap gives.

sandbox_ahead.py starts bwrap before the job is known and its stub makes the job's mounts
when it is. Each test runs real jobs, finds which way each started (the bwrap command line of
its recorded pid), and compares what the job saw: its mounts, capabilities, signals, files
and what it could write. The other sandbox tests run through both ways as they come.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import GATED, open_gate, ready_spares, spares_ready, started_ahead, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox, sandbox_ahead
from air_skills.runtime.execution.sandbox_ahead import HOST_VIEW

PY = sys.executable
pytestmark = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)

PROBE = r"""
import json, os, sys
home = os.environ["AIR_HOME"]
jdir = os.path.dirname(os.environ["AIR_CONFIG_FILE"])
top = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    top[f[4]] = f[5].split(",")[0]  # the later entry is the one on top: ro or rw
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
def writable(path):
    try:
        open(os.path.join(path, ".probe"), "w").close()
        os.remove(os.path.join(path, ".probe"))
        return True
    except OSError:
        return False
report = {
    "mounts": {p: o for p, o in top.items() if not p.startswith(("/proc/", "/sys/", "/dev/"))},
    "caps": [status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "no_new_privs": status["NoNewPrivs"],
    "signals": [status[k] for k in ("SigIgn", "SigBlk")],
    "uid": [os.getuid(), os.getgid()],
    "fds": sorted(os.listdir("/proc/self/fd")),
    "cwd": os.getcwd(),
    "home": sorted(os.listdir(home)),
    "host_view": os.path.lexists(sys.argv[1]),
    "tmp": sorted(os.listdir("/tmp")),
    "job_folder_writable": writable(jdir),
    "home_writable": writable(home),
}
print("PROBE " + json.dumps(report), flush=True)
"""


def _probe(client: Client, script: Path, gate: Path) -> tuple[dict, bool]:
    """Run the probe held at its start by ``gate`` (so its bwrap can be read), then let it go."""
    held = (
        "import os, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        f"import runpy, sys; sys.argv = [{str(script)!r}, {HOST_VIEW!r}]\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    info = client.launch(
        JobSpec(command=[PY, "-c", held], track=False, sandbox="on", workdir=str(script.parent))
    )
    pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
    ahead = started_ahead(pid)
    gate.write_text("go")
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    gate.unlink()
    return json.loads(log.split("PROBE ", 1)[1].splitlines()[0]), ahead


def _comparable(report: dict) -> dict:
    """The report with its job's own folder name put aside."""
    out = dict(report)
    out["mounts"] = {re.sub(r"job-[0-9a-f]+", "JOB", p): o for p, o in report["mounts"].items()}
    out["home"] = [re.sub(r"job-[0-9a-f]+", "JOB", n) for n in report["home"]]
    out["cwd"] = re.sub(r"job-[0-9a-f]+", "JOB", report["cwd"])
    cap_inh, cap_prm, cap_eff, _bounding, cap_amb = report["caps"]
    out["caps"] = [cap_inh, cap_prm, cap_eff, cap_amb]  # bwrap run as root keeps a bounding set
    return out


def test_a_job_in_a_sandbox_made_ahead_sees_what_bwrap_shows_it(
    client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In the folder that holds AIR_HOME: the bind of the script's folder lies over AIR_HOME,
    # and the tmpfs hiding AIR_HOME must still come on top of it.
    assert air_home.parent == tmp_path
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    gate = tmp_path / "gate"
    # Made ahead: the supervisor of a first job, idle now, has one ready.
    first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)
    warm, warm_ahead = _probe(client, script, gate)
    assert warm_ahead, "the probe should have started in the sandbox made ahead"
    # bwrap on the launch's path: a launch that says AIR_SANDBOX_AHEAD=off
    monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    cold, cold_ahead = _probe(client, script, gate)
    assert not cold_ahead
    # The same view, the same privileges (none), the same signals and files.
    assert warm["caps"] == ["0000000000000000"] * 5, warm["caps"]
    assert warm["no_new_privs"].strip() == "1"
    assert warm["host_view"] is False and ".air-host" not in warm["tmp"]
    assert warm["job_folder_writable"] is True
    # AIR_HOME is a private tmpfs: no air.db, no other job (the caches are the user's own)
    assert warm["home"] == ["jobs"]
    assert warm["fds"] == ["0", "1", "2", "3"]  # 3: the listing's own
    assert _comparable(warm) == _comparable(cold)


def test_the_jobs_own_work_and_its_exit_status_come_through_a_sandbox_made_ahead(
    client: Client, air_home: Path, tmp_path: Path
) -> None:
    first = client.launch(JobSpec(command=["true"], track=False, sandbox="on"))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)
    gate = tmp_path / "gate"  # under /tmp: the job sees it through its workdir's bind
    script = (
        "import os, signal, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        "open(os.path.join(os.environ['AIR_CHECKPOINT_DIR'], 'ckpt'), 'w').write('w')\n"
        "print('to the log', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
    )
    info = client.launch(
        JobSpec(command=[PY, "-c", script], track=False, sandbox="on", workdir=str(tmp_path))
    )
    pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
    assert started_ahead(pid)
    gate.write_text("go")
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.FAILED and done.signal == "SIGTERM", done
    assert "to the log" in client.logs(info.job_id).text
    ckpt = air_home / "jobs" / info.job_id / "checkpoints" / "ckpt"
    assert ckpt.read_text() == "w"


def test_a_spare_that_cannot_make_the_view_gives_up_and_the_job_starts_as_usual(
    air_home: Path, tmp_path: Path
) -> None:
    """In this process: a spare made, a view its stub refuses; start() says so (None), and
    the spare's processes are gone."""
    air_home.mkdir(parents=True, exist_ok=True)
    sandbox_ahead.prepare()
    spare = sandbox_ahead._SPARE
    assert spare is not None
    try:
        wait_until(spare.ready, timeout_s=60)
        base = spare.base
        view = sandbox.View(base, (("--no-such-mount", "/", "/x"),), None)
        log = tmp_path / "log"
        with open(log, "ab") as f:
            child = sandbox_ahead.start(view, ["true"], {"PATH": os.defpath}, f.fileno())
        assert child is None
        assert spare.child.poll() is not None  # ended, and reaped
        assert sandbox_ahead._SPARE is None
        assert log.read_text() == ""  # nothing started, nothing said in the job's log
    finally:
        sandbox_ahead.discard()


def test_a_leaving_supervisor_takes_its_sandbox_made_ahead_with_it(
    client: Client, air_home: Path
) -> None:
    info = client.launch(JobSpec(command=["true"], track=False, sandbox="on"))
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)
    spares = ready_spares(air_home)
    # The supervisors linger 3 s (conftest), then leave: no spare may outlive its own.
    for stub, supervisor in spares.items():
        wait_until(lambda s=supervisor: not os.path.exists(f"/proc/{s}"), timeout_s=60)
        wait_until(lambda s=stub: not os.path.exists(f"/proc/{s}"), timeout_s=30)
    assert ready_spares(air_home) == {}


def test_a_running_jobs_supervisor_makes_the_next_sandbox_for_the_job_queued_behind_it(
    client: Client, air_home: Path
) -> None:
    """The job that runs past AIR_SANDBOX_AHEAD's start time gets its supervisor to make the
    next sandbox then; the job queued behind it (all GPUs) starts in it when it ends."""
    first = client.launch(
        JobSpec(command=[PY, "-c", GATED], gpus=4, track=False, sandbox="on", code="live")
    )
    row = wait_until(lambda: (r := client.store.row(first.job_id)) and r.job_pid and r, 60)
    queued = client.launch(JobSpec(command=["sleep", "1"], gpus=4, track=False, sandbox="on"))
    assert client.get(queued.job_id).status == JobStatus.QUEUED
    # Made while the first runs (supervisor.AHEAD_AFTER_RUN_S), by the first's supervisor.
    mine = row.supervisor_pid
    wait_until(lambda: mine in ready_spares(air_home).values(), timeout_s=60)
    open_gate(air_home / "jobs" / first.job_id)
    pid = wait_until(lambda: client.store.row(queued.job_id).job_pid, timeout_s=60)
    assert client.store.row(queued.job_id).supervisor_pid == mine
    assert started_ahead(pid)
    assert client.wait([queued.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED


def test_spares_that_keep_failing_are_given_up_and_said(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """A bwrap that refuses what a spare asks (here: a wrapper that fails any command line
    naming the stub) costs a few tries, each said in the log, then no more."""
    real = sandbox.bwrap_path()
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *sandbox_stub.py*) echo "bwrap: refused here" >&2; exit 1;; esac\n'
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("AIR_BWRAP", str(fake))
    air_home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(sandbox_ahead, "_lost", 0)
    try:
        for _ in range(sandbox_ahead.GIVE_UP_AFTER):
            sandbox_ahead.prepare()
            spare = sandbox_ahead._SPARE
            assert spare is not None
            spare.child.wait(timeout=60)
        sandbox_ahead.prepare()  # finds the last one gone: the third loss, and no new try
        assert sandbox_ahead._SPARE is None and sandbox_ahead._lost == sandbox_ahead.GIVE_UP_AFTER
        sandbox_ahead.prepare()
        assert sandbox_ahead._SPARE is None
    finally:
        sandbox_ahead.discard()
    said = capfd.readouterr().err
    assert said.count("bwrap: refused here") == sandbox_ahead.GIVE_UP_AFTER
    assert said.count("a sandbox made ahead ended unused") == sandbox_ahead.GIVE_UP_AFTER
    assert "no more here" in said
