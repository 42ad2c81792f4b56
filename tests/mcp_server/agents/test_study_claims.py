"""Claims for a study that several agents share (issue 29): two agents, real MCP clients over
HTTP with their own tokens, ask suggest_trials at once and get different trials (the proposer,
seeded by the history, would give both the same); the board says who proposed each trial and
who ran it; a claim that expires frees its trial."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from air_skills import Client
from autoresearch.api import suggest_trials

pytestmark = pytest.mark.anyio
TRAIN = """
import json, os
config = json.load(open(os.environ["AIR_CONFIG_FILE"]))
print("---")
print(f"loss: {config['x'] ** 2}")
"""


def over_http(url: str, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return McpClient(streamable_http_client(url, http_client=http))


def study_file(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    study = {
        "name": "shared",
        "command": [sys.executable, "train.py"],
        "workdir": str(tmp_path),
        "base_config": {"x": 0.5},
        "search_space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 8},
        "proposer": "random",
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def configs(reply: Any) -> list[float]:
    return [s["config"]["x"] for s in reply.structured_content["suggestions"]]


async def test_two_agents_asking_at_once_get_different_trials_and_a_board_of_who_ran_them(
    client: Client, spawn_air_mcp: Callable[..., Any], tmp_path: Path
) -> None:
    study = str(study_file(tmp_path))
    alone = suggest_trials(study, 2)["suggestions"]  # no claims: the same history, the same pick
    assert [s["config"] for s in alone] == [
        s["config"] for s in suggest_trials(study, 2)["suggestions"]
    ]
    tokens = {name: client.add_identity(name, "lab") for name in ("ada", "bo")}
    url = spawn_air_mcp(["--transport", "http", "--port", "0"]).url()
    got: dict[str, Any] = {}

    async def ask(name: str) -> None:
        async with over_http(url, tokens[name]) as mcp:
            got[name] = await mcp.call_tool("suggest_trials", {"study": study, "n": 2})

    async with anyio.create_task_group() as tg:
        for name in tokens:
            tg.start_soon(ask, name)
    assert not got["ada"].is_error and not got["bo"].is_error, got
    picked = configs(got["ada"]) + configs(got["bo"])
    assert len(picked) == 4 and len(set(picked)) == 4, picked
    first = "ada" if configs(got["ada"])[0] == alone[0]["config"]["x"] else "bo"
    notes = got["bo" if first == "ada" else "ada"].structured_content["notes"]
    assert any(f"claimed by {first}" in n for n in notes), notes

    async with over_http(url, tokens["ada"]) as ada:
        x = configs(got["ada"])[0]
        launched = await ada.call_tool(
            "launch_job",
            {
                "command": [sys.executable, "train.py"],
                "workdir": str(tmp_path),
                "config": {"x": x},
            },
        )
        assert not launched.is_error, launched.content
        job_id = launched.structured_content["job_id"]
    client.wait([job_id], timeout_s=120)
    async with over_http(url, tokens["bo"]) as bo:
        reply = await bo.call_tool("suggest_trials", {"study": study, "n": 1})
    board = {row["config"]["x"]: row for row in reply.structured_content["board"]}
    assert board[x]["proposed_by"] == "ada" and board[x]["ran_by"] == "ada"
    assert board[x]["job_id"] == job_id and board[x]["status"] == "SUCCEEDED"
    assert {board[c]["proposed_by"] for c in configs(got["bo"])} == {"bo"}
    assert json.dumps(reply.structured_content).count(tokens["bo"]) == 0


def test_an_expired_claim_frees_its_trial(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = str(study_file(tmp_path))
    monkeypatch.setenv("AIR_CLAIM_S", "3")
    home = str(client.home)
    held = suggest_trials(study, 1, claimed_by="ada", home=home)["suggestions"][0]["config"]
    other = suggest_trials(study, 1, claimed_by="bo", home=home)["suggestions"][0]["config"]
    assert other != held
    deadline = time.monotonic() + 30
    while suggest_trials(study, 1, claimed_by="cy", home=home)["suggestions"][0]["config"] != held:
        assert time.monotonic() < deadline, "an expired claim still held its trial"
        time.sleep(0.2)  # a poll's interval: the claim expires on the clock
    again = suggest_trials(study, 1, claimed_by="ada", home=home)  # cy claimed it meanwhile
    assert again["suggestions"][0]["config"] != held
    assert any("claimed by cy" in n for n in again["notes"]), again["notes"]


def test_a_trial_whose_config_a_job_already_ran_is_not_handed_out(
    client: Client, tmp_path: Path
) -> None:
    study = str(study_file(tmp_path))
    first = suggest_trials(study, 1)["suggestions"][0]["config"]  # what the proposer picks first
    job = client.launch(
        {"command": [sys.executable, "train.py"], "workdir": str(tmp_path), "config": first}
    )
    out = suggest_trials(study, 1, claimed_by="ada", home=str(client.home))
    assert out["suggestions"][0]["config"] != first
    assert any(f"already run as {job.job_id}" in n for n in out["notes"]), out["notes"]
