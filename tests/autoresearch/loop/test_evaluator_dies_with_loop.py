"""kill -9 of the loop while its trusted evaluator runs (issue 30): the evaluator dies with it
(it was left running with PPID 1), what it started is ended by the resume, and the resume
evaluates the trial once."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import yaml
from ar_helpers import start_loop
from code_tree import code_study, make_tree
from helpers import wait_until

from autoresearch.journal.journal import Journal, TrialStatus, replay

# The evaluator notes each start and the pid of a child it leaves in its group, then waits
# for as long as the gate file exists; then it prints the objective. The notes folder is written
# into the script: an evaluator gets job_env's allow-list, not the loop's environment (37.5).
EVALUATE = """\
import os, subprocess, sys, time
from pathlib import Path

here = Path(NOTES)
with open(here / "starts", "a") as f:
    f.write(f"{os.getpid()}\\n")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
(here / f"child-{os.getpid()}").write_text(str(child.pid))
while (here / "gate").exists():
    time.sleep(0.05)
child.kill()
value = float((Path(os.environ["AIR_CHECKPOINT_DIR"]) / "loss.txt").read_text())
print("---")
print(f"loss: {value + 0.5}")
"""


def first_number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not written yet, or half written
        return None


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[1][:1] == b"Z"
    except FileNotFoundError:
        return True


def test_the_evaluator_dies_with_the_loop_and_resume_evaluates_once(
    study_home: Path, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "tree")
    notes = tmp_path / "notes"
    notes.mkdir()
    (tree / "evaluate.py").write_text(EVALUATE.replace("NOTES", repr(str(notes)), 1))
    (notes / "gate").touch()
    # sandbox off: this evaluator writes its notes outside its scratch folder
    study = code_study(tree, evaluate=f"{sys.executable} evaluate.py", budget={"trials": 1},
                       sandbox="off")  # fmt: skip
    study_file, folder = tmp_path / "study.yaml", tmp_path / "study"
    study_file.write_text(yaml.safe_dump(study))
    loop = start_loop(study_file, folder)
    try:
        first = wait_until(lambda: first_number(notes / "starts"), timeout_s=120)
        child = wait_until(lambda: first_number(notes / f"child-{first}"), timeout_s=30)
        os.kill(loop.pid, signal.SIGKILL)
        loop.wait(timeout=30)
    finally:
        if loop.poll() is None:
            loop.kill()
    wait_until(lambda: gone(first), timeout_s=30)  # the evaluator followed the loop
    assert not gone(child)  # its own child is still there: the resume must end it
    (notes / "gate").unlink()
    resumed = start_loop(study_file, folder, resume=True)
    assert resumed.wait(timeout=180) == 0, resumed.stderr.read().decode() if resumed.stderr else ""
    assert gone(child)
    starts = (notes / "starts").read_text().split()
    assert len(starts) == 2 and starts[0] == str(first)  # killed once, run once more
    events = Journal(folder).read()
    finished = [e for e in events if e["event"] == "finished"]
    assert len(finished) == 1 and finished[0]["trial"] == 0
    (t,) = replay(events).ordered()
    assert t.status == TrialStatus.SUCCEEDED and t.value == 1.5 and t.decision == "baseline"
    assert not (folder / ".evaluate" / "running.json").exists()


def marked(folder: Path) -> list[int]:
    """Live processes serving the study in ``folder`` as its evaluator (their environment)."""
    mark = f"AIR_EVALUATOR_OF={folder.resolve()}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or gone(int(name)):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def test_a_sandboxed_evaluator_dies_with_the_loop_too(study_home: Path, tmp_path: Path) -> None:
    """The default for a code study with an evaluator: it runs in its own sandbox (bwrap),
    started through the same boot; kill -9 of the loop takes the sandbox and all in it."""
    from air_skills.runtime.execution import sandbox

    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    tree = make_tree(tmp_path / "tree")
    (tree / "evaluate.py").write_text(
        "import time\nprint('evaluating', flush=True)\ntime.sleep(600)\n"
    )
    study = code_study(tree, evaluate=f"{sys.executable} evaluate.py", budget={"trials": 1})
    study_file, folder = tmp_path / "study.yaml", tmp_path / "study"
    study_file.write_text(yaml.safe_dump(study))
    loop = start_loop(study_file, folder)
    try:
        wait_until(lambda: len(marked(folder)) >= 2, timeout_s=120)  # bwrap and the evaluator
        os.kill(loop.pid, signal.SIGKILL)
        loop.wait(timeout=30)
        wait_until(lambda: not marked(folder), timeout_s=30)
    finally:
        if loop.poll() is None:
            loop.kill()
        for pid in marked(folder):
            os.kill(pid, signal.SIGKILL)
