"""The stall watch's parts on their own: py-spy dumps read into one line, the clock, the
outcome policy, and a job folder that holds traps (a FIFO, a link) for the supervisor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from helpers import wait_until

from air_skills.runtime.supervision import stacks, stall, stall_end, stall_words
from air_skills.runtime.supervision.stall import Stall, StallWatch
from air_skills.status import JobStatus

PY = sys.executable

DUMP = """Process 11: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 11 (idle): "MainThread"
    clock_nanosleep (libc.so.6)
    all_reduce (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)
    wrapper (/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:81)
    step (/work/train.py:88)
    <module> (/work/train.py:120)
Thread 12 (idle): "pt_elastic"
    wait (/usr/lib/python3.11/threading.py:331)
"""


def test_a_dump_reads_as_one_line_and_a_collective_wait() -> None:
    frames = stacks.parse_main_frames(DUMP)
    assert [f.func for f in frames] == ["all_reduce", "wrapper", "step", "<module>"]  # no .so
    s = stacks.ProcessStack(11, 1, DUMP, frames, True)
    assert s.where() == "all_reduce (distributed_c10d.py:3252) from train.py:88"
    mine = stacks.ProcessStack(12, 0, "", [stacks.Frame("step", "/work/train.py", 88)], True)
    assert mine.where() == "train.py:88 step()"
    assert stacks.summary([mine, s]) == (
        "rank 0 in train.py:88 step(); rank 1 in all_reduce (distributed_c10d.py:3252)"
        " from train.py:88"
    )
    assert stacks.collective_wait([s]) and not stacks.collective_wait([mine])


def test_a_real_dump_of_a_python_and_a_non_python_process() -> None:
    py = subprocess.Popen([PY, "-c", "import time\ndef nap():\n    time.sleep(60)\nnap()\n"])
    sh = subprocess.Popen(["sleep", "60"])
    try:
        # Until the interpreter has reached nap() (polled: no sleep as a signal).
        wait_until(lambda: stacks.dump([py.pid])[0].where() == "<string>:3 nap()", 30)
        got = stacks.dump([py.pid, sh.pid])
        assert got[0].python and got[0].where() == "<string>:3 nap()", got[0].text
        assert not got[1].python and got[1].where().startswith("state S (sleeping), wchan ")
    finally:
        py.kill()
        sh.kill()


def watch(tmp_path: Path, budget_s: float = 10) -> StallWatch:
    log = tmp_path / "job.log"
    log.write_text("")
    return StallWatch(tmp_path, str(log), budget_s, now=0.0)


def test_the_clock_log_growth_and_phases(tmp_path: Path) -> None:
    w = watch(tmp_path)
    assert w.check(5.0, list) is None
    (tmp_path / "job.log").write_text("step 1\r")  # a progress bar's frame is output too
    assert w.check(9.0, list) is None and w.last_progress == 9.0
    (tmp_path / "phases").mkdir()
    (tmp_path / "phases" / "0.json").write_text('{"name": "checkpoint", "expect_min": 1}')
    assert w.check(15.0, list) is None and w.last_progress == 15.0  # the phase opened
    assert w.check(60.0, list) is None  # 45 s quiet: within the phase's minute
    found = w.check(80.0, list)  # 65 s quiet: past it
    assert found is not None and found.phase == "checkpoint" and found.silent_s == 65.0
    assert found.what().startswith("stalled 1.1 min in phase 'checkpoint': ")
    assert (tmp_path / "stacks.txt").read_text().startswith("stalled 1.1 min (budget 0.17 min)")


def test_only_new_log_content_is_progress_not_the_same_line_or_redraw_again(
    tmp_path: Path,
) -> None:
    """Issue 37 item 13: a ticker that redraws (or prints) the same text again is no progress;
    a new line, or a progress bar's next frame, is."""
    w = watch(tmp_path)
    log = tmp_path / "job.log"
    with open(log, "a") as f:
        f.write("loading\n")
        f.flush()
        assert w.check(1.0, list) is None and w.last_progress == 1.0  # new content
        for t in (2.0, 3.0, 4.0):
            f.write("\rwaiting for the data server...")
            f.flush()
            w.check(t, list)
        assert w.last_progress == 2.0  # its first drawing only
        f.write("loading\n")  # printed again: seen
        f.flush()
        assert w.check(6.0, list) is None and w.last_progress == 2.0
        f.write("\r 10% |#         |")  # a progress bar's next frame: new
        f.flush()
        assert w.check(7.0, list) is None and w.last_progress == 7.0
        f.write("\rwaiting for the data server...")
        f.flush()
        found = w.check(18.0, list)  # 11 s with nothing new: stalled
    assert found is not None and found.silent_s == 11.0


def test_traps_in_the_job_folder_neither_hang_nor_redirect_writes(tmp_path: Path) -> None:
    w = watch(tmp_path)
    (tmp_path / "phases").mkdir()
    os.mkfifo(tmp_path / "phases" / "0.json")  # opened blindly, it would block forever
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    (tmp_path / "stacks.txt").symlink_to(target)
    (tmp_path / "progress.json").symlink_to(target)
    assert w.check(30.0, list) is None  # the phases folder changed: that counts as a move
    found = w.check(45.0, list)
    assert found is not None and found.phase is None  # the FIFO is no phase, and no hang
    w.finish(46.0)
    assert target.read_text() == "keep me"
    assert (
        not (tmp_path / "stacks.txt").is_symlink()
        and "stalled" in (tmp_path / "stacks.txt").read_text()
    )
    assert '"max_gap_s": 30.0' in (tmp_path / "progress.json").read_text()


