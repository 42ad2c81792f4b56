"""The `air` CLI behaves like the tools people know (issue 23): a launch refuses what a dry run
refuses, id prefixes, narrow tables, Ctrl-C in a follow, usage errors in JSON, --version, help."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from typer.testing import CliRunner

from air_skills import Client, JobStatus
from air_skills.cli.app import app
from air_skills.errors import InvalidInput, InvalidSpec, NotFound

BIN = Path(sys.executable).parent


def run(*args: str, code: int = 0) -> Any:
    """`air ARGS` in this process; asserts the exit code."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.stderr + result.stdout
    return result


def test_a_real_launch_refuses_what_a_dry_run_refuses(
    air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    monkeypatch.chdir(tmp_path)
    typo = run("launch", "--", sys.executable, "trian.py", code=2)
    assert typo.stderr.startswith("[invalid-spec] the command would not start")
    assert "trian.py: no such file" in typo.stderr and "did you mean train.py?" in typo.stderr
    assert "--no-check-command" in typo.stderr  # the way out, in the Next: line
    program = run("launch", "--json", "--", "pyhton", "train.py", code=2)
    error = json.loads(program.stdout)["error"]
    assert error["code"] == "invalid-spec"
    assert any("did you mean python" in p for p in error["context"]["problems"])
    assert json.loads(run("ls", "--json").stdout) == []  # nothing queued
    # A job that writes its script first: the check is off when asked.
    writes = f"{tmp_path / 'later.py'}"
    made = run("launch", "--json", "--no-check-command", "--", sys.executable, writes)
    assert json.loads(made.stdout)["status"] in ("QUEUED", "RUNNING", "FAILED")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"command: [{sys.executable}, later.py]\ncheck_command: false\ntrack: false\n")
    assert json.loads(run("launch", str(spec), "--json").stdout)["job_id"].startswith("job-")


def _air(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "air"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _queued(client: Client, n: int) -> list[str]:
    """``n`` queued jobs (each wants the whole pool; the first runs): cheap to make and end."""
    spec = {"command": ["sleep", "60"], "gpus": 4, "track": False}
    return [client.launch(dict(spec, name=f"a-long-job-name-{i}")).job_id for i in range(n)]


def test_unique_id_prefixes_are_taken_and_ambiguous_ones_listed(client: Client) -> None:
    ids = _queued(client, 17)  # two of 17 share their first hex digit
    try:
        one = ids[0]
        assert client.get(one[:9]).job_id == one  # job-1de7a
        assert client.resolve_id(one[4:12]) == one  # the hex alone
        shown = json.loads(_air("status", one[:10], "--json").stdout)
        assert shown["job_id"] == one
        first = [i[4] for i in ids]
        shared = next(d for d in first if first.count(d) > 1)
        with pytest.raises(InvalidInput) as err:
            client.get(f"job-{shared}")
        assert err.value.code == "ambiguous-id" and err.value.exit_code == 2
        matches = [i for i in ids if i[4] == shared]
        assert set(matches) <= set(err.value.context["valid_keys"])
        out = _air("logs", f"job-{shared}", "--json")
        assert out.returncode == 2 and json.loads(out.stdout)["error"]["code"] == "ambiguous-id"
        with pytest.raises(NotFound):
            client.get("job-" + "".join(sorted(set("0123456789abcdef") - set(first)))[:1])
    finally:
        client.cancel_all()


def test_ls_keeps_ids_whole_in_80_columns(client: Client) -> None:
    ids = _queued(client, 3)
    try:
        done = _air("ls", env={"COLUMNS": "80"})
        lines = done.stdout.splitlines()
        assert lines and all(len(line) <= 80 for line in lines), lines
        for job_id in ids:
            assert sum(job_id in line for line in lines) == 1  # whole, on one line
        assert len(lines) == 1 + len(ids)  # a header, one line per job: nothing wrapped
    finally:
        client.cancel_all()


def _interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool]) -> tuple[int, str]:
    wait_until(ready, timeout_s=180)  # a fresh air process and a job start, beside a CPU hog
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # once beside a CPU hog: say where it was, then fail
        pytest.fail(f"no exit 60 s after Ctrl-C:\n{_where(proc.pid)}")
    return proc.returncode, err


