"""Issue 37.5, 37.6 and the two decided items, over real HTTP with the real MCP client: what an
identity may do is fields of it (backends, unsandboxed, data roots, readable projects); a limited
one is refused each unsafe field; an identity row from before gets the safe defaults; a job of
the server holds none of its secrets; a token kept where the README says is hidden from jobs;
logs and metrics are its project's; ``mlflow.user`` is the identity's."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers import wait_until
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox
from air_skills.runtime.store.identities import Forbidden, Identity

PY = sys.executable
pytestmark = pytest.mark.anyio
OWNER = "owner-token-" + "o" * 24
API_KEY = "sk-ant-api03-server-secret"
needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)
# What a job sees: its environment, and a file it was told of (another agent's token).
SPY = r"""
import json, os
out = {"env": dict(os.environ)}
try:
    out["token"] = open(os.environ["VICTIM_TOKEN_FILE"]).read()
except OSError as exc:
    out["token_error"] = type(exc).__name__
print("SPY", json.dumps(out), flush=True)
"""


def over_http(url: str, token: str) -> McpClient:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return McpClient(streamable_http_client(url, http_client=http))


def refusal(reply: Any) -> str:
    assert reply.is_error, reply.content
    return str(reply.content[0].text)


@pytest.fixture
def pool(
    client: Client, spawn_air_mcp: Callable[..., Any], tmp_path: Path, monkeypatch: Any
) -> dict[str, Any]:
    """air-mcp over HTTP, its environment holding the owner's token and an API key; identities:
    vis (defaults: local, sandboxed), nlp, rooted (data root R), wide (unsandboxed, ray)."""
    root = tmp_path / "R"
    (root / "code").mkdir(parents=True)
    monkeypatch.chdir(root / "code")  # the server's cwd: a snapshot of a small folder
    tokens = {
        "vis": client.add_identity("vis", "vision"),
        "nlp": client.add_identity("nlp", "nlp"),
        "reader": client.add_identity("reader", "nlp", read_projects=["vision"]),
        "rooted": client.add_identity("rooted", "vision", data_roots=[str(root)]),
        "wide": client.add_identity("wide", "ops", backends=["local", "ray"], unsandboxed=True),
    }
    sp = spawn_air_mcp(
        ["--transport", "http", "--port", "0"], AIR_MCP_TOKEN=OWNER, ANTHROPIC_API_KEY=API_KEY
    )
    return {"url": sp.url(), "tokens": tokens, "root": root, "server": sp}


def launch_args(**more: Any) -> dict[str, Any]:
    return {"command": [PY, "-c", "pass"], "track": False, **more}


async def test_a_limited_identity_is_refused_each_unsafe_field(
    pool: dict[str, Any], tmp_path: Path
) -> None:
    async with over_http(pool["url"], pool["tokens"]["vis"]) as vis:
        off = refusal(await vis.call_tool("launch_job", launch_args(sandbox="off")))
        assert "[forbidden]" in off and "sandbox: off" in off and "Next:" in off
        live = refusal(await vis.call_tool("launch_job", launch_args(code="live")))
        assert "[forbidden]" in live and "code: live" in live
        ray = refusal(await vis.call_tool("launch_job", launch_args(advanced={"backend": "ray"})))
        assert "[forbidden]" in ray and "backend 'ray'" in ray and "it may use: local" in ray
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    async with over_http(pool["url"], pool["tokens"]["rooted"]) as rooted:
        away = refusal(await rooted.call_tool("launch_job", launch_args(workdir=str(outside))))
        assert "[forbidden]" in away and f"workdir {outside}" in away
        assert str(pool["root"]) in away  # its roots are named
    async with over_http(pool["url"], OWNER) as owner:  # the owner keeps every right
        done = await owner.call_tool("launch_job", launch_args(sandbox="off", code="live"))
        assert not done.is_error, done.content


def test_a_limited_identity_cannot_name_writable_folders(client: Client, tmp_path: Path) -> None:
    """``writable`` is not a launch_job argument: the Python API, with the same check."""
    vis = client.as_identity(Identity("vis", "vision"))
    client.add_identity("vis", "vision")
    target = tmp_path / "victim"
    target.mkdir()
    spec = JobSpec(command=[PY, "-c", "pass"], track=False, writable=[str(target)])
    with pytest.raises(Forbidden) as exc:
        vis.launch(spec)
    assert exc.value.code == "forbidden" and f"writable {target}" in exc.value.message
    assert not client.list().items  # nothing queued


def test_the_rights_are_checked_again_where_the_job_is_queued(
    client: Client, tmp_path: Path
) -> None:
    """The store's check reads the row: a caller holding a stale Identity with more rights
    than its row (an owner revoked them) is still refused in the queueing transaction."""
    client.add_identity("vis", "vision")
    stale = client.as_identity(Identity("vis", "vision", unsandboxed=True))
    with pytest.raises(Forbidden) as exc:
        stale.launch(JobSpec(command=[PY, "-c", "pass"], track=False, sandbox="off"))
    assert "sandbox: off" in exc.value.message


async def test_an_identity_row_from_before_gets_the_safe_defaults(
    air_home: Path, spawn_air_mcp: Callable[..., Any]
) -> None:
    token = Client(air_home).add_identity("old", "vision")
    db = sqlite3.connect(air_home / "air.db")  # the row as a store from before holds it
    for column in ("backends", "unsandboxed", "data_roots", "read_projects"):
        db.execute(f"ALTER TABLE identities DROP COLUMN {column}")
    db.execute("PRAGMA user_version = 11")
    db.commit()
    db.close()
    sp = spawn_air_mcp(["--transport", "http", "--port", "0"])
    async with over_http(sp.url(), token) as old:
        off = refusal(await old.call_tool("launch_job", launch_args(sandbox="off")))
        assert "[forbidden]" in off and "sandbox: off" in off
        ray = refusal(await old.call_tool("launch_job", launch_args(advanced={"backend": "ray"})))
        assert "backend 'ray'" in ray
    row = [r for r in Client(air_home).identities() if r["name"] == "old"][0]
    assert row["backends"] == ["local"] and row["unsandboxed"] is False
    assert row["data_roots"] == [] and row["read_projects"] == []


@needs_sandbox
async def test_a_job_holds_no_server_secret_and_cannot_read_another_agents_token(
    pool: dict[str, Any], client: Client, air_home: Path
) -> None:
    """Item 5 and 6: the server's AIR_MCP_TOKEN and API key are not in the job's environment;
    a token kept where the README says (AIR_HOME/mcp-tokens, `air mcp-token add --save`) is
    hidden from the job, though it is the same user's file."""
    from air_skills.cli.tokens import save_token

    victim = save_token(air_home, "nlp", pool["tokens"]["nlp"])
    async with over_http(pool["url"], pool["tokens"]["vis"]) as vis:
        reply = await vis.call_tool(
            "launch_job",
            launch_args(command=[PY, "-c", SPY], env={"VICTIM_TOKEN_FILE": str(victim)}),
        )
        assert not reply.is_error, reply.content
        job_id = reply.structured_content["job_id"]
    info = client.wait([job_id], timeout_s=60)[0]
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.sandbox and info.sandbox.startswith("bwrap")
    line = next(ln for ln in client.logs(job_id).text.splitlines() if ln.startswith("SPY "))
    seen = json.loads(line[4:])
    assert "AIR_MCP_TOKEN" not in seen["env"] and "ANTHROPIC_API_KEY" not in seen["env"]
    assert OWNER not in line and API_KEY not in line
    assert "token" not in seen and seen["token_error"] == "FileNotFoundError"
    assert pool["tokens"]["nlp"] not in line
    assert os.stat(victim).st_mode & 0o777 == 0o600


