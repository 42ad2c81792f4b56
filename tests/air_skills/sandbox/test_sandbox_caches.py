"""Issue 38 (5): the usual ML caches work in a sandboxed job and stay safe.

A plain launch (the user's own code) writes into HF_HOME and TORCH_HOME and the next job finds
it; a code-editing trial (a job with a ``patch``) reads them but cannot write there; a token
in HF_HOME is never visible to a job. Real jobs, both ways of starting a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import spares_ready, wait_until
from snapshot_repo import PATCH, make_repo

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

PY = sys.executable
pytestmark = [
    pytest.mark.skipif(
        sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
    ),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

USE = r"""
import json, os, sys
hf, torch_home = os.environ["HF_HOME"], os.environ["TORCH_HOME"]
out = {"hf": hf, "torch": torch_home}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as exc:
        out[name] = f"refused: {type(exc).__name__}"
def download():
    os.makedirs(os.path.join(hf, "hub"), exist_ok=True)
    open(os.path.join(hf, "hub", "weights.bin"), "w").write("downloaded")
    os.makedirs(os.path.join(torch_home, "hub"), exist_ok=True)
    open(os.path.join(torch_home, "hub", "model.pt"), "w").write("hub")
    return "written"
def cached():
    return open(os.path.join(hf, "hub", "weights.bin")).read()
attempt("read_before", cached)
attempt("write", download if sys.argv[1] == "write" else lambda: "skipped")
attempt("token", lambda: open(os.path.join(hf, "token")).read())
print("CACHE " + json.dumps(out), flush=True)
"""


def _run(client: Client, repo: Path, mode: str, **kw: object) -> dict:
    info = client.launch(
        JobSpec(command=[PY, "use.py", mode], workdir=str(repo), track=False, sandbox="on", **kw)
    )
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    return json.loads(log.split("CACHE ", 1)[1].splitlines()[0])


@pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])
def test_caches_are_shared_by_the_users_code_read_only_to_a_patch_and_hide_the_token(
    client: Client,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made_ahead: bool,
) -> None:
    cache = tmp_path / "usercache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("TORCH_HOME", raising=False)
    monkeypatch.delenv("AIR_SANDBOX_CACHE", raising=False)
    if not made_ahead:
        monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    repo = make_repo(tmp_path / "repo")
    (repo / "use.py").write_text(USE)
    from snapshot_repo import git

    git(repo, "add", ".")
    git(repo, "commit", "-qm", "use")
    if made_ahead:
        first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
        assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
        wait_until(lambda: spares_ready(air_home), timeout_s=60)
    first = _run(client, repo, "write")
    assert first["write"] == "written", first
    hf, torch_home = Path(first["hf"]), Path(first["torch"])
    # As a user, the user's own cache; as root, the jobs' cache in AIR_HOME (the job's uid
    # cannot write root's).
    expected = air_home / "cache" if os.geteuid() == 0 else cache
    assert hf == expected / "huggingface" and torch_home == expected / "torch"
    assert (hf / "hub" / "weights.bin").read_text() == "downloaded"
    assert (torch_home / "hub" / "model.pt").read_text() == "hub"
    # A token put there by the user (world-readable, as huggingface-cli writes it).
    (hf / "token").write_text("hf_secret")
    (hf / "token").chmod(0o644)
    second = _run(client, repo, "read")
    assert second["read_before"] == "downloaded"  # the next job finds the download
    assert "hf_secret" not in json.dumps(second) and second["token"] in (
        "",
        "refused: PermissionError",
    )
    # A code-editing trial reads the caches, writes none of them.
    patched = _run(client, repo, "write", patch=PATCH)
    assert patched["read_before"] == "downloaded"
    assert patched["write"] == "refused: OSError", patched
    assert "hf_secret" not in json.dumps(patched)
