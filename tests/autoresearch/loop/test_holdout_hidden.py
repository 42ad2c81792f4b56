"""The held-out split stays out of the search (issue 40): a scripted LLM proposer never gets
the held-out metric or its values on the wire, even from a trial that logged it; a search
trial that reads the held-out data fails in its sandbox, while a final re-evaluation run reads
it as a data input. Real loop, real jobs, real bwrap, a local server speaking Anthropic's API."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ar_helpers import small_study
from llm_server import schema_following

from air_skills import Client
from air_skills.runtime.execution import sandbox
from autoresearch.journal.journal import Journal, Trial, replay
from autoresearch.loop.loop import run_study
from autoresearch.loop.trials import trial_spec
from autoresearch.study.study import parse_study

HOLDOUT = "test_loss"


def test_the_llm_never_sees_the_holdout(study_home: Path, tmp_path: Path, llm_server) -> None:
    pytest.importorskip("anthropic")
    llm_server.responder = schema_following
    data = small_study(
        name="wire",
        base_config={
            "x": 0.0,
            "y": 0.0,
            "steps": 1,
            "sleep_s": 0.01,
            "seed": 0,
            "noise": 0.01,
            "holdout": True,
            "holdout_noise": 0.01,
        },  # fmt: skip
        search_space={
            "x": {"type": "float", "low": -1.0, "high": 1.0},
            "y": {"type": "float", "low": -1.0, "high": 1.0},
            "leak": {"type": "choice", "values": [True]},  # every proposed trial logs it
        },
        objective={"metric": "loss", "holdout": HOLDOUT},
        noise={"repeats": 2},
        final={"top_k": 2, "seeds": 2},
        budget={"trials": 6, "concurrency": 1},
        proposer={
            "type": "llm",
            "provider": "anthropic",
            "base_url": llm_server.anthropic_url,
            "max_retries": 0,
        },  # fmt: skip
        sandbox="off",
    )
    folder = tmp_path / "study"
    run_study(parse_study(data), folder, poll_s=0.1)
    st = replay(Journal(folder).read())
    assert llm_server.requests, "the LLM proposed the trials"
    wire = json.dumps(llm_server.bodies())
    assert HOLDOUT not in wire
    # every held-out value a run printed (the leaking search trials' too) is absent from it
    home = study_home / "jobs"
    printed = []
    for t in st.ordered():
        log = (home / str(t.job_id) / "output.log").read_text()
        printed += [float(v) for v in re.findall(rf"^{HOLDOUT}: (\S+)$", log, re.M)]
    leaked = [t for t in st.ordered() if t.holdout_leak]
    assert leaked and printed
    for v in printed:
        for shown in {f"{v:.4g}", f"{v:.6g}", repr(v)[:8]}:
            assert shown not in wire, shown
    assert not any(t.number in (st.final_started or {}).get("finalists", []) for t in leaked)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A held-out folder a sandboxed job would see (not under /tmp, private in a sandbox, nor
    AIR_HOME), the data root."""
    root = Path(tempfile.mkdtemp(prefix="air-heldout-", dir="/var/tmp"))
    root.chmod(0o755)  # a job may run as another user
    monkeypatch.setenv("AIR_DATA_ROOTS", str(root))
    held = root / "heldout"
    held.mkdir()
    (held / "offset").write_text("0.5")
    yield held
    shutil.rmtree(root, ignore_errors=True)


def test_a_search_trial_cannot_read_the_held_out_data(study_home: Path, held: Path) -> None:
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    outside = held.parent / "not-held-out"
    outside.write_text("visible")
    study = parse_study(
        small_study(
            name="hidden",
            base_config={
                "x": 0.0,
                "y": 0.0,
                "steps": 1,
                "sleep_s": 0.01,
                "seed": 0,
                "holdout": True,
            },  # fmt: skip
            objective={
                "metric": "loss",
                "holdout": {"metric": HOLDOUT, "data": [{"name": "heldout", "path": str(held)}]},
            },  # fmt: skip
        )
    )
    st = replay([])
    st.study_id = "s1"
    client = Client()
    reads = {**study.base_config, "read_file": str(held / "offset")}
    search = Trial(number=1, diff={}, config=reads, source="random")
    rerun = Trial(number=2, diff={}, config=dict(study.base_config), source="final", final_of=0)
    other = Trial(number=3, diff={}, config={**reads, "read_file": str(outside)}, source="random")
    a = client.launch(trial_spec(study, st, search, 0))
    b = client.launch(trial_spec(study, st, rerun, 0))
    c = client.launch(trial_spec(study, st, other, 0))
    a, b, c = client.wait([a.job_id, b.job_id, c.job_id], timeout_s=120, any=False)
    assert str(c.status) == "SUCCEEDED", client.logs(c.job_id).text  # the folder beside it: seen
    assert a.sandbox and b.sandbox
    assert str(a.status) == "FAILED", client.logs(a.job_id).text
    assert "No such file" in client.logs(a.job_id).text  # masked in the search's sandbox
    assert str(b.status) == "SUCCEEDED", client.logs(b.job_id).text
    text = client.logs(b.job_id).text
    held_value = float(re.search(rf"^{HOLDOUT}: (\S+)$", text, re.M).group(1))
    assert held_value == pytest.approx((0.3**2 + 0.6**2) + 0.5 + 0.5)  # the input was read


def test_held_out_data_outside_the_data_roots_is_refused_before_the_search(
    study_home: Path, held: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from air_skills.errors import DataPathRefused

    monkeypatch.delenv("AIR_DATA_ROOTS")
    data = small_study(
        name="roots",
        objective={
            "metric": "loss",
            "holdout": {"metric": HOLDOUT, "data": [{"name": "heldout", "path": str(held)}]},
        },  # fmt: skip
    )
    folder = held.parent / "study"
    with pytest.raises(DataPathRefused):
        run_study(parse_study(data), folder, poll_s=0.1)
    assert not replay(Journal(folder).read()).trials  # nothing ran