async def test_logs_and_metrics_are_read_only_by_the_jobs_project(
    pool: dict[str, Any], client: Client
) -> None:
    async with over_http(pool["url"], pool["tokens"]["vis"]) as vis:
        reply = await vis.call_tool(
            "launch_job", launch_args(command=[PY, "-c", "print('secret=hunter2'); exit(3)"])
        )
        job_id = reply.structured_content["job_id"]
        client.wait([job_id], timeout_s=60)
        own = await vis.call_tool("get_logs", {"job_id": job_id})
        assert not own.is_error and "hunter2" in own.content[0].text
    async with over_http(pool["url"], pool["tokens"]["nlp"]) as nlp:
        logs = refusal(await nlp.call_tool("get_logs", {"job_id": job_id}))
        assert "[forbidden]" in logs and "project vision" in logs and "hunter2" not in logs
        grep = refusal(await nlp.call_tool("get_logs", {"job_id": job_id, "grep": "secret"}))
        assert "[forbidden]" in grep
        metrics = refusal(await nlp.call_tool("get_metrics", {"job_id": job_id}))
        assert "[forbidden]" in metrics
        both = refusal(await nlp.call_tool("compare_jobs", {"job_ids": [job_id, job_id]}))
        assert "[forbidden]" in both
        board = await nlp.call_tool("get_job", {"job_id": job_id})  # the board stays shared
        assert not board.is_error and "hunter2" not in json.dumps(board.structured_content)
    async with over_http(pool["url"], pool["tokens"]["reader"]) as reader:  # granted vision
        granted = await reader.call_tool("get_logs", {"job_id": job_id})
        assert not granted.is_error and "hunter2" in granted.content[0].text
    async with over_http(pool["url"], OWNER) as owner:
        assert not (await owner.call_tool("get_logs", {"job_id": job_id})).is_error