def _as_in_a_terminal() -> None:
    """A foreground command's Ctrl-C: SIGINT at its default. A run started in the background
    (`make test &`, nohup) ignores SIGINT, its children inherit that, and Python then installs
    no KeyboardInterrupt: the follow went on after Ctrl-C in every such run."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _where(pid: int) -> str:
    """The stacks of a process that did not exit and its children (py-spy), for the failure."""
    spy = Path(sys.executable).parent / "py-spy"
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    out = [f"children: {kids.split()}"]
    for one in [str(pid), *kids.split()]:
        dump = subprocess.run(
            [str(spy), "dump", "--pid", one], capture_output=True, text=True, timeout=60
        )
        out.append(dump.stdout + dump.stderr)
    return "\n".join(out)


def _has_store_open(pid: int) -> bool:
    """Whether the process has AIR_HOME's store open: its client is made, the wait begun."""
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}").endswith("air.db")
            for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


def test_ctrl_c_in_a_follow_or_a_wait_says_the_job_goes_on(client: Client) -> None:
    code = "import time; print('ready', flush=True); time.sleep(120)"
    job = client.launch({"command": [sys.executable, "-c", code], "track": False}).job_id
    try:
        follow = subprocess.Popen(
            [str(BIN / "air"), "logs", job, "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_as_in_a_terminal,
        )
        assert follow.stdout is not None
        rc, err = _interrupt_when(follow, lambda: "ready" in follow.stdout.readline())
        said = f"{job} is not cancelled" in err and f"air cancel {job}" in err
        assert rc == 130 and said, (rc, err)
        wait = subprocess.Popen(
            [str(BIN / "air"), "wait", job[:9]],
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_as_in_a_terminal,
        )
        rc, err = _interrupt_when(wait, lambda: _has_store_open(wait.pid))
        assert rc == 130 and "not cancelled" in err and "air cancel" in err, (rc, err)
        assert client.get(job).status == JobStatus.RUNNING  # the job goes on
    finally:
        client.cancel(job)


def test_usage_errors_honour_json_and_every_command_has_a_version(air_home: Path) -> None:
    bad = _air("ls", "--no-such-option", "--json")
    assert bad.returncode == 2
    error = json.loads(bad.stdout)["error"]
    assert error["code"] == "usage-error" and "--no-such-option" in error["message"]
    assert "air ls --help" in error["hint"]
    text = _air("ls", "--no-such-option")
    assert text.returncode == 2 and "No such option" in text.stderr and text.stdout == ""
    for prog in ("air", "autoresearch", "air-mcp"):
        shown = subprocess.run(
            [str(BIN / prog), "--version"], capture_output=True, text=True, timeout=120
        )
        assert shown.returncode == 0 and shown.stdout.startswith(f"{prog} "), shown.stderr


def _options(command: Any) -> Iterator[tuple[str, Any]]:
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and not param.hidden:
            yield command.name, param
    for sub in getattr(command, "commands", {}).values():
        yield from _options(sub)


def test_every_option_has_help_and_no_flag_shows_a_type() -> None:
    import typer

    command = typer.main.get_command(app)
    missing = [f"{name} {p.opts[0]}" for name, p in _options(command) if not p.help]
    assert missing == []
    for args in (["launch", "--help"], ["ls", "--help"], ["--help"]):
        assert "<bool>" not in run(*args).stdout


def test_a_bad_choice_lists_only_that_options_choices(air_home: Path) -> None:
    bad = run("launch", "--priority", "urgent", "--", "true", code=2)
    assert "priority takes 'low', 'normal' or 'high'" in bad.stderr
    assert "valid fields" not in bad.stderr and "idempotency_key" not in bad.stderr


def test_a_wrong_nested_study_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    from autoresearch.study.study import parse_study

    with pytest.raises(InvalidSpec) as err:
        parse_study(
            {
                "name": "t",
                "command": ["python", "x.py"],
                "search_space": {"lr": {"type": "float", "low": 0.1, "high": 1.0}},
                "objective": {"metric": "loss", "direction": "minimize"},
                "budget": {"concurency": 2},
                "proposr": "tpe",
            }
        )
    problems = err.value.problems
    at = problems.index("budget.concurency: unknown key")
    assert problems[at + 1] == "did you mean budget.concurrency?"
    at = problems.index("proposr: unknown key")
    assert problems[at + 1] == "did you mean proposer?"


def test_compare_without_a_metric_prints_each_metric(client: Client, tmp_path: Path) -> None:
    script = tmp_path / "m.py"
    script.write_text("print('---'); print('loss: 0.25'); print('acc: 0.75')\n")
    spec = {"command": [sys.executable, "m.py"], "workdir": str(tmp_path)}
    jobs = [client.launch(spec).job_id for _ in range(2)]
    client.wait(jobs, timeout_s=120, any=False)
    shown = run("compare", *jobs).stdout
    assert "loss=0.25" in shown and "acc=0.75" in shown and "{" not in shown
