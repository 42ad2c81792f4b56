"""39.8 and 39.9 over `air-mcp` on stdio: steer a running study (a note, a config queued to run
next, a pinned parameter, a raised budget), journaled and shown by get_study; then follow the
study to its end with wait_for_study's `since` cursor, each reply only what changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp_calls import ok, refused

from autoresearch.journal.journal import Journal

pytestmark = pytest.mark.anyio
TRIAL = Path(__file__).resolve().parents[2] / "autoresearch" / "trial_script.py"


def _study(hold: Path) -> dict:
    return {
        "name": "steered",
        "command": [sys.executable, str(TRIAL)],
        "workdir": str(TRIAL.parent),
        # the search's trials wait while `hold` exists; the baseline (x=0) does not
        "base_config": {
            "x": 0.0,
            "y": 0.0,
            "steps": 3,
            "sleep_s": 0.05,
            "hold_while": str(hold),
            "free_x": 0.0,
        },  # fmt: skip
        "search_space": {
            "x": {"type": "float", "low": -1.0, "high": 1.0},
            "y": {"type": "float", "low": -1.0, "high": 1.0},
        },
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 2, "concurrency": 1},
        "noise": {"repeats": 0},
        "gpus_per_trial": 0,
        "proposer": "random",
    }


async def test_steer_a_running_study_and_follow_it_with_a_cursor(
    stdio: StdioServerParameters, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.write_text("")
    folder = tmp_path / "studies" / "steered"
    async with McpClient(stdio) as mcp:
        await ok(mcp, "start_study", study=_study(hold), study_dir=str(folder))
        text = await refused(mcp, "steer_study", study=str(folder), budget={"trails": 3})
        assert "budget key(s) trails" in text and "nothing was changed" in text
        steered, _ = await ok(
            mcp,
            "steer_study",
            study=str(folder),
            note="try x near 0.3",
            enqueue=[{"diff": {"x": 0.3}}],
            pin={"y": 0.6},
            budget={"trials": 3},
        )
        assert "queued 1 trial(s)" in steered["steered"] and "pinned y=0.6" in steered["steered"]
        hold.unlink()  # the search's trials may run now
        reply, text = await ok(mcp, "wait_for_study", study=str(folder), timeout_s=5)
        cursor, replies = reply["cursor"], [len(text)]
        for _ in range(60):
            if reply["state"] != "running":
                break
            reply, text = await ok(
                mcp, "wait_for_study", study=str(folder), timeout_s=30, since=cursor
            )
            replies.append(len(text))
            assert "noise" not in reply  # a delta: not the whole view again
            cursor = reply["cursor"]
        assert reply["state"] == "finished", reply
        final, _ = await ok(mcp, "get_study", study=str(folder))
        # The whole view at the end, as the first call gave it while the study had fewer
        # trials: each cursor's reply (a delta) is smaller than it.
        _, whole = await ok(mcp, "wait_for_study", study=str(folder), timeout_s=1)
    assert final["budget"]["trials"]["limit"] == 3  # the study file said 2: steered to 3
    assert final["trials"]["total"] == 3 and final["steering"]["queued"] == 0
    assert final["steering"]["requests"][0].startswith("steered by the owner: note: try x")
    events = Journal(folder).read()
    steer = [e for e in events if e["event"] == "steer"]
    assert len(steer) == 1 and steer[0]["pin"] == {"y": 0.6}
    proposals = {e["trial"]: e for e in events if e["event"] == "proposal"}
    assert proposals[1]["source"] == "steer" and proposals[1]["diff"] == {"x": 0.3, "y": 0.6}
    assert proposals[2]["diff"]["y"] == 0.6  # the proposer's trial holds the pin
    assert max(replies[1:]) < len(whole), (replies, len(whole))  # deltas, not the view again
    json.dumps(final)


def test_only_the_studys_starter_or_its_owner_may_steer_it(tmp_path: Path) -> None:
    from air_skills.runtime.store.identities import Forbidden
    from autoresearch.api import steer_study
    from autoresearch.study.steer_requests import record_starter

    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "study.yaml").write_text(json.dumps(_study(tmp_path / "h")))
    Journal(folder).append("study_updated", study=_study(tmp_path / "h"))
    record_starter(folder, "alice")
    with pytest.raises(Forbidden, match="started by alice, not bob"):
        steer_study(folder, note="x", by="bob")
    assert steer_study(folder, note="from alice", by="alice")["steering"]["requests"]
    assert steer_study(folder, note="an admin", by="carol", admin=True)["steering"]


def test_autoresearch_steer_journals_a_request(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autoresearch.cli import app

    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "study.yaml").write_text(json.dumps(_study(tmp_path / "h")))
    Journal(folder).append("study_updated", study=_study(tmp_path / "h"))
    result = CliRunner().invoke(
        app,
        ["steer", str(folder), "--note", "smaller x", "--enqueue", '{"x": 0.1}',
         "--pin", "y=0.5", "--budget", "trials=9"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # rich wraps the line
    assert "queued 1 trial(s)" in said and "budget trials=9" in said
    (steer,) = [e for e in Journal(folder).read() if e["event"] == "steer"]
    assert steer["enqueue"] == [{"diff": {"x": 0.1}}] and steer["pin"] == {"y": 0.5}
