"""Stall detection on real jobs: a silent hang is found, read and failed (a ticker redrawing
the same text does not hide it); healthy quiet jobs (metric steps, \\r progress bars, a
declared phase, a silent computation at full CPU) are left alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import GATED, open_gate, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.home import job_dir

PY = sys.executable
REPO = Path(__file__).resolve().parents[3]

# A hang: the main thread waits forever, using no CPU (a busy loop is work: see BUSY).
LOOP = """
import time
print("starting", flush=True)
def spin():
    while True:
        time.sleep(3600)  # the loop's line
spin()
"""


def test_silent_loop_is_stalled_with_its_stack_and_failed(client: Client) -> None:
    timeout_s = 3.0
    info = client.launch(
        JobSpec(command=[PY, "-c", LOOP], stall_timeout_min=timeout_s / 60, track=False)
    )
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.FAILED, done.message
    assert done.failure_kind == "user"
    assert "reason: stalled" in done.message
    # Acted on soon after its timeout, by the watch's own clock (no wall-clock bound here:
    # bench/stall.py measures the delay): quiet for 3 s, stopped within a few more.
    quiet = re.search(r"stalled (\d+(?:\.\d+)?) min", done.message)
    assert quiet and timeout_s / 60 <= float(quiet.group(1)) <= (timeout_s + 15) / 60
    # The loop's lines (py-spy catches it on either), from its stack.
    assert re.search(r"<string>:[56] spin\(\)", done.message), done.message
    stacks = (job_dir(client.home, info.job_id) / "stacks.txt").read_text()
    assert re.search(r"spin \(<string>:[56]\)", stacks)
    assert client.get(info.job_id).status == JobStatus.FAILED


# Issue 37 item 12: prints once, then computes in silence at full CPU for longer than its 3 s
# stall timeout. Its main thread stays on one line (a C call in a one-line loop): the CPU time
# is what tells it is working.
BUSY = """
import time
print("computing", flush=True)
end = time.monotonic() + 12
while time.monotonic() < end: sum(range(100_000))
print("done", flush=True)
"""


def test_a_silent_job_computing_at_full_cpu_is_not_stalled(client: Client) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", BUSY], stall_timeout_min=0.05, track=False))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "stalled" not in done.message
    assert client.logs(info.job_id).text.splitlines() == ["computing", "done"]


# Issue 37 item 13: a side thread redraws the same text with \r every 0.3 s while the main
# thread waits forever: the same text again is no progress.
TICKER = """
import sys, threading, time
def tick():
    while True:
        sys.stdout.write("\\rwaiting for the data server...")
        sys.stdout.flush()
        time.sleep(0.3)
threading.Thread(target=tick, daemon=True).start()
time.sleep(3600)
"""


def test_a_ticker_redrawing_the_same_text_does_not_hide_a_hung_main_thread(
    client: Client,
) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", TICKER], stall_timeout_min=0.05, track=False))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.FAILED, done.message
    assert "reason: stalled" in done.message
    assert re.search(r"<string>:9 <module>\(\)", done.message), done.message


def test_silence_from_the_start_is_covered(client: Client) -> None:
    """A job that never prints and never logs: stalled too."""
    code = "import time\nwhile True:\n    time.sleep(0.05)\n"
    info = client.launch(JobSpec(command=[PY, "-c", code], stall_timeout_min=0.03, track=False))
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.FAILED and "reason: stalled" in done.message
    assert re.search(r"<string>:[23] <module>\(\)", done.message), done.message


METRICS = """
import os, sys, time
sys.path.insert(0, {repo!r})
from air_skills.job import phase
with phase("startup", expect_min=2):  # MLflow's import: slow on a loaded machine
    import mlflow
    mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"])
    mlflow.log_metric("loss", 1.0, step=0)
for step in range(1, 14):
    time.sleep(1)
    mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
mlflow.end_run()
"""


def test_new_metric_steps_without_prints_are_progress(client: Client) -> None:
    """A new step every second for 13 s, nothing printed, a 6 s stall timeout: not stalled."""
    code = METRICS.format(repo=str(REPO))
    info = client.launch(JobSpec(command=[PY, "-c", code], stall_timeout_min=0.1))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "stalled" not in done.message
    log = Path(done.log_path or "").read_text()
    assert "loss" not in log  # it printed no progress of its own


SAME_STEP = """
import os, time, mlflow
with mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"]):
    while True:
        mlflow.log_metric("loss", 0.5, step=3)  # the same step again: not progress
        time.sleep(0.5)
