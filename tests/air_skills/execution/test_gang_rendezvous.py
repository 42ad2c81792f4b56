"""A gang's rendezvous deadline: rank_boot.py's notes, the supervisor's watch, the outcome."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from air_skills.runtime.execution import rendezvous
from air_skills.runtime.execution.rendezvous import BOOT, JoinWatch, Timeout
from air_skills.status import JobStatus

PY = sys.executable


@pytest.mark.parametrize(
    ("command", "booted"),
    [
        (["python", "t.py", "--lr", "1"], ["python", BOOT, "/j", "t.py", "--lr", "1"]),
        (["python3", "-u", "-c", "pass", "x"], ["python3", "-u", BOOT, "/j", "-c", "pass", "x"]),
        (["python", "-m", "pkg.train"], ["python", BOOT, "/j", "-m", "pkg.train"]),
        (["python", "-X", "dev", "t.py"], None),  # an option with a value: left as is
        (["python", "-c"], None),
        (["python"], None),
        (["./train.sh", "t.py"], None),
    ],
)
def test_boot_command(command: list[str], booted: list[str] | None) -> None:
    assert rendezvous.boot_command(command, "/j") == (booted or command)


def boot(tmp_path: Path, *argv: str, rank: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RANK": rank}
    return subprocess.run(
        [PY, BOOT, str(tmp_path / "joins"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_boot_runs_a_script_as_python_would(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "sub" / "s.py").write_text(
        "import sys, helper\n"
        "print(__name__, sys.argv, helper.VALUE)\n"
        "def f():\n    raise ValueError('boom')\n"
        "if sys.argv[1:] == ['fail']:\n    f()\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    out = boot(tmp_path, "sub/s.py", "4")
    assert out.returncode == 4, out.stderr
    assert out.stdout == "__main__ ['sub/s.py', '4'] 7\n"  # its folder on sys.path
    failed = boot(tmp_path, "sub/s.py", "fail")
    assert failed.returncode == 1
    # The traceback starts at the script: no frame of the bootstrap or of runpy.
    assert failed.stderr.startswith('Traceback (most recent call last):\n  File "sub/s.py"')
    assert "rank_boot" not in failed.stderr and "runpy" not in failed.stderr
    assert failed.stderr.rstrip().endswith("ValueError: boom")
    code = boot(tmp_path, "-c", "import sys; print(__name__, sys.argv)", "a")
    assert code.stdout == "__main__ ['-c', 'a']\n"
    assert not (tmp_path / "joins").exists()  # no torch.distributed: no note


def test_boot_notes_the_rank_entering_init_process_group(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = (
        "import torch.distributed as dist\n"
        "from torch.distributed import distributed_c10d as c10d\n"
        "assert c10d.init_process_group is dist.init_process_group\n"
        "try:\n"
        "    dist.init_process_group('nope', rank=0, world_size=1, init_method='env://')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    out = boot(tmp_path, "-c", script, rank="3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()  # the real init_process_group ran, and refused the call
    assert os.listdir(tmp_path / "joins") == ["3"]


def test_join_watch(tmp_path: Path) -> None:
    folder = tmp_path / "1"
    watch = JoinWatch(str(folder), world=3, timeout=10)
    assert watch.check(now=1e12) is None  # nobody has called init_process_group
    folder.mkdir()
    (folder / "0").touch()
    (folder / "2").touch()
    os.utime(folder / "0", (1000, 1000))
    os.utime(folder / "2", (1005, 1005))
    assert watch.check(now=1009) is None  # the first arrival waits less than 10 s
    assert watch.check(now=1011) == Timeout(10, [0, 2], [1])
    (folder / "1").touch()
    os.utime(folder / "1", (1015, 1015))
    assert watch.check(now=1020) is None and not watch.done  # all came; meeting takes time
    for rank in range(3):
        (folder / f"{rank}.met").touch()
    assert watch.check(now=2000) is None and watch.done  # everyone met: torch's from here


def test_join_watch_names_ranks_that_arrive_and_never_meet(tmp_path: Path) -> None:
    folder = tmp_path / "1"
    folder.mkdir()
    watch = JoinWatch(str(folder), world=2, timeout=10)
    for rank, at in ((0, 1000), (1, 1004)):
        (folder / str(rank)).touch()
        os.utime(folder / str(rank), (at, at))
    (folder / "0.met").touch()  # a rank that met nobody would not: here rank 1 did not
    assert watch.check(now=1013) is None  # 10 s after the first, but 9 after the last
    assert watch.check(now=1015) == Timeout(10, [0, 1], [], [1])
    text = rendezvous.describe_late(Timeout(5, [0, 1], [], [0, 1]), str(tmp_path / "none.log"))
    assert text.startswith("rendezvous timed out after 5 s: ranks 0, 1 entered")
    assert "ranks 0, 1 never met the others" in text and "MASTER_PORT" in text
    out = rendezvous.late_outcome(text, SimpleNamespace(job_id="job-1", user_retries=0), {})
    assert "MASTER_PORT torchrun set" in out.message and "raise" not in out.message


def test_describe_late_quotes_the_missing_ranks_last_line(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[rank0]: ready\n[rank1]: loading\n[rank2]: still loading\n")
    one = rendezvous.describe_late(Timeout(5, [0, 1], [2]), str(log))
    assert one == (
        "rendezvous timed out after 5 s: ranks 0, 1 joined; rank 2 never joined"
        " (last line: 'still loading')"
    )
    two = rendezvous.describe_late(Timeout(5.5, [0], [1, 2]), str(log))
    assert two.endswith("rank 0 joined; ranks 1, 2 never joined (rank 1's last line: 'loading')")


def test_late_outcome_is_the_jobs_own_failure_and_retried_as_such() -> None:
    row = SimpleNamespace(job_id="job-1", user_retries=0)
    what = "rendezvous timed out after 5 s: rank 0 joined; rank 1 never joined (no output)"
    out = rendezvous.late_outcome(what, row, {"max_retries": 1})
    assert out.action == "requeue" and out.kind == "user"
    assert out.message == f"QUEUED: {what}; retry 1 of 1"
    spent = rendezvous.late_outcome(what, SimpleNamespace(job_id="job-1", user_retries=1), {})
    assert spent.status == JobStatus.FAILED and spent.failure_kind == "user"
    assert spent.message.startswith(f"FAILED: {what}; every rank was stopped. Next:")
    assert spent.signal == "SIGTERM"


def test_timeout_is_read_from_the_launch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rendezvous.NAME, "7")
    assert rendezvous.timeout_s({rendezvous.NAME: "2.5"}) == 2.5
    assert rendezvous.timeout_s({rendezvous.NAME: "-1"}) == 7.0  # bad: this process's
    assert rendezvous.timeout_s(None) == 7.0
    monkeypatch.delenv(rendezvous.NAME)
    assert rendezvous.timeout_s({}) == 300.0
