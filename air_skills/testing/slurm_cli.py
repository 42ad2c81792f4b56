"""`make slurm-up` / `make slurm-down`: the single-node Slurm cluster the tests use
(slurm_cluster.LocalSlurmCluster), kept running between commands for trying `--backend slurm`
by hand. ``up`` prints the ``export SLURM_CONF=...`` line to run; ``down`` stops it (its
daemons) and removes its folder. Where it is: a small state file in the temp folder."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from air_skills.testing.slurm_cluster import LocalSlurmCluster, missing

STATE = Path(tempfile.gettempdir()) / "air-slurm-cluster"


def _alive(root: Path) -> bool:
    try:
        os.kill(int((root / "slurmctld.pid").read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def up() -> int:
    if STATE.exists() and _alive(Path(STATE.read_text().strip())):
        root = Path(STATE.read_text().strip())
        print(f"already up: export SLURM_CONF={root / 'slurm.conf'}")
        return 0
    why = missing()
    if why:
        print(f"[slurm-unavailable] {why}\nNext: make install (as root), then make slurm-up")
        return 1
    cluster = LocalSlurmCluster().start()
    STATE.write_text(str(cluster.root))
    print(f"export SLURM_CONF={cluster.conf}   # then: air launch --backend slurm ...")
    print("stop it with: make slurm-down")
    return 0


def down() -> int:
    if not STATE.exists():
        print("no cluster is up (make slurm-up starts one)")
        return 0
    root = Path(STATE.read_text().strip())
    for name in ("slurmd.pid", "slurmctld.pid"):
        try:
            os.kill(int((root / name).read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    if root.name.startswith("air-slurm-"):  # the folder LocalSlurmCluster made, nothing else
        shutil.rmtree(root, ignore_errors=True)
    STATE.unlink(missing_ok=True)
    print(f"stopped the cluster in {root}")
    return 0


if __name__ == "__main__":
    commands = {"up": up, "down": down}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        print("usage: python -m air_skills.testing.slurm_cli up|down", file=sys.stderr)
        sys.exit(2)
    sys.exit(commands[sys.argv[1]]())
