"""Make the bundled examples' held-out splits, once: data no training script can compute.

``python examples/make_heldout.py [--force]`` writes ``examples/mlp/heldout/test.npz`` (an extra
draw of the spirals, its seed taken from os.urandom and kept nowhere, the training data's
rotation) and ``examples/tinygpt/heldout/test.txt`` (chunks of standard-library files the
training corpus leaves out, picked at random the same way). A study names each folder as the
data input ``heldout`` of ``objective.holdout.data``: bound (read-only) into its final
re-evaluation runs only and masked in the search's sandboxed trials. The repository ships
both; run this again only to draw new ones (``--force``).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEXT_CHARS = 15_000  # ~5% of the tiny GPT's 300,000-character corpus
CHUNK_CHARS = 1_500


def make_mlp(folder: Path, seed: int) -> Path:
    import numpy as np

    sys.path.insert(0, str(HERE / "mlp"))
    import train  # examples/mlp/train.py: its draw and rotation

    raw, labels = train._draw(np.random.default_rng(seed), train.N_TEST)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "test.npz"
    x = (raw @ train.rotation()).astype(np.float32)
    np.savez_compressed(out, x=x, y=labels.astype(np.int64))
    sys.path.remove(str(HERE / "mlp"))
    del sys.modules["train"]
    return out


def make_tinygpt(folder: Path, seed: int) -> Path:
    sys.path.insert(0, str(HERE / "tinygpt"))
    import train  # examples/tinygpt/train.py: the files its corpus uses

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    left_out = sorted(
        p for p in stdlib.glob("*.py") if p.name not in train.STDLIB_FILES and p.stat().st_size
    )
    rng = random.Random(seed)
    chunks: list[str] = []
    while sum(map(len, chunks)) < TEXT_CHARS:
        text = rng.choice(left_out).read_text(encoding="utf-8", errors="replace")
        if len(text) > CHUNK_CHARS:
            start = rng.randrange(len(text) - CHUNK_CHARS)
            chunks.append(text[start : start + CHUNK_CHARS])
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "test.txt"
    out.write_text("".join(chunks)[:TEXT_CHARS], encoding="utf-8")
    sys.path.remove(str(HERE / "tinygpt"))
    del sys.modules["train"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--force", action="store_true", help="draw new splits over the present ones")
    args = p.parse_args(argv)
    for name, make in (("mlp", make_mlp), ("tinygpt", make_tinygpt)):
        folder = HERE / name / "heldout"
        if folder.is_dir() and any(folder.iterdir()) and not args.force:
            print(f"{folder}: there already (--force draws a new one)")
            continue
        seed = int.from_bytes(os.urandom(8), "little")  # kept nowhere: no script can redo it
        print(f"{make(folder, seed)}: made")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
