"""Issue 37 (items 1, 2): a job's folder is the job's to write, so every name in it may be a
link the job planted. What air writes there after the job ran (the relay's offsets, a retry's
data links, a checkpoints folder) is written by descriptor, never through such a link: the
link's target (a file the job could only read, a copy of air.db, a folder of the host) is
left as it was."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.home import job_dir
from air_skills.job_folder import JobFolder, open_at, write_in
from air_skills.runtime.execution import sandbox

PY = sys.executable
SANDBOX = "on" if sandbox.unavailable() is None else "off"

# Logs one metric line in its own store (the file store the relay reads), then plants a link
# at mlruns/.relay.json to the path in argv[1] and exits: the relay's offsets are written
# as the attempt ends.
PLANT_RELAY_LINK = r"""
import os, sys, time
root = os.environ["MLFLOW_TRACKING_URI"][len("file://"):]
run = os.path.join(root, os.environ["MLFLOW_EXPERIMENT_ID"], os.environ["MLFLOW_RUN_ID"])
with open(os.path.join(run, "metrics", "loss"), "a") as f:
    f.write(f"{int(time.time() * 1000)} 20.0 0\n")
os.symlink(sys.argv[1], os.path.join(root, ".relay.json"))
print("planted", flush=True)
"""


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="the relay runs for sandboxed jobs")
@pytest.mark.parametrize("target", ["file", "air.db copy"])
def test_a_link_at_the_relay_offsets_file_is_replaced_not_written_through(
    client: Client, air_home: Path, tmp_path: Path, target: str
) -> None:
    if target == "file":
        victim = tmp_path / "readable-only.txt"
        victim.write_text("the host's file, as it was\n")
    else:
        client.list()  # air.db exists
        victim = tmp_path / "air-copy.db"
        with sqlite3.connect(air_home / "air.db") as src, sqlite3.connect(victim) as dst:
            src.backup(dst)  # a whole copy (air.db's newest pages may be in its WAL)
    before = victim.read_bytes()
    spec = JobSpec(command=[PY, "-c", PLANT_RELAY_LINK, str(victim)], sandbox="on", code="live")
    info = client.launch(spec)
    assert info.run_id and info.sandbox == "bwrap"
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, client.logs(info.job_id).text)
    assert victim.read_bytes() == before  # the link's target is untouched
    if target == "air.db copy":
        with sqlite3.connect(victim) as db:  # still a database
            assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] >= 0
    offsets = job_dir(air_home, info.job_id) / "mlruns" / ".relay.json"
    assert not offsets.is_symlink()  # the link itself was replaced by air's file
    # air's own offsets file now (its one line forwarded: {"loss": 21}; a store too busy at the
    # attempt's end forwards it next time, from {})
    assert json.loads(offsets.read_text()) in ({"loss": 21}, {})


# Attempt 1 replaces $AIR_DATA_DIR with a link to the victim folder (which holds a file with
# the input's name), plants a link at the temp name the hardware record was written through,
# and fails; attempt 2 reads its input.
SWAP_DATA = r"""
import os, sys
data = os.environ["AIR_DATA_DIR"]
mark = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "attempt1")
if not os.path.exists(mark):
    open(mark, "w").close()
    for name in os.listdir(data):
        os.unlink(os.path.join(data, name))
    os.rmdir(data)
    os.symlink(sys.argv[1], data)
    os.symlink(sys.argv[2], os.path.join(os.path.dirname(data), ".hardware.json.tmp"))
    sys.exit(3)
