"""config_as (issue 38.1): a job's config reaches scripts that take flags (argparse, click,
typer), real processes, real parsers; a flag the script refuses is named in the job's message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution.config_args import config_flags, job_argv, rejected_flag

PY = sys.executable
CONFIG = {"lr": 0.003, "layers": [64, 32], "amp": True, "compile": False, "opt": "adam", "n": 3}

ARGPARSE = """
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--layers", type=int, nargs="+", default=[8])
p.add_argument("--amp", action="store_true")
p.add_argument("--compile", action="store_true")
p.add_argument("--opt", default="sgd")
p.add_argument("--n", type=int, default=1)
print("ARGS " + json.dumps(vars(p.parse_args())))
"""

ARGPARSE_STRICT = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
p.parse_args()
"""

CLICK = """
import json, click
@click.command()
@click.option("--lr", type=float, default=0.1)
@click.option("--amp", is_flag=True)
@click.option("--compile", is_flag=True)
@click.option("--opt", default="sgd")
@click.option("--n", type=int, default=1)
def main(lr, amp, compile, opt, n):
    print("ARGS " + json.dumps(dict(lr=lr, amp=amp, compile=compile, opt=opt, n=n)))
main()
"""

TYPER = """
import json, typer
def main(lr: float = 0.1, amp: bool = False, compile: bool = False, opt: str = "sgd", n: int = 1):
    print("ARGS " + json.dumps(dict(lr=lr, amp=amp, compile=compile, opt=opt, n=n)))
typer.run(main)
"""


def run(client: Client, tmp_path: Path, source: str, config: dict, **kw: object):
    script = tmp_path / "train.py"
    script.write_text(source)
    spec = JobSpec(command=[PY, str(script)], config=config, track=False, **kw)  # type: ignore[arg-type]
    info = client.wait([client.launch(spec).job_id], timeout_s=120)[0]
    assert info.status.is_terminal(), info
    return info


def parsed(client: Client, info) -> dict:
    line = next(x for x in client.logs(info.job_id).text.splitlines() if x.startswith("ARGS "))
    return json.loads(line[5:])


def test_flags_of_a_config() -> None:
    assert config_flags(CONFIG) == [
        "--lr=0.003",
        "--layers",
        "64",
        "32",
        "--amp",
        "--opt=adam",
        "--n=3",
    ]
    assert config_flags({"f": 1.0, "x": None, "e": [], "d": {"a": 1}}) == ["--f=1.0", '--d={"a":1}']
    spec = {"command": ["python", "t.py", "--own"], "config": {"lr": 1}}
    assert job_argv(spec) == ["python", "t.py", "--own", "--lr=1"]  # after its own arguments
    assert job_argv({**spec, "config_as": "file"}) == ["python", "t.py", "--own"]
    assert rejected_flag("t.py: error: unrecognized arguments: --amp --n=3") == "--amp"
    assert rejected_flag("Error: No such option: --opt") == "--opt"


def test_argparse_script_gets_every_kind_of_value(client: Client, tmp_path: Path) -> None:
    info = run(client, tmp_path, ARGPARSE, CONFIG)
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert parsed(client, info) == {**CONFIG, "compile": False}


@pytest.mark.parametrize("source", [CLICK, TYPER], ids=["click", "typer"])
def test_click_and_typer_scripts_get_the_config(
    client: Client, tmp_path: Path, source: str
) -> None:
    config = {k: v for k, v in CONFIG.items() if k != "layers"}
    info = run(client, tmp_path, source, config, config_as="args")
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert parsed(client, info) == config


def test_config_as_file_adds_no_flags(client: Client, tmp_path: Path) -> None:
    info = run(client, tmp_path, ARGPARSE, {"lr": 0.5}, config_as="file")
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert parsed(client, info)["lr"] == 0.1  # the script's default: the flag was not given


def test_a_refused_flag_is_named_with_config_as(client: Client, tmp_path: Path) -> None:
    info = run(client, tmp_path, ARGPARSE_STRICT, {"lr": 0.5, "warmup": 10})
    assert info.status == JobStatus.FAILED and info.failure_kind == "user"
    assert "--warmup" in info.message and "config_as: both" in info.message, info.message
    assert "Next:" in info.message and "AIR_CONFIG_FILE" in info.message


def test_air_launch_takes_config_as() -> None:
    from air_skills.cli.fast.launch import parse
    from air_skills.cli.launch_spec import launch_spec

    positional, command, given = parse(["--config-as", "args", "--json", "--", PY, "t.py"])
    assert given["config_as"] == "args"
    spec = launch_spec(positional, command, given)
    assert JobSpec.parse(spec).config_as == "args"