"""


def test_the_same_step_logged_again_is_not_progress(client: Client) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", SAME_STEP], stall_timeout_min=0.05))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.FAILED and "reason: stalled" in done.message


BAR = """
import sys, time
for i in range(10):
    sys.stdout.write(f"\\r{i * 10}% |{'#' * i}{' ' * (10 - i)}|")
    sys.stdout.flush()
    time.sleep(0.6)
print()
"""


def test_a_carriage_return_progress_bar_is_progress(client: Client) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", BAR], stall_timeout_min=0.03, track=False))
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message


PHASE = """
import sys, time
sys.path.insert(0, {repo!r})
from air_skills.job import phase
print("saving", flush=True)
with phase("checkpoint", expect_min=3):
    # A long quiet save: past the 3 s stall timeout, within the phase's 3 min, and open
    # until the test has seen the phase (its gate: a fixed sleep may end before that).
    quiet_until = time.monotonic() + 8
{gated}    time.sleep(max(0.0, quiet_until - time.monotonic()))
print("saved", flush=True)
"""


def test_a_declared_phase_is_not_stalled(client: Client) -> None:
    gated = "".join("    " + line + "\n" for line in GATED.splitlines())
    code = PHASE.format(repo=str(REPO), gated=gated)
    info = client.launch(JobSpec(command=[PY, "-c", code], stall_timeout_min=0.05, track=False))
    jdir = job_dir(client.home, info.job_id)
    wait_until(lambda: list((jdir / "phases").glob("*.json")), timeout_s=30)
    open_gate(jdir)
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert not list((jdir / "phases").glob("*.json"))  # closed with the block
    gap = (jdir / "progress.json").read_text()
    assert '"max_gap_s"' in gap


def test_notify_keeps_the_job_running_and_wait_returns_saying_so(client: Client) -> None:
    code = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    spec = JobSpec(command=[PY, "-c", code], stall_timeout_min=0.03, on_stall="notify")
    info = client.launch(spec.model_copy(update={"track": False}))
    quiet = client.launch(JobSpec(command=[PY, "-c", "print('x')"], track=False))
    client.wait([quiet.job_id], timeout_s=60)
    # The wait returns when the watched job stalls, though it is still running.
    seen = client.wait([info.job_id], timeout_s=60)[0]
    assert seen.status == JobStatus.RUNNING, seen.message
    assert seen.message.startswith("RUNNING: stalled") and "on_stall: notify" in seen.message
    assert "<string>:3 <module>()" in seen.message
    assert client.get(info.job_id).status == JobStatus.RUNNING  # still running
    client.cancel(info.job_id)


def test_cli_stall_options_and_status(air_home: Path) -> None:
    air = [PY, "-m", "air_skills.cli.app"]
    code = "import time\nwhile True:\n    time.sleep(0.1)\n"
    launched = subprocess.run(
        [
            *air,
            "launch",
            "--json",
            "--stall-timeout-min",
            "0.03",
            "--on-stall",
            "fail",
            "--",
            PY,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert launched.returncode == 0, launched.stderr
    job_id = json.loads(launched.stdout)["job_id"]
    waited = subprocess.run(
        [*air, "wait", job_id, "--json", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    [info] = json.loads(waited.stdout)
    assert info["status"] == "FAILED" and "reason: stalled" in info["message"]
    status = subprocess.run([*air, "status", job_id], capture_output=True, text=True, timeout=120)
    assert "stalled" in status.stdout


def test_a_busy_gpu_is_progress_until_it_goes_idle(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A silent job whose (simulated) GPU is busy for 8 s, then idle: stalled only after."""
    trace = tmp_path / "gpus.json"
    trace.write_text(
        json.dumps(
            {
                str(g): [
                    {"kind": "utilization", "percent": 90},
                    {"kind": "utilization", "percent": 0, "after_s": 8},
                ]
                for g in range(4)
            }
        )  # fmt: skip
    )
    monkeypatch.setenv("AIR_SIMULATED_GPU_FAULTS", str(trace))
    code = "import time\nwhile True:\n    time.sleep(0.05)\n"
    spec = JobSpec(command=[PY, "-c", code], gpus=1, stall_timeout_min=0.05, track=False)
    info = client.launch(spec)
    done = client.wait([info.job_id], timeout_s=90)[0]
    assert done.status == JobStatus.FAILED and "reason: stalled" in done.message
    [stalled] = [e for e in client.store.events(info.job_id) if e["kind"] == "failed"]
    started = trace.stat().st_mtime
    assert stalled["ts"] - started >= 8  # never while the GPU was busy


