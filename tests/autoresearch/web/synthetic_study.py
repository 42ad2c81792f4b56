"""A synthetic study journal of N finished trials (some of them code trials with patches), for
the study page's tests and its benchmark (bench/study_page.py): the events the loop writes."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

PATCH = """--- a/train.py
+++ b/train.py
@@ -1,3 +1,3 @@
 import math
-lr = 0.001
+lr = {lr}
 steps = 100
"""


def study_dict(name: str, trials: int) -> dict:
    return {
        "name": name,
        "command": [sys.executable, "train.py"],
        "workdir": ".",
        "base_config": {"lr": 0.001, "depth": 2},
        "search_space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "depth": {"type": "int", "low": 1, "high": 8},
        },
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "budget": {"trials": trials, "concurrency": 4, "gpu_hours": 50, "llm_usd": 5.0},
        "gpus_per_trial": 1,
        "proposer": "random",
        "noise": {"repeats": 2},
    }


def write_journal(
    folder: Path,
    trials: int,
    *,
    name: str = "synthetic",
    code_every: int = 10,
    stopped: bool = True,
    seed: int = 0,
    other_gpu_from: int | None = None,
) -> Path:
    """Write ``folder``/journal.jsonl: ``trials`` finished trials on an H100; every
    ``code_every``-th one (from trial 3) a code trial with a patch; from trial
    ``other_gpu_from`` on, on an A10G. Returns the folder."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - trials * 60
    ev: list[dict] = [
        {
            "event": "session_started",
            "ts": t0,
            "study": study_dict(name, trials),
            "study_id": "synthetic",
            "gpus_per_trial": 1,
        }
    ]
    best = None
    last_code = None
    for n in range(trials):
        ts = t0 + n * 60
        source = "baseline" if n == 0 else "noise" if n in (1, 2) else "llm"
        diff = (
            {} if n < 3 else {"lr": round(10 ** rng.uniform(-4, -1), 6), "depth": rng.randint(1, 8)}
        )
        prop = {
            "event": "proposal",
            "ts": ts,
            "trial": n,
            "source": source,
            "diff": diff,
            "config": {"lr": 0.001, "depth": 2, **diff},
            "rationale": f"try {diff or 'base'}",
        }
        if n >= 3 and n % code_every == 3:
            prop["patch"] = PATCH.format(lr=diff["lr"])
            prop["parent"] = last_code
            prop["patch_summary"] = {"files": {"train.py": [1, 1]}, "added": 1, "removed": 1}
            last_code = n
        if source == "llm":
            ev.append(
                {
                    "event": "llm_call",
                    "ts": ts,
                    "usd": 0.002,
                    "input_tokens": 900,
                    "output_tokens": 120,
                    "ok": True,
                }
            )
        ev.append(prop)
        ev.append(
            {
                "event": "launched",
                "ts": ts + 1,
                "trial": n,
                "job_id": f"job{n:05d}",
                "run_id": f"run{n:05d}",
                "attempt": 1,
                "gpus": 1,
                "gpu_type": "NVIDIA A10G"
                if other_gpu_from is not None and n >= other_gpu_from
                else "NVIDIA H100 80GB HBM3",
            }
        )
        ev.append({"event": "job_started", "ts": ts + 2, "trial": n, "started_at": ts + 2})
        value = 3.0 - 0.5 * (n / max(1, trials)) + rng.gauss(0, 0.05)
        curve = [[s, value + 1.0 / (1 + s)] for s in range(0, 100, 20)]
        if n % 17 == 5:
            ev.append(
                {
                    "event": "finished",
                    "ts": ts + 50,
                    "trial": n,
                    "status": "FAILED",
                    "failure": "boom",
                    "failure_kind": "user",
                    "ended_at": ts + 50,
                    "gpu_s": 48.0,
                }
            )
            ev.append({"event": "decision", "ts": ts + 50, "trial": n, "decision": "failed"})
            continue
        ev.append(
            {
                "event": "finished",
                "ts": ts + 50,
                "trial": n,
                "status": "SUCCEEDED",
                "value": value,
                "steps": 80,
                "curve": curve,
                "ended_at": ts + 50,
                "gpu_s": 48.0,
                "metrics": {"val_loss": value},
            }
        )
        if n == 0:
            decision, best = "baseline", value
        elif n in (1, 2):
            decision = "noise"
        elif value < best - 0.05:
            decision, best = "keep", value
        else:
            decision = "discard"
        ev.append(
            {
                "event": "decision",
                "ts": ts + 51,
                "trial": n,
                "decision": decision,
                "value": value,
                "best_value": best,
            }
        )
        if n == 2:
            ev.append(
                {
                    "event": "noise_floor",
                    "ts": ts + 52,
                    "values": [3.0, 3.02, 2.99],
                    "std": 0.015,
                    "floor": 0.03,
                }
            )
    if stopped:
        ev.append({"event": "stopped", "ts": t0 + trials * 60, "reason": "budget:trials"})
    (folder / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    return folder
