"""A researcher's script: weights cached the torch.hub way (torch.hub.get_dir()/checkpoints)."""

import argparse
import os

import torch

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
args = p.parse_args()

ckpt = os.path.join(torch.hub.get_dir(), "checkpoints", "tiny-pretrained.pt")
if not os.path.exists(ckpt):  # a first run "downloads" the pretrained weights into the cache
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    torch.save({"w": torch.tensor([0.5, -0.25])}, ckpt)
w = torch.load(ckpt)["w"]
print("---")
print(f"val_loss: {float(((w - args.lr) ** 2).sum())!r}")
