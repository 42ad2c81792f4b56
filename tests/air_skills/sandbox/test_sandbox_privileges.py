"""Issue 25: a sandboxed job holds no capability, so it cannot take its view apart.

Run as root (as on many GPU machines), bwrap keeps every capability unless told otherwise:
a job could then unmount the tmpfs that hides AIR_HOME, or remount ``/`` writable, and the
sandbox would be a suggestion. Each attack here is a real job; each must fail, and the job
must hold no capability at all, whichever user runs the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import spares_ready, started_ahead, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox

PY = sys.executable
pytestmark = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)

UNDO = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
home = os.environ["AIR_HOME"]
out = {}
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
out["caps"] = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")}
out["no_new_privs"] = status["NoNewPrivs"].strip()
def errno_of(rc):
    return "done" if rc == 0 else os.strerror(ctypes.get_errno())
# The tmpfs over AIR_HOME, unmounted: air.db would show again.
out["umount_home"] = errno_of(libc.umount2(home.encode(), 2))
# / remounted writable (MS_REMOUNT | MS_BIND).
out["remount_root_rw"] = errno_of(libc.mount(b"none", b"/", None, 32 | 4096, None))
# A user namespace of its own, where it would hold every capability over a new mount
# namespace: the mounts it inherits are locked together there, so the tmpfs stays.
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0:
    out["umount_home_in_own_userns"] = errno_of(libc.umount2(home.encode(), 2))
else:
    out["umount_home_in_own_userns"] = "no user namespace: " + os.strerror(ctypes.get_errno())
out["air_db_visible"] = os.path.exists(os.path.join(home, "air.db"))
print("UNDO " + json.dumps(out), flush=True)
"""


def _undo_report(client: Client, tmp_path: Path) -> tuple[dict, bool]:
    """What the job could undo, and whether it ran in a sandbox made ahead."""
    script = tmp_path / "undo.py"
    script.write_text(UNDO + "import time; time.sleep(0.5)\n")  # its bwrap is read meanwhile
    info = client.launch(JobSpec(command=[PY, str(script)], track=False, name="undo", sandbox="on"))
    pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
    ahead = started_ahead(pid)
    done = client.wait([info.job_id], timeout_s=120)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    return json.loads(log.split("UNDO ", 1)[1].splitlines()[0]), ahead


@pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])
def test_a_sandboxed_job_holds_no_capability_and_cannot_undo_its_view(
    client: Client,
    air_home: Path,
    tmp_path: Path,
    made_ahead: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not made_ahead:  # bwrap made at the job's start: the launch says so
        monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    else:  # a first job's supervisor, idle now, holds a sandbox made ahead
        first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
        assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
        wait_until(lambda: spares_ready(air_home), timeout_s=60)
    assert (air_home / "air.db").exists()
    seen, ahead = _undo_report(client, tmp_path)
    assert ahead is made_ahead
    assert seen["caps"] == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0}, seen
    assert seen["no_new_privs"] == "1"
    assert seen["umount_home"] != "done", seen
    assert seen["remount_root_rw"] != "done", seen
    assert seen["umount_home_in_own_userns"] != "done", seen
    assert seen["air_db_visible"] is False, seen
