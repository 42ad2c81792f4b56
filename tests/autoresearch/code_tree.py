"""A small project tree for code-study tests: a training script whose loss comes from an
editable module, a protected evaluator, and a proposer that replays scripted patches."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from autoresearch.code.code_diff import unified_diff
from autoresearch.proposers import Proposal, ProposalRequest, ProposalResult, Proposer

TRAIN = """\
import json
import os
import random
import sys
from pathlib import Path

from model import SCALE

cfg = json.loads(Path(os.environ["AIR_CONFIG_FILE"]).read_text())
noise = random.Random(cfg.get("seed", 0)).gauss(0, 1) * cfg.get("noise", 0.0)
loss = SCALE * (1.0 + cfg.get("x", 0.0)) + noise
ckpt = Path(os.environ["AIR_CHECKPOINT_DIR"])
(ckpt / "loss.txt").write_text(str(loss))
if cfg.get("tamper"):
    Path("evaluate.py").write_text("print('---')\\nprint('loss: -100')\\n")
print("---")
print(f"loss: {loss}")
"""

MODEL = "SCALE = 1.0\n"

EVALUATE = """\
import os
from pathlib import Path

value = float((Path(os.environ["AIR_CHECKPOINT_DIR"]) / "loss.txt").read_text())
print("---")
print(f"loss: {value + 0.5}")
"""


def make_tree(root: Path) -> Path:
    """The project folder (a plain folder: not a git work tree)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    (root / "model.py").write_text(MODEL)
    (root / "evaluate.py").write_text(EVALUATE)
    return root


def patch_of(path: str, before: str, after: str) -> str:
    return unified_diff(path, before.encode(), after.encode())


def scale_patch(new: float, old: float = 1.0) -> str:
    return patch_of("model.py", f"SCALE = {old}\n", f"SCALE = {new}\n")


def code_study(tree: Path, **overrides: Any) -> dict[str, Any]:
    study: dict[str, Any] = {
        "name": "code",
        "command": [sys.executable, "train.py"],
        "workdir": str(tree),
        "base_config": {"x": 0.0},
        "search_space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "code": {"editable": ["model.py", "train.py"], "protected": ["evaluate.py"]},
        "objective": {"metric": "loss", "direction": "minimize"},
        "budget": {"trials": 4, "concurrency": 2},
        "gpus_per_trial": 0,
        "proposer": "random",
    }
    study.update(overrides)
    return study


class PatchProposer(Proposer):
    """Proposes scripted (diff, patch, parent) trials in order; none left: nothing."""

    name = "scripted"

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def propose(self, request: ProposalRequest) -> ProposalResult:
        used = sum(1 for t in request.trials if t.source == "scripted") + len(request.pending)
        todo = self.items[used : used + request.n]
        return ProposalResult(
            [
                Proposal(
                    i.get("diff", {}),
                    i.get("why", "scripted"),
                    "scripted",
                    patch=i.get("patch"),
                    parent=i.get("parent"),
                )
                for i in todo
            ]
        )
