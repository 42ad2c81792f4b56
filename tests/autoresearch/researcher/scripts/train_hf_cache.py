"""A researcher's script: a Hugging Face-style download into HF_HOME (hub cache), from a URL."""

import argparse
import hashlib
import os
import urllib.request
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--scale", type=float, default=1.0)
args = p.parse_args()

hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
blob = (
    hf_home
    / "hub"
    / "models--local--tiny"
    / "blobs"
    / hashlib.sha256(args.url.encode()).hexdigest()
)
if not blob.exists():  # what huggingface_hub does: download once, keep it in the cache
    blob.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(args.url, timeout=30) as r:
        blob.write_bytes(r.read())
    print(f"downloaded into {blob}")
weights = [float(x) for x in blob.read_text().split()]
print("---")
print(f"val_loss: {sum(w * args.scale for w in weights)!r}")
