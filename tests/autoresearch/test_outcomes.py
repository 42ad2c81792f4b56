"""A finished job turned into a trial's result, on real ``JobInfo`` values (no processes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from air_skills.models import JobInfo
from autoresearch.journal.journal import Trial, TrialStatus
from autoresearch.loop.outcomes import failure_reason, trial_outcome, wants_infra_retry

START = datetime(2026, 1, 1, tzinfo=UTC)


def job(status: str, **kw: Any) -> JobInfo:
    ended = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    fields: dict[str, Any] = {"created_at": START, "started_at": START, "ended_at": ended}
    fields.update(job_id="job-0000000001", name="t", status=status, gpus=[0, 1], **kw)
    return JobInfo(**fields)


def running(status: TrialStatus = TrialStatus.RUNNING, **kw: Any) -> Trial:
    return Trial(1, {"x": 0.1}, {"x": 0.1}, "random", status=status, job_id="job-0000000001", **kw)


def outcome(info: JobInfo, trial: Trial | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "metric": "loss",
        "step_metric": None,
        "latest": {"loss": 0.25},
        "curve": [[0, 1.0], [1, 0.25]],
        "cancel_reason": None,
        "log_tail": lambda: "step 1\nValueError: bad shape\nexiting",
    }
    args.update(kw)
    return trial_outcome(trial or running(), info, **args)


@pytest.mark.parametrize(
    "status,kw,expected_status,expected_failure",
    [
        ("SUCCEEDED", {}, "SUCCEEDED", None),
        ("SUCCEEDED", {"latest": {"loss": float("nan")}}, "FAILED",
         "non-finite: the objective loss is nan"),
        ("SUCCEEDED", {"latest": {"loss": 1.7976931348623157e308}}, "FAILED",  # MLflow's inf
         "non-finite: the objective loss is 1.7976931348623157e+308 (overflow: float max)"),
        ("FAILED", {}, "FAILED", "ValueError: bad shape"),  # the log's exception line
        ("TIMED_OUT", {}, "FAILED", "timed out: "),
        ("CANCELLED", {}, "CANCELLED", ""),  # cancelled from outside: the job's message
        ("RUNNING", {"cancel_reason": "budget:wall_time_min"}, "CANCELLED",
         "cancelled: budget:wall_time_min"),
        ("SUCCEEDED", {"cancel_reason": "pruned"}, "PRUNED", None),  # pruned wins over the end
    ],
)  # fmt: skip
def test_status_and_failure(
    status: str, kw: dict, expected_status: str, expected_failure: str | None
) -> None:
    out = outcome(job(status), **kw)
    assert out.fields["status"] == expected_status
    assert out.fields.get("failure") == expected_failure
    assert out.fields["gpu_s"] == 20.0  # 10 s on 2 GPUs
    assert out.fields["steps"] == 1


def test_success_records_the_value_and_the_metric_was_seen() -> None:
    out = outcome(job("SUCCEEDED", run_id="r1"))
    assert out.fields["value"] == 0.25 and out.fields["run_id"] == "r1"
    assert out.metric_seen and out.logged is None and not out.no_curve


def test_a_missing_objective_lists_what_was_logged() -> None:
    out = outcome(job("SUCCEEDED"), latest={"acc": 0.9, "step": 3.0})
    assert out.logged == ["acc", "step"] and not out.metric_seen
    assert out.fields["status"] == "FAILED" and out.fields["failure_kind"] == "user"
    assert "acc, step" in out.fields["failure"]


def test_a_step_metric_without_history_is_flagged() -> None:
    assert outcome(job("SUCCEEDED"), step_metric="val_loss", curve=[]).no_curve


def test_a_pruned_trial_keeps_its_intermediate_value() -> None:
    trial = running(TrialStatus.PRUNED, value=0.8, curve=[[0, 1.0], [2, 0.8]])
    out = outcome(job("CANCELLED"), trial, curve=[])
    assert out.fields["status"] == "PRUNED" and out.fields["value"] == 0.8
    assert out.fields["curve"] == [[0, 1.0], [2, 0.8]] and out.fields["steps"] == 2


def test_the_log_is_read_only_for_a_failure() -> None:
    def no_log() -> str:
        raise AssertionError("the log tail was read")

    assert outcome(job("SUCCEEDED"), log_tail=no_log).fields["status"] == "SUCCEEDED"
    infra = outcome(job("FAILED", failure_kind="infra", message="GPU 1 fell off the bus"))
    assert infra.fields["failure"] == "GPU 1 fell off the bus"  # the machine's words, not the log
    assert infra.fields["failure_kind"] == "infra"


@pytest.mark.parametrize(
    "failure_kind,attempt,stopping,expected",
    [("infra", 1, False, True), ("infra", 2, False, False), ("user", 1, False, False),
     ("infra", 1, True, False)],
)  # fmt: skip
def test_infra_failures_are_relaunched_a_few_times(
    failure_kind: str, attempt: int, stopping: bool, expected: bool
) -> None:
    info = job("FAILED", failure_kind=failure_kind)
    assert wants_infra_retry(running(attempt=attempt), info, 1, stopping) is expected


@pytest.mark.parametrize(
    "log,expected",
    [
        ("a\nRuntimeError: boom\nb", "RuntimeError: boom"),
        ("a\nfatal: no data\n", "fatal: no data"),
        ("a\nlast words\n\n", "last words"),
        ("", "the fallback"),
    ],
)
def test_failure_reason(log: str, expected: str) -> None:
    assert failure_reason(log, "the fallback") == expected
