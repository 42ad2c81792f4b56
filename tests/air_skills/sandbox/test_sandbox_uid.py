"""Where air runs as root, a sandboxed job is a uid of air's own: the system user
``air-sandbox`` that `make install` makes, not 65534 (``nobody``), which other daemons may
share and which would then write root's caches (their Triton and inductor kernels, pip's
wheels) that root's own code loads later. Real `make`, real useradd, real bwrap.

The user is made by the Makefile's target itself (idempotent), as `make install` does.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import spares_ready, started_ahead, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox, sandbox_net

PY = sys.executable
REPO = Path(__file__).resolve().parents[3]
MAKE = shutil.which("make")
NOBODY = 65534
pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="as a user, a sandboxed job runs as that user: the job's own uid and the ACLs"
        " that share root's caches with it exist only where air runs as root",
    ),
    pytest.mark.skipif(MAKE is None, reason="no make on PATH: the air-sandbox user is made by it"),
]

# What the job is (uid, gid), and a file it writes in each cache it shares with root.
PROBE = r"""
import json, os, sys, time
deadline = time.monotonic() + 60  # alive until the test has seen how it was started
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
out = {"uid": os.getuid(), "gid": os.getgid(), "caches": {}}
for name in ("XDG_CACHE_HOME", "HF_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
             "PIP_CACHE_DIR"):
    folder = os.environ[name]
    with open(os.path.join(folder, "from-job"), "w") as f:
        f.write("job")
    out["caches"][name] = folder
print("PROBE " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def sandbox_user() -> tuple[int, int]:
    """The air-sandbox user's (uid, gid), made by `make sandbox-user` where missing."""
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(REPO), "sandbox-user"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "note:" not in done.stdout, done.stdout + done.stderr
    again = subprocess.run(  # idempotent: a second run makes nothing and says nothing
        [MAKE, "--no-print-directory", "-C", str(REPO), "sandbox-user"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and again.stdout == again.stderr == "", again
    entry = pwd.getpwnam("air-sandbox")
    assert entry.pw_uid not in (0, NOBODY) and entry.pw_shell == "/usr/sbin/nologin"
    assert entry.pw_dir == "/nonexistent" and not os.path.exists(entry.pw_dir)
    return entry.pw_uid, entry.pw_gid


def _named_users(path: str, which: str) -> dict[int, int]:
    """The named-user entries (uid: permission bits) of ``path``'s ACL ``which`` (access or
    default), read from the kernel's xattr (version 2, then tag u16, perm u16, id u32)."""
    try:
        raw = os.getxattr(path, f"system.posix_acl_{which}")
    except OSError:
        return {}
    assert struct.unpack_from("<I", raw)[0] == 2
    entries = struct.iter_unpack("<HHI", raw[4:])
    return {ident: perm for tag, perm, ident in entries if tag == 0x02}


def test_unset_air_sandbox_uid_is_the_air_sandbox_user_and_stays_settable(
    sandbox_user: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIR_SANDBOX_UID", raising=False)
    assert sandbox.job_user() == sandbox_user  # its own group, as useradd --user-group made it
    monkeypatch.setenv("AIR_SANDBOX_UID", str(NOBODY))
    assert sandbox.job_user() == (NOBODY, pwd.getpwuid(NOBODY).pw_gid)
    monkeypatch.setenv("AIR_SANDBOX_UID", "4000123")  # no passwd entry: its number as its group
    assert sandbox.job_user() == (4000123, 4000123)


@pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)
@pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])
def test_a_root_run_job_is_the_air_sandbox_user_and_roots_caches_name_it_not_nobody(
    sandbox_user: tuple[int, int],
    client: Client,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made_ahead: bool,
) -> None:
    monkeypatch.delenv("AIR_SANDBOX_UID", raising=False)
    if made_ahead:
        first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
        assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
        wait_until(lambda: spares_ready(air_home), timeout_s=60)
    else:
        monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    go = tmp_path / "go"
    info = client.launch(JobSpec(command=[PY, str(script), str(go)], track=False, sandbox="on"))
    pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
    ahead = started_ahead(pid)
    go.write_text("")
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    if made_ahead and sandbox_net.slirp_path() is not None:  # the spare fits the job: used
        assert ahead
    seen = json.loads(log.split("PROBE ", 1)[1].splitlines()[0])
    uid, gid = sandbox_user
    assert (seen["uid"], seen["gid"]) == (uid, gid), seen  # not 65534, not root
    for name, folder in seen["caches"].items():
        assert os.stat(Path(folder) / "from-job").st_uid == uid, name
        access = _named_users(folder, "access")
        assert access.get(uid) == 7 and NOBODY not in access, (name, access)
        default = _named_users(folder, "default")
        if name in ("XDG_CACHE_HOME", "HF_HOME"):  # a token may land there later: no default
            assert default == {}, (name, default)
        else:  # what root writes there later stays the job uid's to write, nobody's never
            assert default.get(uid) == 7 and NOBODY not in default, (name, default)


def _doctor(env: dict[str, str]) -> dict[str, str]:
    """`air doctor --json`, a real process: its `sandbox uid` check."""
    done = subprocess.run(
        [PY, "-m", "air_skills.cli", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.stdout, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return checks["sandbox uid"]


def test_doctor_warns_where_root_runs_jobs_as_nobody_and_says_the_fix(
    sandbox_user: tuple[int, int], air_home: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIR_SANDBOX_UID"}
    mine = _doctor(env)
    assert mine["status"] == "ok" and f"uid {sandbox_user[0]} (air-sandbox)" in mine["detail"]
    assert mine["next"] == ""
    shared = _doctor({**env, "AIR_SANDBOX_UID": str(NOBODY)})
    assert shared["status"] == "warn", shared
    assert "uid 65534 (nobody: AIR_SANDBOX_UID names it)" in shared["detail"], shared
    assert "cache folders" in shared["detail"] and "other processes" in shared["detail"]
    assert "`make install`" in shared["next"] and "air-sandbox" in shared["next"], shared
    assert "AIR_SANDBOX_UID" in shared["next"], shared


def test_doctor_warns_where_roots_caches_still_let_nobody_write_them(
    sandbox_user: tuple[int, int], air_home: Path, tmp_path: Path
) -> None:
    """A host where jobs ran as 65534 before air-sandbox existed: its caches' ACLs still name
    65534 (as that wave's sharing left them), and doctor says which folders, and the fix."""
    from air_skills.runtime.execution import sandbox_cache_acl

    env = {k: v for k, v in os.environ.items() if k != "AIR_SANDBOX_UID"}
    cache = Path(env["AIR_SANDBOX_CACHE"])  # the test's own cache root (conftest's air_home)
    triton = cache / "triton"
    (triton / "kernels").mkdir(parents=True)
    assert _doctor(env)["status"] == "ok"
    sandbox_cache_acl.share(str(triton), NOBODY)  # what a job as 65534 left: rwx, inherited
    assert NOBODY in _named_users(str(triton), "access")
    stale = _doctor(env)
    assert stale["status"] == "warn", stale
    assert f"uid {sandbox_user[0]} (air-sandbox)" in stale["detail"]
    assert f"cache folders {triton} still let uid 65534 (nobody) write" in stale["detail"]
    assert f"setfacl -R -P -x u:65534,d:u:65534 {triton};" in stale["next"], stale
    assert f"--from=65534 {sandbox_user[0]}:{sandbox_user[1]} {triton};" in stale["next"]
