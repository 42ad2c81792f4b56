"""`air launch --seeds/--grid` (many jobs in one call) and `air compare --group-by seed`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from air_skills import Client
from air_skills.cli.app import app

TRAIN = """\
import json, os
c = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print("loss:", c["lr"] * 10 + c["seed"])
"""


def air_json(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(app, [args[0], "--json", *args[1:]])
    assert result.exit_code == code, result.stderr + result.stdout
    return json.loads(result.stdout)


def test_seeds_and_a_grid_launch_in_one_call_and_compare_groups_them(
    client: Client, tmp_path: Path
) -> None:
    (tmp_path / "t.py").write_text(TRAIN)
    common = ["--seeds", "0,2", "--grid", "lr=0.1,0.3", "--name", "b"]
    jobs = air_json("launch", *common, "--idempotency-key", "k", "--", sys.executable,
                    str(tmp_path / "t.py"))  # fmt: skip
    assert [j["name"] for j in jobs] == ["b lr=0.1 seed=0", "b lr=0.1 seed=2", "b lr=0.3 seed=0",
                                          "b lr=0.3 seed=2"]  # fmt: skip
    ids = [j["job_id"] for j in jobs]
    again = air_json("launch", *common, "--idempotency-key", "k", "--", sys.executable,
                     str(tmp_path / "t.py"))  # fmt: skip
    assert [j["job_id"] for j in again] == ids
    assert all(i.status.value == "SUCCEEDED" for i in client.wait(ids, 120, any=False))
    groups = air_json("compare", *ids, "--metric", "loss", "--group-by", "seed")
    assert [g["members"] for g in groups] == [ids[:2], ids[2:]]
    assert [g["mean"] for g in groups] == [2.0, 4.0] and groups[0]["n"] == 2
