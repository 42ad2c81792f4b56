"""A spec is refused, cleanly and before anything is created, when its config holds what
JSON cannot (YAML dates, !!set, !!binary, self-referring or exploding aliases) or a string
the OS will see holds a NUL byte. Real `air` processes, as the breaks were seen from the shell."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from air_skills.errors import InvalidSpec
from air_skills.models import JobSpec

AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")


def air(*args: str, code: int, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([AIR, *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def job_folders(home: Path) -> list[str]:
    return sorted(os.listdir(home / "jobs")) if (home / "jobs").exists() else []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2024-01-01", "config.d = 2024-01-01 is a date, which JSON cannot hold: quote it"),
        ("!!set {a: null}", "config.d is a set (!!set)"),
        ("!!binary aGVsbG8=", "config.d is binary data (!!binary)"),
    ],
)
def test_set_value_json_cannot_hold_is_refused(air_home: Path, value: str, said: str) -> None:
    result = air("launch", "--set", f"d={value}", "--", "true", code=2)
    assert result.stderr.startswith("[invalid-spec] invalid job spec: config: ")
    assert said in result.stderr
    assert job_folders(air_home) == []


def test_spec_file_date_and_nul_refused_with_every_problem(air_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        'command: ["true", "a\\0b"]\nname: "n\\0"\nworkdir: "/tmp\\0x"\n'
        'env: {KEY: "v\\0"}\ntags: {t: "\\0"}\nconfig: {when: {start: 2024-01-01}}\n'
    )
    result = air("launch", str(spec), code=2)
    assert result.stderr.startswith("[invalid-spec] ")
    for field in ("command", "name", "workdir", "env", "tags", "config.when.start = 2024-01-01"):
        assert field in result.stderr
    assert job_folders(air_home) == []
    spec.write_text('command: ["true"]\nconfig: {when: "2024-01-01"}\n')  # quoted: text
    assert "DRY RUN" in air("launch", str(spec), "--dry-run", code=0).stdout


@pytest.mark.slow
def test_set_python_tag_stays_text(air_home: Path, tmp_path: Path) -> None:
    """safe_load refuses python tags; the value is then passed as the text it is."""
    tagged = '!!python/object/apply:os.system ["touch pwned"]'
    show = "import json, os; print(json.load(open(os.environ['AIR_CONFIG_FILE']))['x'])"
    out = air(
        "launch",
        "--json",
        "--set",
        f"x={tagged}",
        "--",
        sys.executable,
        "-c",
        show,
        code=0,
        cwd=tmp_path,
    )
    job = __import__("json").loads(out.stdout)["job_id"]
    air("wait", job, "--timeout", "60", code=0)
    assert air("logs", job, code=0).stdout.strip() == tagged
    assert not (tmp_path / "pwned").exists()


def test_alias_bomb_and_self_reference_refused_quickly() -> None:
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    for config in (yaml.safe_load(bomb), yaml.safe_load("a: &x [*x]")):
        started = time.monotonic()
        with pytest.raises(InvalidSpec, match="without anchors and aliases"):
            JobSpec.parse({"command": ["true"], "config": config})
        assert time.monotonic() - started < 10


def test_data_path_and_key_nul_refused() -> None:
    with pytest.raises(InvalidSpec) as caught:
        JobSpec.parse(
            {"command": ["true"], "data": [{"name": "d", "path": "/x\0"}], "experiment": "e\0"}
        )
    assert {p.split(":")[0] for p in caught.value.problems} == {"data.0.path", "experiment"}
    config = {"k": [1, 2.5, None, True, {"n": 1e-3, 3: "int keys are JSON"}]}
    assert JobSpec.parse({"command": ["true"], "config": config}).config == config


def test_spec_file_must_be_a_regular_file(air_home: Path, tmp_path: Path) -> None:
    """A FIFO blocked `air launch` forever; /dev/zero would fill memory."""
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        result = air("launch", str(path), code=2)
        assert result.stderr.startswith(f"[invalid-input] {path} is not a regular file")
