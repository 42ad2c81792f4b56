"""A character-level GPT trained on Python's own standard-library source (no download needed).

Run: `python examples/tinygpt/train.py [--key=value ...]`; under AIR the config arrives as JSON
in AIR_CONFIG_FILE. Logs train_loss and val_loss to MLflow when the MLflow env is set (test_loss
too with AIR_EVAL_SPLIT=test, on the held-out data input $AIR_DATA_DIR/heldout/test.txt), saves
and resumes `$AIR_CHECKPOINT_DIR/ckpt.pt`, ends with a `---` summary block. Under torchrun
(`air launch --procs 2 -- python examples/tinygpt/train.py`) it trains as DDP, gloo on CPU and
NCCL on GPUs, each rank on its own batches; rank 0 alone logs, prints and saves.
"""

from __future__ import annotations

import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

DEFAULTS = {
    "lr": 2e-3,  # AdamW learning rate, constant after a short warmup
    "weight_decay": 0.01,  # AdamW decoupled weight decay
    "n_layer": 2,  # transformer blocks
    "n_embd": 64,  # embedding width (a multiple of n_head)
    "n_head": 4,  # attention heads
    "dropout": 0.0,  # dropout probability, 0.0 to 0.5
    "block_size": 64,  # context length, in characters
    "batch_size": 16,  # sequences per optimizer step
    "steps": 500,  # optimizer steps in all; a resumed run continues up to this
    "warmup_steps": 20,  # steps of linear lr warmup
    "grad_clip": 1.0,  # max gradient norm; 0.0 disables clipping
    "eval_every": 50,  # steps between evaluations, metric logs and checkpoints
    "eval_batches": 8,  # batches per split per evaluation (the same batches every time)
    "seed": 1337,  # model init and batch order; the corpus and its split do not depend on it
    "device": "auto",  # auto | cpu | cuda
    "data_file": "",  # a UTF-8 text file to train on; "" = the standard-library corpus
}
SHAPE_KEYS = ("n_layer", "n_embd", "n_head", "block_size", "data_file")  # must match to resume

# A fixed list so the corpus is the same on every run of one Python version.
STDLIB_FILES = (
    "textwrap.py", "string.py", "heapq.py", "bisect.py", "fractions.py", "calendar.py",
    "functools.py", "pprint.py", "shlex.py", "queue.py", "random.py", "statistics.py",
    "contextlib.py", "copy.py", "abc.py", "operator.py", "numbers.py", "colorsys.py",
    "graphlib.py", "sched.py", "cmd.py", "glob.py", "fnmatch.py", "csv.py",
)  # fmt: skip
CORPUS_MAX_CHARS = 300_000
VAL_FRACTION = 0.1
# The held-out split: other standard-library text (examples/make_heldout.py picked it at random,
# once), the data input $AIR_DATA_DIR/heldout/test.txt that a study binds only into its final
# re-evaluation runs (AIR_EVAL_SPLIT=test): the search never sees the text or its loss.
HELD_OUT_INPUT = "heldout"


def load_held_out(lookup: dict[str, int]) -> torch.Tensor:
    """The held-out text as token ids (characters outside the corpus's vocabulary left out);
    exits 2 when the data input is absent."""
    path = Path(os.environ.get("AIR_DATA_DIR", "")) / HELD_OUT_INPUT / "test.txt"
    if not os.environ.get("AIR_DATA_DIR") or not path.is_file():
        common.fail(
            f"AIR_EVAL_SPLIT=test but the held-out split {path} is not there: it is the data"
            f" input {HELD_OUT_INPUT!r} (objective.holdout.data in study.yaml), bound only into"
            " a study's final re-evaluation runs; make it with examples/make_heldout.py",
            common.EXIT_BAD_CONFIG,
        )
    text = path.read_text(encoding="utf-8")
    return torch.tensor([lookup[ch] for ch in text if ch in lookup], dtype=torch.long)


