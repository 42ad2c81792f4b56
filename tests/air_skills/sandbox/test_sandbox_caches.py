"""Issue 38 (5): a sandboxed job reads what the user's caches hold, and they stay safe.

A plain launch (the user's own code) reads a file already in the user's HF cache and what it
downloads lands there for the next job; a code-editing trial (a job with a ``patch``) reads
the user's cache, downloads into a private one, and cannot write the user's; a token in
HF_HOME is never readable. The user's caches are a temporary HOME and XDG_CACHE_HOME (never
root's own); as root, the job is AIR_SANDBOX_UID. Real jobs, both ways of starting a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import spares_ready, wait_until
from snapshot_repo import PATCH, git, make_repo

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

PY = sys.executable
pytestmark = [
    pytest.mark.skipif(
        sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
    ),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

# argv: mode (write NAME | read), the user's real blobs folder, the user's real token file
USE = r"""
import json, os, sys
hf = os.environ["HF_HOME"]
blobs = os.path.join(hf, "hub", "models--t", "blobs")
out = {"hf": hf}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as exc:
        out[name] = f"refused: {type(exc).__name__}"
def write(folder, name):
    with open(os.path.join(folder, name), "w") as f:
        f.write("downloaded")
    return "written"
attempt("pre", lambda: open(os.path.join(blobs, "pre")).read())
attempt("new", lambda: open(os.path.join(blobs, "new")).read())
if sys.argv[1] == "write":
    attempt("write", lambda: write(blobs, sys.argv[2]))
    attempt("direct", lambda: write(sys.argv[3], "direct-" + sys.argv[2]))
attempt("token", lambda: open(os.path.join(hf, "token")).read())
attempt("token_real", lambda: open(sys.argv[4]).read())
print("CACHE " + json.dumps(out), flush=True)
"""


def _user_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home whose HF cache holds one file and a token; its HF_HOME."""
    home = tmp_path / "user"
    cache = home / ".cache"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for name in ("HF_HOME", "HF_HUB_CACHE", "TORCH_HOME", "TRITON_CACHE_DIR", "AIR_SANDBOX_CACHE"):
        monkeypatch.delenv(name, raising=False)
    hf = cache / "huggingface"
    (hf / "hub" / "models--t" / "blobs").mkdir(parents=True)
    (hf / "hub" / "models--t" / "blobs" / "pre").write_text("pre-placed")
    (hf / "token").write_text("hf_secret")
    (hf / "token").chmod(0o644)  # world-readable, as huggingface-cli writes it
    return hf


def _repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / "use.py").write_text(USE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "use")
    return repo


def _run(client: Client, repo: Path, hf: Path, *mode: str, **kw: object) -> dict:
    blobs, token = hf / "hub" / "models--t" / "blobs", hf / "token"
    argv = [PY, "use.py", *mode, str(blobs), str(token)] if mode[0] == "write" else [
        PY, "use.py", "read", "-", "-", str(token)
    ]  # fmt: skip
    info = client.launch(
        JobSpec(command=argv, workdir=str(repo), track=False, sandbox="on", **kw)  # type: ignore[arg-type]
    )
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    return json.loads(log.split("CACHE ", 1)[1].splitlines()[0])


def _sandbox_start(
    client: Client, air_home: Path, monkeypatch: pytest.MonkeyPatch, made_ahead: bool
) -> None:
    """Either bwrap at the job's start, or a sandbox an idle supervisor made ahead."""
    if not made_ahead:
        monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
        return
    first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)


def _no_token(seen: dict) -> None:
    assert "hf_secret" not in json.dumps(seen), seen
    assert seen["token"] in ("", "refused: FileNotFoundError", "refused: PermissionError"), seen
    assert seen["token_real"] in ("", "refused: PermissionError"), seen


@pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])
def test_a_plain_launch_reads_the_users_hf_cache_and_fills_it_for_the_next_job(
    client: Client,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made_ahead: bool,
) -> None:
    hf = _user_caches(tmp_path, monkeypatch)
    repo = _repo(tmp_path)
    _sandbox_start(client, air_home, monkeypatch, made_ahead)
    first = _run(client, repo, hf, "write", "new")
    # The user's own HF_HOME (as root too: shared with the job's uid), the file already there
    assert first["hf"] == str(hf) and first["pre"] == "pre-placed", first
    assert first["write"] == "written" and first["direct"] == "written", first
    _no_token(first)
    assert (hf / "hub" / "models--t" / "blobs" / "new").read_text() == "downloaded"
    assert not (air_home / "cache").exists()  # not the jobs' cache in AIR_HOME
    second = _run(client, repo, hf, "read")
    assert second["new"] == "downloaded", second  # the next job finds the download
    _no_token(second)


@pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])
def test_a_code_editing_trial_reads_the_users_cache_and_cannot_write_it(
    client: Client,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made_ahead: bool,
) -> None:
    hf = _user_caches(tmp_path, monkeypatch)
    repo = _repo(tmp_path)
    _sandbox_start(client, air_home, monkeypatch, made_ahead)
    blobs = hf / "hub" / "models--t" / "blobs"
    (blobs / "new").write_text("downloaded")
    patched = _run(client, repo, hf, "write", "mine", patch=PATCH)
    assert patched["pre"] == "pre-placed" and patched["new"] == "downloaded", patched
    # A download lands in its own private cache, never the user's; the user's is read-only.
    assert patched["hf"] != str(hf) and patched["write"] == "written", patched
    assert patched["direct"] == "refused: OSError", patched
    assert sorted(p.name for p in blobs.iterdir()) == ["new", "pre"]
    _no_token(patched)
    plain = _run(client, repo, hf, "read")  # and the user's own code never sees it
    assert "mine" not in json.dumps(plain)
    assert not (blobs / "mine").exists()


def test_a_cache_folder_that_cannot_be_made_falls_back_to_air_home_and_says_so(
    client: Client, air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf = _user_caches(tmp_path, monkeypatch)
    monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("HF_HOME", str(blocked / "hf"))  # under a file: cannot be made
    repo = _repo(tmp_path)
    info = client.launch(
        JobSpec(
            command=[PY, "-c", "import os; print('HF', os.environ['HF_HOME'])"],
            workdir=str(repo),
            track=False,
            sandbox="on",
        )
    )
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    instead = os.path.realpath(air_home / "cache" / "huggingface")
    assert f"HF {instead}" in log, log
    assert f"[air] sandbox caches: HF_HOME is {instead}, not {blocked / 'hf'}" in log, log
    assert hf.exists()  # the other caches are still the user's
