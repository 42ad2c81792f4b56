"""Issue 25: a code study's trials run sandboxed, so a trial cannot rewrite the store's copy of
the protected evaluator or append to the journal; with `sandbox: off` (written, journaled) the
evaluator still checks the bytes it materialises against their content address."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from code_tree import EVALUATE, TRAIN, PatchProposer, code_study, make_tree, scale_patch

from air_skills import Client
from air_skills.runtime.code.quarantine import doctor_check, quarantined
from air_skills.runtime.code.snapshot_store import blob_path
from air_skills.runtime.execution import sandbox
from autoresearch.journal.journal import Journal, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.study.study import check_runnable, parse_study

# The attack of issue 25: the trial finds the evaluator's blob by its hash and rewrites it in
# place (same length, a forged objective), and appends a line to the study's journal.
ATTACK = """
if cfg.get("attack"):
    import hashlib as _h
    tried = {}
    sha = _h.sha256(Path("evaluate.py").read_bytes()).hexdigest()
    blob = Path(os.environ["AIR_HOME"]) / "code" / "blobs" / sha[:2] / sha
    forged = b"print('---')\\nprint('loss: -100.0')\\n"
    try:
        size = len(blob.read_bytes())
        with open(blob, "r+b") as f:
            f.write((forged + b"#" * size)[:size])
        tried["blob"] = "rewritten"
    except OSError as exc:
        tried["blob"] = type(exc).__name__
    try:
        with open(cfg["journal"], "a") as f:
            f.write('{"event": "forged"}\\n')
        tried["journal"] = "appended"
    except OSError as exc:
        tried["journal"] = type(exc).__name__
    print("ATTACK " + json.dumps(tried), flush=True)
"""


# An evaluator that tries to change what it judges (the trial's checkpoint) and the journal:
# it runs in a sandbox of its own, the trial's folder read-only.
EVAL_ATTACK = """\
import json, os
from pathlib import Path
cfg = json.loads(Path(os.environ["AIR_CONFIG_FILE"]).read_text())
ckpt = Path(os.environ["AIR_CHECKPOINT_DIR"])
value = float((ckpt / "loss.txt").read_text())
def tried(fn):
    try:
        fn()
        return 1
    except OSError:
        return 0
w_ckpt = tried(lambda: (ckpt / "loss.txt").write_text("-100"))
w_journal = tried(lambda: open(cfg["journal"], "a").write("forged"))
print("---")
print(f"loss: {value + 0.5}")
print(f"wrote_ckpt: {w_ckpt}")
print(f"wrote_journal: {w_journal}")
"""


def _tree(root: Path, evaluate: str = EVALUATE) -> Path:
    tree = make_tree(root)
    (tree / "train.py").write_text(TRAIN.replace('print("---")', ATTACK + 'print("---")', 1))
    (tree / "evaluate.py").write_text(evaluate)
    return tree


def _run(study: dict[str, Any], folder: Path, items: list[dict[str, Any]]) -> Any:
    parsed = check_runnable(parse_study(study))
    return StudyLoop(parsed, folder, proposer=PatchProposer(items), poll_s=0.2).run()


def _study(tree: Path, folder: Path, **extra: Any) -> dict[str, Any]:
    return code_study(
        tree,
        base_config={"x": 0.0, "attack": False, "journal": str(folder / "journal.jsonl")},
        search_space={"attack": {"type": "choice", "values": [False, True]}},
        evaluate="python evaluate.py",
        budget={"trials": 2, "concurrency": 1},
        **extra,
    )


ITEMS = [{"diff": {"attack": True}, "patch": scale_patch(0.5), "why": "attacks the store"}]


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
def test_a_sandboxed_trial_can_neither_rewrite_the_store_nor_append_to_the_journal(
    study_home: Path, tmp_path: Path
) -> None:
    tree = _tree(tmp_path / "tree", EVAL_ATTACK)
    folder = tmp_path / "study"
    sha = hashlib.sha256(EVAL_ATTACK.encode()).hexdigest()
    _run(_study(tree, folder), folder, ITEMS)
    st = replay(Journal(folder).read())
    attacker = st.trials[1]
    log = Client(study_home).logs(attacker.job_id or "", tail=None).text
    tried = json.loads(log.split("ATTACK ", 1)[1].splitlines()[0])
    assert tried == {"blob": "FileNotFoundError", "journal": "FileNotFoundError"}, tried
    assert blob_path(study_home, sha).read_bytes() == EVAL_ATTACK.encode()
    assert "forged" not in (folder / "journal.jsonl").read_text()
    # The evaluator, sandboxed too, changed neither the trial's checkpoint nor (above) the journal.
    finished = [e for e in Journal(folder).read() if e["event"] == "finished"]
    for event in finished:
        got = event["evaluation"]["metrics"]
        assert got["wrote_ckpt"] == 0, event  # its journal write landed in its private /tmp
    # The evaluator ran the real evaluate.py: the patch's honest value (0.5 + 0.5) is kept.
    assert st.trials[0].value == pytest.approx(1.5)
    assert attacker.value == pytest.approx(1.0) and attacker.decision == "keep"
    assert Client(study_home).get(attacker.job_id or "").sandbox == "bwrap"


def test_with_sandbox_off_a_rewritten_blob_is_caught_quarantined_and_never_kept(
    study_home: Path, tmp_path: Path
) -> None:
    tree = _tree(tmp_path / "tree")
    folder = tmp_path / "study"
    sha = hashlib.sha256(EVALUATE.encode()).hexdigest()
    _run(_study(tree, folder, sandbox="off"), folder, ITEMS)
    st = replay(Journal(folder).read())
    attacker = st.trials[1]
    log = Client(study_home).logs(attacker.job_id or "", tail=None).text
    assert '"blob": "rewritten"' in log  # unsandboxed, the attack reached the store
    assert attacker.decision == "tampered" and attacker.value is None
    assert "content address" in (attacker.failure or "")
    assert not blob_path(study_home, sha).exists()  # quarantined
    assert [n.split(".")[0] for n in quarantined(study_home)] == [sha]
    check = doctor_check(study_home)
    assert check["status"] == "warn" and "quarantined" in check["detail"]
    # `sandbox: off` was written: journaled, and in the report.
    assert any("sandbox: off" in w for w in st.warnings)
    assert "sandbox: off" in (folder / "report.md").read_text()
    assert st.best_trial == 0
