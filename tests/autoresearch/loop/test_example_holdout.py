"""The bundled MLP example's held-out split is a data input (issue 40.1, 40.5): a search
trial of examples/mlp/study.yaml cannot see it in its sandbox (its path is absent, and the
script told AIR_EVAL_SPLIT=test, as a patched trial would be, fails for want of it), while a
final re-evaluation run reads it read-only and logs test_loss. Real jobs, real bwrap."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from air_skills import Client
from air_skills.runtime.execution import sandbox
from autoresearch.journal.journal import Trial, replay
from autoresearch.loop.trials import trial_spec
from autoresearch.study.study import check_runnable, load_study

REPO = Path(__file__).resolve().parents[3]
HELD = REPO / "examples" / "mlp" / "heldout"
SHORT = {"steps": 20, "eval_every": 20}
# What a job can do with the held-out folder: found at its real path and as $AIR_DATA_DIR/heldout,
# and whether it can write there.
PROBE = """
import os, sys
for where in (sys.argv[1], os.path.join(os.environ.get("AIR_DATA_DIR", "/nowhere"), "heldout")):
    print("seen", os.path.isfile(os.path.join(where, "test.npz")))
    try:
        open(os.path.join(where, "written"), "w").close()
        print("written True")
    except OSError as exc:
        print("written False", exc.strerror)
"""


def test_a_search_trial_of_the_example_cannot_see_its_held_out_input(
    study_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    monkeypatch.setenv("AIR_DATA_ROOTS", str(REPO / "examples"))
    study = check_runnable(load_study(REPO / "examples" / "mlp" / "study.yaml"))
    assert [d.name for d in study.holdout_data] == ["heldout"]
    st = replay([])
    st.study_id = "s1"
    config = {**study.base_config, **SHORT}
    search = trial_spec(study, st, Trial(number=1, diff={}, config=config, source="tpe"), 0)
    final = trial_spec(
        study, st, Trial(number=2, diff={}, config=config, source="final", final_of=0), 0
    )
    assert search.env["AIR_EVAL_SPLIT"] == "val" and final.env["AIR_EVAL_SPLIT"] == "test"
    # a patched trial: the bundled script, told it is a final run
    patched = search.model_copy(update={"env": {**search.env, "AIR_EVAL_SPLIT": "test"}})
    probe = [sys.executable, "-c", PROBE, str(HELD)]
    client = Client()
    jobs = [
        client.launch(patched),
        client.launch(final),
        client.launch(search.model_copy(update={"command": probe, "idempotency_key": None})),
        client.launch(final.model_copy(update={"command": probe, "idempotency_key": None})),
    ]
    cheat, rerun, looked, read = client.wait([j.job_id for j in jobs], timeout_s=240, any=False)
    assert all(j.sandbox for j in (cheat, rerun, looked, read))
    text = client.logs(cheat.job_id).text
    assert str(cheat.status) == "FAILED", text
    assert "the held-out split" in text and "is not there" in text
    text = client.logs(rerun.job_id).text
    assert str(rerun.status) == "SUCCEEDED", text
    assert float(re.search(r"^test_loss: (\S+)$", text, re.M).group(1)) > 0
    text = client.logs(looked.job_id).text
    assert str(looked.status) == "SUCCEEDED", text
    assert "seen True" not in text and text.count("seen False") == 2  # absent both ways
    text = client.logs(read.job_id).text
    assert str(read.status) == "SUCCEEDED", text
    assert text.count("seen True") == 2  # the final run: at its path and as the input
    assert "written True" not in text and text.count("Read-only file system") == 2
    assert sorted(p.name for p in HELD.iterdir()) == ["test.npz"]
