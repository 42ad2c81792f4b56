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
# The tree's root: a process of this test's own, so that what else this test process started
# (an xdist worker runs many tests: writers, idle supervisors) is not in the tree looked at.
ROOT = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {TREE!r}])\n"
ROOT += "time.sleep(60)\n"


def test_descendants_walks_the_tree_and_agrees_with_a_full_scan(monkeypatch) -> None:
    root = subprocess.Popen([sys.executable, "-c", ROOT])
    try:
        live = wait_until(lambda: len(d := proc.descendants(root.pid)[0]) >= 2 and d)
        assert len(live) == 2
        grandchild = next(p for p in live if os.getsid(p) == p)  # in a session of its own
        child = next(p for p in live if p != grandchild)
        # Spared pids are not descended into: the grandchild hangs under the child.
        assert proc.descendants(root.pid, spare=(child,)) == ([], [])
        # Where the kernel has no children files, the scan of /proc finds the same tree.
        monkeypatch.setattr(proc, "_children", lambda pid: None)
        assert sorted(proc.descendants(root.pid)[0]) == sorted(live)
        monkeypatch.undo()
        os.kill(grandchild, 9)
        os.kill(child, 9)  # a zombie under the root until it is reaped: not live
        # The grandchild, reaped by init (we are no subreaper here), is gone from the tree.
        wait_until(lambda: proc.descendants(root.pid)[0] == [])
    finally:
        root.kill()
        root.wait()