async def test_mlflow_user_is_the_identity_whatever_the_tags_say(
    tracked: str, pool: dict[str, Any], client: Client
) -> None:
    from mlflow.tracking import MlflowClient

    async with over_http(pool["url"], pool["tokens"]["vis"]) as vis:
        reply = await vis.call_tool(
            "launch_job",
            {
                "command": [PY, "-c", "pass"],
                "tags": {"mlflow.user": "nlp", "air.launched_by": "nlp"},
            },
        )
        assert not reply.is_error, reply.content
        job_id = reply.structured_content["job_id"]
    client.wait([job_id], timeout_s=60)
    run_id = wait_until(lambda: client.store.row(job_id).run_id, timeout_s=30)
    tags = MlflowClient(tracking_uri=tracked).get_run(run_id).data.tags
    assert tags["mlflow.user"] == "vis" and tags["air.launched_by"] == "vis"


def test_mcp_token_add_takes_the_rights_and_saves_the_token_hidden(
    air_home: Path, tmp_path: Path
) -> None:
    import subprocess

    env = {**os.environ, "AIR_HOME": str(air_home)}
    air = [PY, "-m", "air_skills.cli", "mcp-token"]
    made = subprocess.run(
        [*air, "add", "trusted", "--project", "ops", "--backend", "local", "--backend",
         "slurm", "--allow-unsandboxed", "--data-root", str(tmp_path), "--read-project", "*",
         "--save", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    saved = Path(json.loads(made.stdout)["token_file"])
    assert saved == air_home / "mcp-tokens" / "trusted" and "token" not in json.loads(made.stdout)
    assert os.stat(saved).st_mode & 0o777 == 0o600
    assert Client(air_home).identity_for_token(saved.read_text().strip()).unsandboxed
    listed = subprocess.run([*air, "ls", "--json"], capture_output=True, text=True, env=env)
    (row,) = json.loads(listed.stdout)
    assert row["backends"] == ["local", "slurm"] and row["unsandboxed"] is True
    assert row["data_roots"] == [os.path.realpath(tmp_path)] and row["read_projects"] == ["*"]
    bad = subprocess.run(
        [*air, "add", "x", "--project", "p", "--data-root", "relative/dir"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert bad.returncode != 0 and "data root 'relative/dir'" in bad.stderr


async def test_a_limited_identity_cannot_snapshot_air_home(
    pool: dict[str, Any], air_home: Path
) -> None:
    """A snapshot of AIR_HOME as its workdir would copy the store and the agents' token files
    (AIR_HOME/mcp-tokens) into the job's own view, past the sandbox that hides them."""
    async with over_http(pool["url"], pool["tokens"]["vis"]) as vis:
        home = refusal(await vis.call_tool("launch_job", launch_args(workdir=str(air_home))))
        assert "[forbidden]" in home and "inside AIR_HOME" in home
