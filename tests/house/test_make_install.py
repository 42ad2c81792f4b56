"""Issue 38.9: `make install` ends with what is still missing and the command to rerun. Its
last step (`make missing-tools`, which installs nothing) runs here with a PATH that holds only
some of the tools: the rest are named, with the apt line and `make install` to rerun."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def _missing_tools(path: Path, sbin: Path) -> str:
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(REPO), "missing-tools", f"SBIN={sbin}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(path)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(MAKE is None, reason="no make on PATH")
def test_missing_tools_are_listed_with_the_command_to_rerun(tmp_path: Path) -> None:
    bin_dir, sbin = tmp_path / "bin", tmp_path / "sbin"
    bin_dir.mkdir()
    sbin.mkdir()
    for tool in ("bwrap", "podman", "chromium"):  # on PATH
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    (sbin / "munged").write_text("#!/bin/sh\n")  # root's, off the PATH
    (sbin / "munged").chmod(0o755)
    said = _missing_tools(bin_dir, sbin)
    first, rerun = said.splitlines()[:2]
    missing = first.split("missing:")[1].split("(")[0].split()
    assert missing == ["slirp4netns", "runc", "busybox-static", "slurm-wlm"], said
    assert "apt-get" in rerun and "install -y slirp4netns runc busybox-static slurm-wlm" in rerun
    assert rerun.rstrip().endswith("then rerun: make install"), said

    for tool in ("slirp4netns", "runc", "busybox", "slurmctld"):  # now every one is there
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    assert _missing_tools(bin_dir, sbin).strip() == "install: done, nothing missing"
