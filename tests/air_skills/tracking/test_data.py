"""Data inputs: roots enforced (every escape refused), fingerprints, lineage in MLflow."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import DataPathRefused, InvalidInput
from air_skills.tracking.data import fingerprint, resolve_inputs

PY = sys.executable
AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")


def age(path: Path, seconds: float = 3600) -> None:
    """Make every file under ``path`` look old enough for the fingerprint cache."""
    then = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (then, then), follow_symlinks=False)


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, air_home: Path) -> Path:
    """tmp/data is the one allowed root; tmp/secret lies beside it, outside."""
    data = tmp_path / "data"
    (data / "corpus" / "sub").mkdir(parents=True)
    (data / "corpus" / "a.txt").write_text("alpha\n")
    (data / "corpus" / "sub" / "b.txt").write_text("beta\n")
    (data / "labels.csv").write_text("id,label\n1,0\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.txt").write_text("do not read\n")
    (tmp_path / "data-evil").mkdir()  # shares the root's string prefix, not its components
    age(tmp_path)
    monkeypatch.setenv("AIR_DATA_ROOTS", f"{tmp_path / 'nowhere'}{os.pathsep}{data}")
    return data


# --- fingerprints ------------------------------------------------------------------------------


def test_fingerprint_is_stable_cached_and_sees_changes(roots: Path, air_home: Path) -> None:
    corpus = roots / "corpus"
    first = fingerprint(corpus, air_home)
    assert (first.files, first.files_read) == (2, 2)
    again = fingerprint(corpus, air_home)
    assert again.digest == first.digest and again.files_read == 0  # all from the cache
    assert fingerprint(corpus, None).digest == first.digest  # the cache never changes a result

    (corpus / "sub" / "b.txt").write_text("BETA\n")  # same size, new content
    changed = fingerprint(corpus, air_home)
    assert changed.digest != first.digest and changed.files_read == 1
    (corpus / "c.txt").write_text("")
    assert fingerprint(corpus, air_home).digest != changed.digest  # a new file counts
    (corpus / "c.txt").rename(corpus / "d.txt")
    renamed = fingerprint(corpus, air_home).digest
    assert renamed not in {first.digest, changed.digest}  # so does a name

    single = fingerprint(roots / "labels.csv", air_home)
    assert single.digest == hashlib.sha256(b"id,label\n1,0\n").hexdigest()[:32]


def test_fingerprint_follows_links_inside_the_roots(roots: Path, air_home: Path) -> None:
    (roots / "corpus" / "again").symlink_to(roots / "corpus" / "sub")  # a loop-free second way
    (roots / "corpus" / "self").symlink_to(roots / "corpus")  # a loop
    (roots / "corpus" / "fifo").unlink(missing_ok=True)
    os.mkfifo(roots / "corpus" / "fifo")  # never read: it would block
    fp = fingerprint(roots / "corpus", air_home)
    assert fp.files == 2
    assert resolve_inputs([{"name": "c", "path": str(roots / "corpus")}])[0].real == str(
        roots / "corpus"
    )


# --- refusals: each escape, with the roots named and nothing launched ---------------------------


def test_every_escape_is_refused(roots: Path, tmp_path: Path, client: Client) -> None:
    (roots / "to-secret").symlink_to(tmp_path / "secret")
    (roots / "corpus" / "leak").symlink_to(tmp_path / "secret" / "key.txt")
    (roots / "subdir").mkdir()
    attempts = {
        "outside": str(tmp_path / "secret"),
        "dotdot": str(roots / ".." / "secret" / "key.txt"),
        "relative": "../secret",  # from the workdir, roots/corpus
        "prefix": str(tmp_path / "data-evil"),
        "symlink": str(roots / "to-secret"),
        "through": str(roots / "to-secret" / "key.txt"),
        "linkdots": str(roots / "subdir" / ".." / ".." / "secret"),
        "innerlink": str(roots / "corpus"),  # holds leak -> secret/key.txt
        "missing": str(roots / "nope"),
        "home": "~/../../etc/passwd",
    }
    data = [{"name": k, "path": v} for k, v in attempts.items()]
    spec = JobSpec(command=["true"], data=data, workdir=str(roots / "corpus"), track=False)
    with pytest.raises(DataPathRefused) as exc:
        client.launch(spec)
    err = exc.value
    assert err.code == "data-path-refused" and err.exit_code == 2
    assert f"(allowed roots: {tmp_path / 'nowhere'}, {roots})" in err.message
    problems = err.context["problems"]
    assert sorted(p.split(":")[0] for p in problems) == sorted(attempts)  # all at once
    by_name = {p.split(":")[0]: p for p in problems}
    assert "does not exist" in by_name["missing"]
    assert "resolves to" in by_name["symlink"] and "outside" in by_name["symlink"]
    assert "holds a symlink leak ->" in by_name["innerlink"]
    assert "AIR_DATA_ROOTS" in err.hint
    # Nothing launched: no job, no folder, no run.
    assert client.list().items == []
    assert list((client.home / "jobs").iterdir()) == []
    with pytest.raises(DataPathRefused):
        client.launch(spec, dry_run=True)


def test_no_roots_set_refuses_every_input(
    roots: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIR_DATA_ROOTS")
    with pytest.raises(DataPathRefused) as exc:
        client.launch(JobSpec(command=["true"], data=[{"name": "c", "path": str(roots)}]))
    assert "AIR_DATA_ROOTS is not set" in exc.value.message
    assert "export AIR_DATA_ROOTS=" in exc.value.hint
    assert client.list().items == []


def test_cli_refusal_names_the_roots(roots: Path, tmp_path: Path, air_home: Path) -> None:
    proc = subprocess.run(
        [AIR, "launch", "--data", f"s={tmp_path / 'secret'}", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "data-path-refused" in proc.stderr and str(roots) in proc.stderr


# --- the job's view and the lineage ----------------------------------------------------------


def test_job_reads_inputs_by_name(roots: Path, client: Client) -> None:
    code = (
        "import os; d = os.environ['AIR_DATA_DIR'];"
        " print(open(os.path.join(d, 'corpus', 'sub', 'b.txt')).read().strip(),"
        " open(os.path.join(d, 'labels')).read().splitlines()[0])"
    )
    spec = JobSpec(
        command=[PY, "-c", code],
        data=[{"name": "corpus", "path": "corpus"}, {"name": "labels", "path": "labels.csv"}],
        workdir=str(roots),
        track=False,
    )
    info = client.launch(spec)
    assert info.data == [
        f"corpus@{fingerprint(roots / 'corpus').digest[:12]}",
        f"labels@{fingerprint(roots / 'labels.csv').digest[:12]}",
    ]
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert client.logs(info.job_id).text.strip() == "beta id,label"
    assert "data inputs changed" not in done.message


@pytest.mark.slow
def test_digest_stable_pinned_logged_and_change_during_run_reported(
    roots: Path, client: Client
) -> None:
    corpus = [{"name": "corpus", "path": str(roots / "corpus")}]
    first = client.launch(JobSpec(command=["true"], data=corpus, track=False))
    second = client.launch(JobSpec(command=["true"], data=corpus, track=False))
    digest = fingerprint(roots / "corpus").digest
    assert first.data == second.data == [f"corpus@{digest[:12]}"]  # stable across launches

    # Pinned: the same version launches; a version the data no longer has is refused.
    pinned = [{**corpus[0], "digest": digest[:12]}]
    client.launch(JobSpec(command=["true"], data=pinned, track=False))
    (roots / "corpus" / "a.txt").write_text("ALPHA\n")
    with pytest.raises(InvalidInput) as exc:
        client.launch(JobSpec(command=["true"], data=pinned, track=False))
    assert exc.value.code == "data-digest-mismatch"
    changed = fingerprint(roots / "corpus").digest
    assert changed != digest

    # A tracked job that changes its own input: the launch version is the run's dataset input,
    # the change is in its message at exit and logged as a second input.
    code = "import os; open(os.path.join(os.environ['AIR_DATA_DIR'], 'corpus', 'new'), 'w')"
    # Its own input is read-only in the sandbox unless it is named writable (issue 25).
    writable = [str(roots / "corpus")]
    third = client.launch(JobSpec(command=[PY, "-c", code], data=corpus, writable=writable))
    done = client.wait([third.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    assert "data inputs changed during the job: corpus" in done.message
    after = fingerprint(roots / "corpus").digest

    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=client.tracker.uri).get_run(third.run_id)
    logged = {
        {t.key: t.value for t in d.tags}["mlflow.data.context"]: d.dataset
        for d in run.inputs.dataset_inputs
    }
    assert set(logged) == {"input", "changed-during-run"}
    assert logged["input"].name == "corpus" and logged["input"].digest == changed
    assert json.loads(logged["input"].source) == {"uri": str(roots / "corpus")}
    assert json.loads(logged["input"].profile) == {"files": 2, "bytes": 11}
    assert logged["changed-during-run"].digest == after != changed
