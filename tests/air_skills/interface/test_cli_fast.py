"""`air ls --json` and `air status --json` answered without typer, rich or pydantic
(cli/fast), `air launch --json` without typer or rich (cli/fast/launch.py): the same JSON
as the typer commands, and what the fast paths must not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air_skills import Client, JobStatus
from air_skills.backends.job_view import CODE_FIELDS, job_json
from air_skills.cli.app import app
from air_skills.cli.fast.launch import parse
from air_skills.models import CodeInfo, JobInfo

BIN = Path(sys.executable).parent


def _typer(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _fast(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "air"), *args], capture_output=True, text=True, timeout=120, env=os.environ
    )


def test_the_json_mapping_has_the_models_fields_in_order() -> None:
    assert list(CODE_FIELDS) == list(CodeInfo.model_fields)
    assert {k: f.default for k, f in CodeInfo.model_fields.items() if k != "digest"} == {
        k: v for k, v in CODE_FIELDS.items() if k != "digest"
    }


def test_fast_answers_are_the_typer_commands_answers(client: Client, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print('hi')\n")
    done = client.launch({"command": [sys.executable, "t.py"], "workdir": str(tmp_path)})
    client.wait([done.job_id], timeout_s=120)
    queued = [
        client.launch({"command": ["sleep", "60"], "gpus": 4, "track": False}).job_id
        for _ in range(2)
    ]
    try:
        fast = _fast("ls", "--json")
        assert fast.returncode == 0, fast.stderr
        assert fast.stdout == _typer("ls", "--json")
        assert len(json.loads(fast.stdout)) == 3
        assert _fast("ls", "--limit", "2", "--json").stdout == _typer(
            "ls", "--limit", "2", "--json"
        )
        for job in (done.job_id, queued[1], queued[1][:9]):
            fast = _fast("status", job, "--json")
            assert fast.returncode == 0 and fast.stdout == _typer("status", job, "--json")
        for row in client.store.rows():  # the model takes the mapping unchanged
            assert JobInfo.model_validate(job_json(row)).model_dump(mode="json") == job_json(row)
        missing = _fast("status", "job-0000000000", "--json")
        assert (
            missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "not-found"
        )
        assert client.get(done.job_id).status == JobStatus.SUCCEEDED
    finally:
        client.cancel_all()


def test_the_fast_path_imports_neither_typer_nor_rich_nor_pydantic(air_home: Path) -> None:
    probe = (
        "import sys; sys.argv = ['air', 'ls', '--json']\n"
        "from air_skills.cli.fast import answer\n"
        "assert answer(sys.argv[1:]) == 0\n"
        "heavy = [m for m in ('typer', 'rich', 'pydantic', 'mlflow') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr); sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _both(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """`air ARGS` through the fast path (a fresh `air` process) and through the typer app."""
    fast = subprocess.run(
        [str(BIN / "air"), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    return fast, CliRunner().invoke(app, list(args))


def test_fast_launch_gives_the_typer_commands_json(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "t.py").write_text("print('hi')\n")
    monkeypatch.chdir(work)  # the typer path snapshots the same folder
    blocker = client.launch({"command": ["sleep", "60"], "gpus": 4, "track": False})
    try:
        # a success: a job queued behind the blocker; both paths then answer the retry
        args = ["launch", "--gpus", "1", "--name", "q", "--set", "lr=0.1", "--no-network"]
        args += ["--idempotency-key", "k-1", "--json", "--", sys.executable, "t.py"]
        first = subprocess.run([str(BIN / "air"), *args], capture_output=True, text=True, cwd=work)
        assert first.returncode == 0, first.stderr
        job = json.loads(first.stdout)
        assert job["status"] == "QUEUED" and job["name"] == "q"
        fast, typer = _both(work, *args)
        assert parse(args[1:]) is not None  # the fast path answers it, not typer
        assert fast.returncode == typer.exit_code == 0
        assert fast.stdout == typer.stdout and json.loads(fast.stdout)["job_id"] == job["job_id"]
        assert client.store.row(job["job_id"]).spec_dict()["config"] == {"lr": 0.1}
        # a dry run: the same reply but its creation time
        dry = ["launch", "--dry-run", "--priority", "high", "--json", "--", sys.executable, "t.py"]
        fast, typer = _both(work, *dry)
        assert parse(dry[1:]) is not None
        assert fast.returncode == typer.exit_code == 0
        answers = [json.loads(fast.stdout), json.loads(typer.stdout)]
        for a in answers:
            assert a.pop("created_at") and a["job_id"] == "dry-run"
        assert answers[0] == answers[1]
        # bad input: the same error (code, message, Next), the same exit code
        for bad in (
            ["launch", "--priority", "urgent", "--json", "--", "true"],
            ["launch", "--json", "--", "pyhton", "t.py"],
            ["launch", "--json", "--set", "oops", "--", "true"],
            ["launch", "--json", "--gpus", "9", "--", "true"],
        ):
            fast, typer = _both(work, *bad)
            assert parse(bad[1:]) is not None
            assert fast.stdout == typer.stdout and fast.returncode == typer.exit_code != 0, bad
            assert json.loads(fast.stdout)["error"]["hint"]
        # what the fast path leaves to typer: a usage error, in the same JSON
        assert parse(["--json", "--gpus", "two", "--", "true"]) is None
        fast = _fast("launch", "--json", "--gpus", "two", "--", "true")
        assert fast.returncode == 2 and json.loads(fast.stdout)["error"]["code"] == "usage-error"
        assert len(client.list(limit=100).items) == 2  # the blocker and the one queued job
        assert client.get(blocker.job_id).status == JobStatus.RUNNING
    finally:
        client.cancel_all()


def test_fast_launch_imports_neither_typer_nor_rich(air_home: Path, tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from air_skills.cli.fast import answer\n"
        "assert answer(['launch', '--json', '--dry-run', '--', 'true']) == 0\n"
        "heavy = [m for m in ('typer', 'rich', 'mlflow') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr); sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr


def test_a_plain_launch_imports_no_pydantic(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`air launch --json -- CMD` (models/spec_view.py's check, Client.launch_view) queues the
    job as the typer path does, without pydantic; a spec the view is not sure of takes the
    pydantic path, and a retry with its key through that path finds the same spec."""
    (tmp_path / "t.py").write_text("print('hi')\n")
    probe = (
        "import json, sys\n"
        "from air_skills.cli.fast import answer\n"
        "args = ['launch', '--json', '--idempotency-key', 'k', '--set', 'lr=0.1', '--',"
        " sys.executable, 't.py']\n"
        "assert answer(args) == 0\n"
        "heavy = [m for m in ('typer', 'rich', 'pydantic', 'mlflow') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr); sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    again = ["launch", "--idempotency-key", "k", "--set", "lr=0.1", "--json", "--"]
    monkeypatch.chdir(tmp_path)  # the typer path resolves the same folder
    fast, typer = _both(tmp_path, *again, sys.executable, "t.py")
    assert fast.returncode == typer.exit_code == 0, (fast.stdout, typer.stdout)
    assert json.loads(typer.stdout)["job_id"] == json.loads(fast.stdout)["job_id"] == job["job_id"]
    client = Client(air_home)
    assert client.store.row(job["job_id"]).spec_dict()["config"] == {"lr": 0.1}
    client.wait([job["job_id"]], timeout_s=120)


def test_fast_launch_reads_every_option_of_the_typer_command_by_its_name() -> None:
    """Each option of `air launch` is read by the fast path under its parameter name, or
    left to typer (--watch, --seeds, --seed-key, --grid, --help): the two never drift."""
    import typer.main

    from air_skills.cli.fast.launch import FLAGS, LISTS, VALUES

    command = typer.main.get_command(app).commands["launch"]  # type: ignore[attr-defined]
    fast = {o: n for o, (n, _) in VALUES.items()} | LISTS | {o: n for o, (n, _) in FLAGS.items()}
    left_to_typer = {"--watch", "--seeds", "--seed-key", "--grid", "--variants", "--help"}
    for param in command.params:
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("--") and opt not in left_to_typer:
                assert fast.get(opt) == param.name, opt
    assert set(fast) <= {o for p in command.params for o in [*p.opts, *p.secondary_opts]}


def test_a_plain_fast_launch_prints_the_typer_commands_line(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`air launch` without --json takes the fast path too (41.5): a fresh `air` process
    queues the job, which runs, and prints the line the typer command prints; its retry, dry
    run and errors print what typer prints, with the same exit codes."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "t.py").write_text("print('hi from the job')\n")
    monkeypatch.chdir(work)  # the typer path snapshots the same folder
    args = ["launch", "--name", "plain", "--idempotency-key", "k-plain", "--set", "lr=0.1"]
    args += ["--", sys.executable, "t.py"]
    assert parse(args[1:]) is not None  # the fast path answers it, not typer
    first = subprocess.run([str(BIN / "air"), *args], capture_output=True, text=True, cwd=work)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    job_id, status, gpus, message = first.stdout.rstrip("\n").split("  ", 3)
    assert first.stdout.count("\n") == 1 and job_id.startswith("job-") and gpus == "gpus=-"
    assert status in ("QUEUED", "RUNNING", "SUCCEEDED") and message, first.stdout
    (done,) = client.wait([job_id], timeout_s=120)
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "hi from the job" in client.logs(job_id).text
    assert done.name == "plain" and client.store.row(job_id).spec_dict()["config"] == {"lr": 0.1}
    fast, typer = _both(work, *args)  # the retry finds the same job: the same line
    assert fast.returncode == typer.exit_code == 0
    assert fast.stdout == typer.stdout and fast.stdout.startswith(f"{job_id}  SUCCEEDED  ")
    dry = ["launch", "--dry-run", "--priority", "high", "--", sys.executable, "t.py"]
    fast, typer = _both(work, *dry)
    assert fast.returncode == typer.exit_code == 0 and fast.stdout == typer.stdout
    assert fast.stdout.startswith("dry-run  QUEUED  gpus=-  DRY RUN: ")
    for bad in (["launch", "--priority", "urgent", "--", "true"], ["launch", "--", "pyhton"]):
        fast, typer = _both(work, *bad)
        assert parse(bad[1:]) is not None
        assert fast.returncode == typer.exit_code == 2, bad
        assert fast.stdout == typer.stdout == "" and fast.stderr == typer.stderr, bad
        assert fast.stderr.startswith("[invalid-spec] ") and "\nNext: " in fast.stderr
    assert [j.job_id for j in client.list(limit=100).items] == [job_id]


def test_a_plain_fast_launch_imports_neither_typer_nor_rich(air_home: Path, tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from air_skills.cli.fast import answer\n"
        "assert answer(['launch', '--name', 'n', '--', 'true']) == 0\n"
        "heavy = [m for m in ('typer', 'rich', 'click', 'mlflow') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr); sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job-") and "  gpus=-  " in done.stdout


@pytest.mark.parametrize(
    "message",
    ["queued", "", "tab\there", "cr\rhere", "bell\x07", "esc \x1b[31mred", "[bold]x[/]",
     ":smile: 日本 e\u0301", "two\nlines", "bidi \u202e x", "del\x7f c1\x85", "ff\x0c vt\x0b"],
)  # fmt: skip
def test_the_plain_line_is_what_rich_prints(message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """cli/lines.py writes the job's line itself only where rich would print the same bytes
    (cli/output.py's say of job_line, to a file that is no terminal); else it leaves it."""
    import io

    from rich.console import Console

    from air_skills.cli.lines import job_parts, write_plain
    from air_skills.cli.output import job_line, say

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    parts = job_parts("job-1", "QUEUED", [0, 3], message)
    rich_out, ours = io.StringIO(), io.StringIO()
    say(Console(file=rich_out, soft_wrap=True), job_line(*parts))
    if write_plain(ours, "".join(parts)):
        assert ours.getvalue() == rich_out.getvalue()
    else:
        assert ours.getvalue() == "" and any(c in message for c in "\t\r\x07\x0b\x0c")
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich would colour the status: left to it
    assert not write_plain(io.StringIO(), "".join(parts))