def test_a_relayed_jobs_steps_are_read_in_its_own_store(tmp_path: Path) -> None:
    """A sandboxed job's steps count as they land in its own store, before any relay."""
    log = tmp_path / "job.log"
    log.write_text("")
    w = StallWatch(tmp_path, str(log), 10, run_id="r1", now=0.0)
    metrics = tmp_path / "mlruns" / "0" / "r1" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "loss").write_text("1 0.5 0\n")
    assert w.check(8.0, list) is None and w.last_progress == 8.0  # a first step
    with (metrics / "loss").open("a") as f:
        f.write("2 0.5 0\n")  # the same step again: not progress
    assert w.check(12.0, list) is None and w.last_progress == 8.0
    with (metrics / "loss").open("a") as f:
        f.write("3 0.4 1\n")
    assert w.check(16.0, list) is None and w.last_progress == 16.0  # a new step, in time
    os.mkfifo(metrics / "trap")  # a FIFO the job made: skipped, never waited on
    with (metrics / "loss").open("a") as f:
        f.write("4 0.4 1\n")
    found = w.check(27.0, list)
    assert found is not None and found.silent_s == 11.0


def row(**kw: object) -> SimpleNamespace:
    base: dict[str, object] = {"job_id": "job-1", "user_retries": 0, "infra_retries": 0}
    return SimpleNamespace(**{**base, "attempts": 1, "run_id": None, **kw})


def test_the_outcome_policy() -> None:
    user = Stall(1860, 1800, "pid 7 in t.py:3 f()", False, "/j/stacks.txt")
    coll = Stall(1860, 1800, "rank 1 in all_reduce (d.py:9)", True, "/j/stacks.txt")
    out = stall_end.outcome(user, row(), {})
    assert out.status == JobStatus.FAILED and out.failure_kind == "user"
    assert out.message.startswith("FAILED: stalled 31 min: pid 7 in t.py:3 f() (reason: stalled")
    again = stall_end.outcome(coll, row(), {})  # default: a collective wait is retried once
    assert again.action == "requeue" and again.kind == "infra"
    spent = stall_end.outcome(coll, row(infra_retries=1), {})
    assert spent.status == JobStatus.FAILED and spent.failure_kind == "infra"
    assert "stall retries spent" in spent.message
    assert stall_end.outcome(coll, row(), {"on_stall": "fail"}).failure_kind == "user"
    retry = stall_end.outcome(user, row(infra_retries=1), {"on_stall": "retry"})
    assert retry.action == "requeue"  # under AIR_MAX_INFRA_RETRIES (3)
    user_retry = stall_end.outcome(user, row(), {"max_retries": 1})
    assert user_retry.action == "requeue" and user_retry.kind == "user"


def test_timeout_from_spec_then_launch_environment_then_default() -> None:
    assert stall.timeout_s({"stall_timeout_min": 0.5}, {stall.NAME: "9"}) == 30
    assert stall.timeout_s({"stall_timeout_min": 0}, None) is None  # off
    assert stall.timeout_s({}, {stall.NAME: "2"}) == 120
    assert stall.timeout_s({}, {stall.NAME: "0"}) is None
    assert stall.timeout_s({}, {stall.NAME: "nope"}) == 1800


def test_each_outcome_message_gives_its_stall_note_and_others_none() -> None:
    user = Stall(1860, 1800, "pid 7 in t.py:3 f()", False, "/j/stacks.txt")
    coll = Stall(1860, 1800, "rank 1 in all_reduce (d.py:9)", True, "/j/stacks.txt")
    messages = [
        stall_end.outcome(user, row(), {}).message,
        stall_end.outcome(coll, row(), {}).message,
        stall_end.outcome(coll, row(infra_retries=1), {}).message,
        stall_end.outcome(user, row(), {"on_stall": "retry"}).message,
        stall_words.notify_message(coll),
    ]
    notes = [stall_words.note(m) for m in messages]
    assert notes[0] == "stalled 31 min: pid 7 in t.py:3 f()"
    assert notes[1] == notes[2] == "stalled 31 min: rank 1 in all_reduce (d.py:9)"
    assert notes[3] == notes[0] and notes[4] == notes[1]
    told = stall_words.say_stalled("RUNNING on GPUs [0]", user.what())
    assert stall_words.note(told) == notes[0]
    assert stall_words.note("FAILED: exited 1", 80) is None
    assert stall_words.note("RUNNING: moving again after a stall") is None
    assert stall_words.note(messages[0], 20) == "stalled 31 min: p..."


def test_the_watch_goes_on_from_its_saved_state(tmp_path: Path) -> None:
    """The Ray backend keeps a watch between reconciles as JSON: the clock goes on from it."""
    first = watch(tmp_path)
    (tmp_path / "job.log").write_text("step 1\n")
    assert first.check(9.0, list) is None and first.last_progress == 9.0
    second = StallWatch(tmp_path, str(tmp_path / "job.log"), 10, now=0.0)
    second.restore(json.loads(json.dumps(first.state())))
    assert second.last_progress == 9.0 and second.check(12.0, list) is None  # no new output
    assert second.last_progress == 9.0
    found = second.check(25.0, list)  # 16 s quiet since the output first seen: past 10 s
    assert found is not None and found.silent_s == 16.0
    third = StallWatch(tmp_path, str(tmp_path / "job.log"), 10, now=0.0)
    third.restore({**first.state(), "steps": "not a dict"})  # a state that does not read is ignored
    assert third.last_progress == 0.0
