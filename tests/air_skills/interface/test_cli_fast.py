"""`air ls --json` and `air status --json` answered without typer, rich or pydantic
(cli/fast.py): the same JSON as the typer commands, and what the fast path must not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from air_skills import Client, JobStatus
from air_skills.backends.job_view import CODE_FIELDS, job_json
from air_skills.cli.app import app
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
