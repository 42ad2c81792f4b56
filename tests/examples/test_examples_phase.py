"""The examples declare their checkpoint saves as a quiet phase (air_skills.job.phase)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A save's phase, seen from inside the save: torch.save is the real one, onto a tensor state.
PROBE = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import torch
import common
seen = []
real_save = torch.save
def save(state, path):
    jdir = Path(os.environ["AIR_CHECKPOINT_DIR"]).parent
    seen.extend(json.loads(p.read_text()) for p in (jdir / "phases").glob("*.json"))
    real_save(state, path)
torch.save = save
common.save_checkpoint(common.checkpoint_path(), {"w": torch.ones(2)})
print(json.dumps(seen))
"""


def test_a_checkpoint_save_runs_inside_a_declared_phase(tmp_path: Path) -> None:
    ckpt = tmp_path / "job" / "checkpoints"
    env = {"AIR_CHECKPOINT_DIR": str(ckpt), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(EXAMPLES)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [phase] = json.loads(out.stdout)
    assert phase["name"] == "checkpoint" and phase["expect_min"] == 10
    assert (ckpt / "ckpt.pt").exists()
    assert not list((tmp_path / "job" / "phases").glob("*.json"))  # closed after the save
