"""A researcher's script: argparse flags only, no air anywhere (issue 38 Tests)."""

import argparse
import math
import random

p = argparse.ArgumentParser(description="a tiny regression, the usual way")
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--hidden", type=int, nargs="+", default=[16])
p.add_argument("--amp", action="store_true")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=50)
args = p.parse_args()

random.seed(args.seed)
w = 0.0
for _ in range(args.steps):  # gradient descent on (w - 3)^2 with a little noise
    w -= args.lr * 2 * (w - 3.0) + random.gauss(0, 1e-4)
val_loss = (w - 3.0) ** 2 + 0.001 * sum(args.hidden) / 16 + (0.0001 if args.amp else 0.0)
print(f"epoch done val_loss={val_loss:.6f}")
print("---")
print(f"val_loss: {val_loss!r}")
print(f"log_lr: {math.log10(args.lr):.3f}")
