"""Issue 25: `air doctor` says whether a sandbox can be made here, and what to do if not."""

from __future__ import annotations

from pathlib import Path

import pytest

from air_skills.runtime.execution import sandbox


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
def test_doctor_reports_a_working_sandbox() -> None:
    check = sandbox.doctor_check()
    assert check["name"] == "sandbox" and check["status"] == "ok"
    assert "bwrap" in check["detail"] and "AIR_SANDBOX=auto" in check["detail"]
    assert "AIR_SANDBOX_AHEAD=on" in check["detail"]


def test_doctor_says_why_there_is_none_and_fails_when_one_is_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIR_BWRAP", str(tmp_path / "no-bwrap"))
    check = sandbox.doctor_check()
    assert check["status"] == "warn" and "not found" in check["detail"]
    assert "unsandboxed" in check["detail"] and "apt-get install bubblewrap" in check["next"]
    monkeypatch.setenv("AIR_SANDBOX", "on")
    assert sandbox.doctor_check()["status"] == "fail"
    monkeypatch.setenv("AIR_SANDBOX", "off")
    off = sandbox.doctor_check()
    assert off["status"] == "warn" and "AIR_SANDBOX=off" in off["detail"]


def test_doctor_says_when_jobs_have_no_network_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37.16: without slirp4netns a sandboxed job has loopback only: doctor says so."""
    if sandbox.unavailable() is not None:
        pytest.skip("no sandbox here")
    monkeypatch.setenv("AIR_SLIRP4NETNS", "no-such-slirp4netns")
    check = sandbox.doctor_check()
    assert check["status"] == "warn" and "loopback only" in check["detail"]
    assert "slirp4netns" in check["next"]