print("READ:" + open(os.path.join(data, "authorized_keys", "f.txt")).read(), flush=True)
"""


def test_a_retry_never_writes_unlinks_or_replaces_through_links_its_last_attempt_left(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = tmp_path / "roots"
    (roots / "authorized_keys").mkdir(parents=True)
    (roots / "authorized_keys" / "f.txt").write_text("governed")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(roots))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "authorized_keys").write_text("ssh-ed25519 AAAA the owner's key\n")
    other = tmp_path / "bashrc"
    other.write_text("# the owner's shell\n")
    info = client.launch(
        JobSpec(
            command=[PY, "-c", SWAP_DATA, str(victim), str(other)],
            data=[{"name": "authorized_keys", "path": str(roots / "authorized_keys")}],
            max_retries=1,
            sandbox=SANDBOX,  # type: ignore[arg-type]
            workdir=str(tmp_path),
            code="live",
        )
    )
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, client.logs(info.job_id).text)
    assert done.attempts == 2
    # The victim's file is still a file, with its own content: not unlinked, not a link now.
    kept = victim / "authorized_keys"
    assert not kept.is_symlink() and kept.read_text() == "ssh-ed25519 AAAA the owner's key\n"
    assert sorted(os.listdir(victim)) == ["authorized_keys"]
    assert other.read_text() == "# the owner's shell\n"  # attempt 2's hardware record
    assert "READ:governed" in client.logs(info.job_id, tail=None).text
    data = job_dir(client.home, info.job_id) / "data"
    assert data.is_dir() and not data.is_symlink()  # made again as a folder of air's


# --- the descriptor helpers themselves --------------------------------------------------------


def test_a_write_replaces_a_planted_link_and_leaves_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("as it was")
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "state.json").symlink_to(victim)
    write_in(folder, "state.json", "{}")
    assert victim.read_text() == "as it was"
    assert not (folder / "state.json").is_symlink() and (folder / "state.json").read_text() == "{}"
    assert [p.name for p in folder.iterdir()] == ["state.json"]  # no temp file left


def test_a_folder_swapped_for_a_link_is_refused_and_removal_keeps_the_target(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "mlruns").symlink_to(outside)
    with pytest.raises(OSError):
        open_at(folder, "mlruns")
    with JobFolder.open(folder) as top:
        with pytest.raises(OSError):
            top.sub("mlruns", create=True)
        with pytest.raises(ValueError):
            top.sub("mlruns/x")  # a path is never walked by name
        with pytest.raises(ValueError):
            top.write("../x", "no")
        top.remove("mlruns")  # the link only
        top.symlink(str(outside), "data")
        assert top.readlink("data") == str(outside)
        top.symlink("/elsewhere", "data")  # replaced, its old target untouched
    assert (outside / "keep.txt").read_text() == "keep"
    assert not (folder / "mlruns").exists()
    with pytest.raises(OSError):
        JobFolder.open(folder / "data")  # a link is not opened as the folder


# A sandboxed job with a patch tries to rewrite its code.patch (what `air rerun` and `air code
# export` read back) in place and by a rename over it.
REWRITE_PATCH = r"""
import os
jdir = os.path.dirname(os.environ["AIR_CHECKPOINT_DIR"])
patch = os.path.join(jdir, "code.patch")
for how in ("write", "rename"):
    try:
        if how == "write":
            open(patch, "w").write("evil")
        else:
            open(os.path.join(jdir, "evil.patch"), "w").write("evil")
            os.replace(os.path.join(jdir, "evil.patch"), patch)
        print(how, "REWROTE", flush=True)
    except OSError as exc:
        print(how, "refused:", exc.strerror, flush=True)
print("model says", open("model.py").read().strip(), flush=True)
"""
MODEL_PATCH = """--- a/model.py
+++ b/model.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 42
"""


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
def test_a_sandboxed_job_cannot_rewrite_the_patch_that_rerun_and_export_read_back(
    client: Client, tmp_path: Path
) -> None:
    from air_skills.runtime.code.code_source import load_job_code

    work = tmp_path / "work"
    work.mkdir()
    (work / "model.py").write_text("VALUE = 1\n")
    (work / "job.py").write_text(REWRITE_PATCH)
    info = client.launch(
        JobSpec(command=[PY, "job.py"], workdir=str(work), patch=MODEL_PATCH, sandbox="on")
    )
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert "REWROTE" not in log and "model says VALUE = 42" in log
    row = client.store.row(info.job_id)
    code = load_job_code(client.home, info.job_id, row.code)
    assert code.patch == MODEL_PATCH  # what rerun and export use is what was launched
