"""Issue 30: confirmation cannot be gamed by a patch that fixes a lucky seed. Its three
"different seeds" give the identical value; the baseline's runs vary with the seed: the trial
is flagged `seed-ignored` (journal decision with the reason, a warning, get_study, report)
and never kept, while an honest improvement, whose runs vary, is still kept. A real study:
real processes run the patched training script of a code study."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from code_tree import TRAIN, PatchProposer, code_study, make_tree, patch_of, scale_patch

from autoresearch.api import get_study
from autoresearch.journal.journal import Journal, replay
from autoresearch.loop.loop import StudyLoop
from autoresearch.proposers import ProposalRequest, ProposalResult
from autoresearch.study.study import check_runnable, parse_study

# random.Random(1075).gauss(0, 1) is -3.46: with noise 0.1 a loss 0.35 below the base's.
FIXED = TRAIN.replace('random.Random(cfg.get("seed", 0))', "random.Random(1075)")
LUCKY = "a lucky fixed seed"


class FixedSeedFirst(PatchProposer):
    """Offers the honest patch only once the fixed-seed trial has ended. Trials are judged in
    the order they end: judged after the honest one was kept, the fixed-seed trial would no
    longer beat the best, so it would get no confirmation runs to be caught by (on a loaded
    machine either may end first)."""

    def propose(self, request: ProposalRequest) -> ProposalResult:
        lucky = [t for t in request.trials if t.rationale == LUCKY]
        if lucky and not lucky[0].status.is_final():
            return ProposalResult([])
        if not lucky:
            request = replace(request, n=min(request.n, 1))
        return super().propose(request)


@pytest.mark.slow
def test_a_fixed_lucky_seed_is_flagged_never_kept(study_home: Path, tmp_path: Path) -> None:
    assert FIXED != TRAIN
    tree = make_tree(tmp_path / "tree")
    study = code_study(
        tree,
        base_config={"x": 0.0, "seed": 0, "noise": 0.1},
        noise={"repeats": 2, "confirm_seeds": 2, "confirm": "always"},
        budget={"trials": 9, "concurrency": 3},
    )
    items: list[dict[str, Any]] = [
        {"patch": patch_of("train.py", TRAIN, FIXED), "why": LUCKY},
        {"patch": scale_patch(0.5), "why": "truly better"},
    ]
    folder = tmp_path / "study"
    parsed = check_runnable(parse_study(study))
    StudyLoop(parsed, folder, proposer=FixedSeedFirst(items), poll_s=0.2).run()

    events = Journal(folder).read()
    st = replay(events)
    by_why = {t.rationale: t for t in st.ordered()}
    fixed, good = by_why[LUCKY], by_why["truly better"]
    runs = [t for t in st.ordered() if t.confirms == fixed.number]
    assert len(runs) == 2 and len({t.value for t in runs}) == 1  # one value, two seeds
    assert len({t.value for t in st.ordered() if t.is_noise}) == 3  # the base's runs vary

    assert fixed.decision == "seed-ignored", fixed.decision
    assert fixed.confirmed["reason"].startswith("seed-ignored: its 2 confirmation runs")
    assert good.decision == "keep" and st.best_trial == good.number
    warnings = [e["message"] for e in events if e["event"] == "warning"]
    assert any(f"trial {fixed.number} not kept: seed-ignored" in w for w in warnings)

    view = get_study(folder)
    assert view["best"]["trial"] == good.number, view["best"]
    assert any(f"trial {fixed.number} not kept: seed-ignored" in w for w in view["warnings"])
    assert "seed-ignored" in (folder / "report.md").read_text()