# Prints a line every half second until the test opens its gate (the GATED way): a holder
# that is never silent and never ends before the test has done what it needs meanwhile.
TICKING_GATED = (
    "import os, time\n"
    "gate = os.path.join(os.path.dirname(os.environ['AIR_CONFIG_FILE']), 'gate')\n"
    "deadline = time.monotonic() + 120\n"
    "i = 0\n"
    "while not os.path.exists(gate) and time.monotonic() < deadline:\n"
    "    print(i, flush=True)\n"
    "    i += 1\n"
    "    time.sleep(0.5)\n"
)


def test_time_spent_queued_is_not_silence(client: Client) -> None:
    """A job queued behind another for longer than its stall timeout starts and succeeds."""
    holder = client.launch(
        JobSpec(command=[PY, "-c", TICKING_GATED], gpus=4, stall_timeout_min=0.03, track=False)
    )
    waiter = client.launch(
        JobSpec(command=[PY, "-c", "print('hi')"], gpus=1, stall_timeout_min=0.03, track=False)
    )
    assert client.get(waiter.job_id).status == JobStatus.QUEUED
    # Queued for twice its 1.8 s stall timeout before the holder may end.
    created = client.store.row(waiter.job_id).created_at
    wait_until(lambda: time.time() - created > 3.6, timeout_s=30)
    assert client.get(waiter.job_id).status == JobStatus.QUEUED
    open_gate(job_dir(client.home, holder.job_id))
    done = client.wait([waiter.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    held = client.wait([holder.job_id], timeout_s=60)[0]
    assert held.status == JobStatus.SUCCEEDED, held.message
    assert (held.ended_at and done.started_at) and done.started_at >= held.ended_at  # it waited


def test_the_stacks_are_attached_to_the_mlflow_run(client: Client) -> None:
    info = client.launch(JobSpec(command=[PY, "-c", LOOP], stall_timeout_min=0.05))
    done = client.wait([info.job_id], timeout_s=90)[0]
    assert done.status == JobStatus.FAILED and "reason: stalled" in done.message
    from mlflow.tracking import MlflowClient

    mc = MlflowClient(f"sqlite:///{client.home / 'mlflow.db'}")
    text = mc.download_artifacts(done.run_id, "air/stacks-attempt-1.txt")
    assert re.search(r"spin \(<string>:[56]\)", Path(text).read_text())


def test_a_preempted_job_waiting_to_resume_is_not_stalled(client: Client) -> None:
    low = client.launch(
        JobSpec(
            command=[PY, "-c", TICKING_GATED],
            gpus=4,
            priority="low",
            preemptible=True,
            stall_timeout_min=0.03,
            track=False,
        )  # fmt: skip
    )
    wait_until(lambda: client.get(low.job_id).status == JobStatus.RUNNING, 30)
    high = client.launch(
        JobSpec(command=[PY, "-c", TICKING_GATED], gpus=4, priority="high", track=False)
    )
    # Preempted, it waits in the queue for longer than its stall timeout, then resumes.
    wait_until(lambda: client.get(high.job_id).status == JobStatus.RUNNING, 60)
    started = client.store.row(high.job_id).started_at or 0.0
    wait_until(lambda: time.time() - started > 3.6, timeout_s=30)  # twice its 1.8 s timeout
    assert client.get(low.job_id).status == JobStatus.QUEUED
    open_gate(job_dir(client.home, high.job_id))
    wait_until(lambda: client.get(low.job_id).attempts >= 2, 60)
    wait_until(lambda: client.get(low.job_id).status == JobStatus.RUNNING, 60)
    open_gate(job_dir(client.home, low.job_id))
    done = client.wait([low.job_id], timeout_s=120, any=False)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "stalled" not in done.message
    assert client.wait([high.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
