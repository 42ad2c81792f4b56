"""A researcher's script: argparse, and checkpoints saved to ./checkpoints as everyone does."""

import argparse
import json
import os

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--epochs", type=int, default=3)
args, _unknown = p.parse_known_args()  # the habit that tolerates extra flags

os.makedirs("checkpoints", exist_ok=True)
loss = 1.0
for epoch in range(args.epochs):
    loss *= 1 - args.lr
    with open(f"checkpoints/epoch{epoch}.json", "w") as f:
        json.dump({"epoch": epoch, "loss": loss}, f)
print("---")
print(f"val_loss: {loss!r}")