def load_corpus(data_file: str) -> str:
    if data_file:
        try:
            return Path(data_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            common.fail(f"data_file={data_file!r}: {exc}", common.EXIT_BAD_CONFIG)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts = [
        (stdlib / n).read_text(encoding="utf-8") for n in STDLIB_FILES if (stdlib / n).exists()
    ]
    if not parts:
        common.fail(f"no stdlib sources under {stdlib}; set data_file to a text file", 1)
    return "".join(parts)[:CORPUS_MAX_CHARS]


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)), p, self.training)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, cfg: dict) -> None:
        super().__init__()
        n_embd = cfg["n_embd"]
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(cfg["block_size"], n_embd)
        self.drop = nn.Dropout(cfg["dropout"])
        self.blocks = nn.Sequential(
            *(Block(n_embd, cfg["n_head"], cfg["dropout"]) for _ in range(cfg["n_layer"]))
        )
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        # GPT-2's small init: PyTorch's N(0, 1) embeddings, tied to the head, start at loss ~30.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.drop(self.tok(idx) + self.pos(pos)))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main() -> None:
    cfg = common.load_config(DEFAULTS)
    heads_fit = cfg["n_head"] > 0 and cfg["n_embd"] % cfg["n_head"] == 0
    common.check(
        cfg,
        {
            "n_embd": (heads_fit, "a positive multiple of n_head"),
            "n_head": (cfg["n_head"] > 0, "positive"),
            "n_layer": (cfg["n_layer"] > 0, "positive"),
            "dropout": (0.0 <= cfg["dropout"] < 1.0, "in [0, 1)"),
            "lr": (cfg["lr"] > 0, "positive"),
            "steps": (cfg["steps"] >= 0, ">= 0"),
            "eval_every": (cfg["eval_every"] > 0, "positive"),
            "eval_batches": (cfg["eval_batches"] > 0, "positive"),
            "block_size": (cfg["block_size"] > 0, "positive"),
            "batch_size": (cfg["batch_size"] > 0, "positive"),
            "device": (cfg["device"] in ("auto", "cpu", "cuda"), "auto, cpu or cuda"),
        },
    )
    start = time.perf_counter()
    common.set_threads()
    common.stop_on_sigterm()
    rank, world, device = common.distributed(cfg["device"])
    lead = rank == 0  # the rank that logs, prints and saves
    torch.manual_seed(cfg["seed"])
    ckpt_path = common.checkpoint_path()
    state = common.load_checkpoint(ckpt_path, cfg, SHAPE_KEYS)

    text = load_corpus(cfg["data_file"])
    chars = sorted(set(text))
    lookup = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([lookup[ch] for ch in text], dtype=torch.long)
    n_val = int(len(data) * VAL_FRACTION)
    splits = {"train": data[:-n_val], "val": data[-n_val:]}
    block, batch = cfg["block_size"], cfg["batch_size"]
    if os.environ.get("AIR_EVAL_SPLIT") == "test":
        splits["test"] = load_held_out(lookup)
        if len(splits["test"]) <= block + 1:
            common.fail(f"the held-out text is too short for block_size={block}", 1)
    if n_val <= block + 1:
        common.fail(
            f"corpus of {len(text)} chars is too short for block_size={block}",
            common.EXIT_BAD_CONFIG,
        )

    def get_batch(split: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        d = splits[split]
        ix = torch.randint(len(d) - block - 1, (batch,), generator=gen)
        x = torch.stack([d[i : i + block] for i in ix])
        y = torch.stack([d[i + 1 : i + 1 + block] for i in ix])
        return x.to(device), y.to(device)

    # The same held-out batches at every evaluation, so losses compare across steps and trials.
    eval_gen = torch.Generator().manual_seed(0)
    eval_sets = {s: [get_batch(s, eval_gen) for _ in range(cfg["eval_batches"])] for s in splits}

    raw = TinyGPT(len(chars), cfg).to(device)  # the model itself (DDP wraps it in a gang)
    n_params = sum(p.numel() for p in raw.parameters())
    opt = torch.optim.AdamW(raw.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    batch_gen = torch.Generator().manual_seed(cfg["seed"] + rank)

    tracker = common.Tracker(cfg, enabled=lead)
    step = 0
    if state is not None:
        step = common.resume_training(state, raw, opt)
        if world == 1:
            batch_gen.set_state(state["batch_rng"])
        else:  # the saved stream is rank 0's: each rank continues its own
            batch_gen.manual_seed(cfg["seed"] + rank + 7919 * step)
        if lead:
            print(f"resumed from {ckpt_path} at step {step}", flush=True)
        tracker.tag("resumed_from_step", step)
    model: nn.Module = raw
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(raw)  # gradients all-reduced across the ranks
    if lead:
        print(
            f"tinygpt: {n_params:,} params, vocab {len(chars)}, {len(text):,} chars, "
            f"device {device}, ranks {world}, steps {step}->{cfg['steps']}",
            flush=True,
        )

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        raw.eval()  # every rank holds the same weights: no collective needed here
        out = {
            f"{s}_loss": sum(raw(x, y).item() for x, y in batches) / len(batches)
            for s, batches in eval_sets.items()
        }
        raw.train()
        return out

    def save() -> None:
        if lead:
            common.save_training(ckpt_path, raw, opt, step, batch_gen, cfg)

    resumed_at = step if state is not None else None
    losses: dict[str, float] = {}
    while True:
        if (step % cfg["eval_every"] == 0 or step >= cfg["steps"]) and step != resumed_at:
            losses = evaluate()
            common.check_finite(losses["val_loss"], step, tracker, "lower lr")
            tracker.log(losses, step)
            if lead:
                print(
                    f"step {step:5d} | train_loss {losses['train_loss']:.4f} | "
                    f"val_loss {losses['val_loss']:.4f} | {time.perf_counter() - start:.1f}s",
                    flush=True,
                )
            save()
        if step >= cfg["steps"]:
            break
        for group in opt.param_groups:
            group["lr"] = cfg["lr"] * min(1.0, (step + 1) / max(1, cfg["warmup_steps"]))
        x, y = get_batch("train", batch_gen)
        loss = model(x, y)
        common.check_finite(loss.item(), step, tracker, "lower lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg["grad_clip"] > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        step += 1
        common.stopped(step, save)

    if not losses:  # resumed at the final step: nothing trained, report the saved model
        losses = evaluate()
    summary = {
        "val_loss": losses["val_loss"],
        "train_loss": losses["train_loss"],
        "val_bpc": losses["val_loss"] / math.log(2),
        **({"test_loss": losses["test_loss"]} if "test_loss" in losses else {}),
        "steps": step,
        "params": n_params,
        "ranks": world,
        "elapsed_s": time.perf_counter() - start,
    }
    tracker.finish("FINISHED", summary, step)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    if lead:
        common.print_summary(summary)


if __name__ == "__main__":
    main()
