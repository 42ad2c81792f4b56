"""`air launch --seeds/--grid` (many jobs in one call) and `air compare --group-by seed`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
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


def test_a_sweep_of_1000_variants_refuses_all_when_one_is_bad(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """41.2: one bad item of 1,000 (a patch that does not apply) refuses the whole sweep."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(TRAIN)
    variants = [{"config": {"lr": n / 1000}} for n in range(1000)]
    variants[737]["patch"] = "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-import nothing\n+import os\n"
    file = tmp_path / "variants.json"
    file.write_text(json.dumps(variants))
    result = CliRunner().invoke(
        app, ["launch", "--variants", str(file), "--seeds", "0", "--", sys.executable, "t.py"]
    )
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "1 of 1000 job(s) refused; nothing was launched" in result.stdout + result.stderr
    assert "item 737" in result.stdout + result.stderr
    assert client.list(limit=5).items == []


def test_a_sweep_gets_a_batch_id_that_air_cancel_takes(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "variants.yaml").write_text("- config: {lr: 0.1}\n- config: {lr: 0.3}\n")
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    result = CliRunner().invoke(
        app,
        ["launch", "--gpus", "4", "--variants", str(tmp_path / "variants.yaml"), "--seeds",
         "0,1", "--", *command],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    batch = result.stdout.split("batch_id ")[1].split()[0]
    cancelled = air_json("cancel", batch)
    assert len(cancelled) == 4 and {j["status"] for j in cancelled} == {"CANCELLED"}
    assert cancelled[3]["name"] == "lr=0.3 seed=1"
