"""The loop's judgement without processes: noise floor, keep/discard, what may be pruned."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ar_helpers import small_study

from autoresearch.journal.journal import TrialStatus
from autoresearch.loop import decisions
from autoresearch.loop.loop import StudyLoop, trial_command
from autoresearch.study.study import parse_study


class CurveClient:
    """Stands in for the Client where only metric reads and cancels matter."""

    def __init__(self, curves: dict[str, list[list[float]]]) -> None:
        self.curves = curves
        self.cancelled: list[str] = []

    def metrics(self, job_id: str, keys: Any = None, history: bool = False, max_points: int = 0):
        return SimpleNamespace(history={"loss": self.curves.get(job_id, [])}, latest={})

    def cancel(self, job_id: str, reason: str = "", wait_s: float = 0) -> None:
        self.cancelled.append(job_id)


def make_loop(tmp_path: Path, client: Any = None, **overrides: Any) -> StudyLoop:
    study = parse_study(small_study(**overrides))
    loop = StudyLoop(study, tmp_path, client=client or object())
    loop.emit("session_started", study=study.to_dict(), study_id="s", gpus_per_trial=0)
    return loop


def finish(loop: StudyLoop, n: int, source: str, value: float | None, status: str = "SUCCEEDED",
           curve: list | None = None, diff: dict | None = None) -> None:  # fmt: skip
    diff = diff if diff is not None else ({} if source in ("baseline", "noise") else {"x": n / 10})
    loop.emit("proposal", trial=n, source=source, diff=diff, config=loop.study.config_for(diff))
    loop.emit("launched", trial=n, job_id=f"job-{n:010d}", attempt=1)
    if status == "RUNNING":
        return
    loop.emit("finished", trial=n, status=status, value=value, curve=curve or [])
    loop.undecided.append(n)


def test_noise_floor_decides_keep_and_discard(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, noise={"repeats": 2, "sigmas": 2.0})
    finish(loop, 3, "random", 0.90)  # finishes before the baseline runs: waits for them
    loop._decide()
    assert loop.state.trials[3].decision is None
    finish(loop, 0, "baseline", 1.00)
    finish(loop, 1, "noise", 1.10)
    loop._decide()
    assert loop.state.noise_floor is None  # one repeat still out
    finish(loop, 2, "noise", 0.90)
    finish(loop, 4, "random", 0.70)
    loop._decide()
    st = loop.state
    assert st.noise_floor == pytest.approx(0.2) and st.noise_std == pytest.approx(0.1)
    decisions = {n: t.decision for n, t in st.trials.items()}
    assert decisions == {0: "baseline", 1: "noise", 2: "noise", 3: "discard", 4: "keep"}
    # 0.90 beats the baseline's mean (1.00) by 0.1: inside the floor of 0.2; 0.70 is beyond it
    assert st.best_trial == 4 and st.best_value == pytest.approx(0.70)


def test_a_failed_baseline_leaves_the_reference_to_its_repeats(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, noise={"repeats": 1})
    finish(loop, 0, "baseline", None, status="FAILED")
    finish(loop, 1, "noise", 1.0)
    finish(loop, 2, "random", 0.99)
    loop._decide()
    decisions = {n: t.decision for n, t in loop.state.trials.items()}
    assert decisions == {0: "failed", 1: "baseline", 2: "keep"}


def test_without_noise_strictly_better_is_kept(tmp_path: Path) -> None:
    loop = make_loop(tmp_path)
    finish(loop, 0, "baseline", None, status="RUNNING")
    finish(loop, 1, "random", 0.5)  # done before the baseline: judged after it
    loop._decide()
    assert loop.state.trials[1].decision is None
    loop.emit("finished", trial=0, status="SUCCEEDED", value=0.6)
    loop.undecided.append(0)
    finish(loop, 2, "random", 0.5)
    finish(loop, 3, "random", 0.8, status="PRUNED")
    loop._decide()
    decisions = {n: t.decision for n, t in loop.state.trials.items()}
    assert decisions == {0: "baseline", 1: "keep", 2: "discard", 3: "pruned"}


def test_what_may_be_pruned(tmp_path: Path) -> None:
    good = [[0, 1.0], [1, 0.5], [2, 0.3], [3, 0.2]]
    bad = [[0, 2.0], [1, 1.9]]
    client = CurveClient(
        {
            "job-0000000010": bad,  # a trial: pruned
            "job-0000000011": bad,  # a noise repeat: never pruned
            "job-0000000012": [[0, 2.0], [1, 1.9], [2, 1.8], [3, 1.7]],  # at the last step
            "job-0000000013": [[0, 2.0]],  # one point is no curve
        }
    )
    loop = make_loop(
        tmp_path,
        client,
        early_stopping={"type": "median", "min_steps": 1, "min_trials": 2},
        noise={"repeats": 1},
    )
    finish(loop, 0, "baseline", 0.2, curve=good)
    finish(loop, 1, "random", 0.25, curve=good, diff={"x": 0.5})
    for n, source in ((10, "random"), (11, "noise"), (12, "random"), (13, "random")):
        finish(loop, n, source, None, status="RUNNING", diff={} if source == "noise" else None)
    loop._prune_pass({})
    assert client.cancelled == ["job-0000000010"]
    assert loop.state.trials[10].status == TrialStatus.PRUNED
    assert "worse than the median" in loop.state.trials[10].failure
    assert {loop.state.trials[n].status for n in (11, 12, 13)} == {TrialStatus.RUNNING}


def test_python_is_this_interpreter() -> None:
    import sys

    assert trial_command(["python", "train.py"]) == [sys.executable, "train.py"]
    assert trial_command(["/usr/bin/python3.11", "t.py"]) == ["/usr/bin/python3.11", "t.py"]


# --- the pure judgements, as tables ---------------------------------------------------------


@pytest.mark.parametrize(
    "value,best,floor,direction,expected",
    [
        (0.9, None, 0.0, "minimize", "keep"),  # the first value is the best there is
        (0.9, 1.0, 0.0, "minimize", "keep"),
        (1.0, 1.0, 0.0, "minimize", "discard"),  # a tie is no improvement
        (1.1, 1.0, 0.0, "minimize", "discard"),
        (0.9, 1.0, 0.2, "minimize", "discard"),  # inside the noise floor
        (0.7, 1.0, 0.2, "minimize", "keep"),
        (1.1, 1.0, 0.0, "maximize", "keep"),
        (0.9, 1.0, 0.0, "maximize", "discard"),
        (1.1, 1.0, 0.2, "maximize", "discard"),
        (1.3, 1.0, 0.2, "maximize", "keep"),
    ],
)
def test_judge(value: float, best: float | None, floor: float, direction: str, expected: str):
    assert decisions.judge(value, best, floor, direction) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "status,source,floor_known,expected",
    [
        ("FAILED", "random", False, "failed"),  # failures need no floor
        ("PRUNED", "random", False, "pruned"),
        ("CANCELLED", "noise", False, "cancelled"),
        ("SUCCEEDED", "random", False, None),  # waits for the floor
        ("SUCCEEDED", "baseline", True, "baseline"),  # no reference yet: it becomes one
        ("SUCCEEDED", "random", True, "keep"),
    ],
)
def test_decide_trial(
    tmp_path: Path, status: str, source: str, floor_known: bool, expected: str | None
) -> None:
    loop = make_loop(tmp_path)
    finish(loop, 1, source, 0.5 if status == "SUCCEEDED" else None, status=status)
    got = decisions.decide_trial(loop.state.trials[1], loop.study, loop.state, floor_known)
    assert (got.decision if got else None) == expected
    if expected in ("keep", "baseline"):
        assert got is not None and got.best == (1, 0.5)


def test_noise_floor_waits_for_every_repeat(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, noise={"repeats": 2, "sigmas": 2.0})
    assert decisions.noise_floor_fields(loop.study, loop.state) is None
    finish(loop, 0, "baseline", 1.0)
    finish(loop, 1, "noise", 1.2)
    assert decisions.noise_floor_fields(loop.study, loop.state) is None
    finish(loop, 2, "noise", None, status="FAILED")
    fields = decisions.noise_floor_fields(loop.study, loop.state)
    assert fields is not None and fields["values"] == [1.0, 1.2]
    assert fields["floor"] == pytest.approx(2 * fields["std"]) and fields["floor"] > 0
    assert fields["baseline_value"] == pytest.approx(1.1)
    (tmp_path / "none").mkdir()
    without = make_loop(tmp_path / "none")
    finish(without, 0, "baseline", 1.0)
    assert decisions.noise_floor_fields(without.study, without.state) is None


def test_the_baseline_is_judged_first(tmp_path: Path) -> None:
    loop = make_loop(tmp_path)
    finish(loop, 0, "baseline", None, status="RUNNING")
    finish(loop, 1, "random", 0.5)
    assert decisions.judging_order(loop.state, [1], True) == ([1], False)
    loop.emit("finished", trial=0, status="SUCCEEDED", value=0.6)
    assert decisions.judging_order(loop.state, [1, 0], True) == ([0, 1], True)
