"""A process tree found from its root: the kernel's children files, and the scan of /proc."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import wait_until

from air_skills.runtime.process import proc

# A child that starts a grandchild in its own session, then both sleep.
TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
    " start_new_session=True)\n"
    "time.sleep(60)\n"
)


def test_descendants_walks_the_tree_and_agrees_with_a_full_scan(monkeypatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        live = wait_until(lambda: len(d := proc.descendants(os.getpid())[0]) >= 2 and d)
        assert child.pid in live and len(live) == 2
        grandchild = next(p for p in live if p != child.pid)
        # Spared pids are not descended into: the grandchild hangs under the child.
        assert proc.descendants(os.getpid(), spare=(child.pid,)) == ([], [])
        # Where the kernel has no children files, the scan of /proc finds the same tree.
        monkeypatch.setattr(proc, "_children", lambda pid: None)
        assert sorted(proc.descendants(os.getpid())[0]) == sorted(live)
        monkeypatch.undo()
        os.kill(grandchild, 9)
        child.kill()
        child.wait()
        # The grandchild, reaped by init (we are no subreaper here), is gone from the tree.
        wait_until(lambda: proc.descendants(os.getpid())[0] == [])
    finally:
        child.kill()
        child.wait()
