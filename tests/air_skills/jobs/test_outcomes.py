"""The exit -> retry policy: one case per row of runtime/results/outcomes.py's table, and its
wording."""

from __future__ import annotations

import pytest

from air_skills.runtime.results.outcomes import AttemptEnd, InfraFailure, classify, start_failed
from air_skills.status import JobStatus

J = "job-0123456789"
GPU = InfraFailure("GPU fault while running (GPU 0: xid 79)", "gpu")
LOST = InfraFailure("its supervisor died", "lost")
RAY = InfraFailure("JOB_SUPERVISOR_ACTOR_DIED: gone", "ray")

# (case, attempt end, action, status, failure_kind / requeue kind, exit code, signal, message)
CASES = [
    (
        "1 cancel wins over everything",
        AttemptEnd(J, exit_code=1, stop_request="cancel", stop_reason="by user", infra=GPU),
        "finish",
        JobStatus.CANCELLED,
        None,
        1,
        None,
        "CANCELLED: by user",
    ),
    (
        "2 preempt requeues",
        AttemptEnd(J, signal="SIGTERM", stop_request="preempt", stop_reason="for job-x"),
        "requeue",
        None,
        "preempted",
        None,
        None,
        "QUEUED: for job-x; it resumes with the same id and AIR_CHECKPOINT_DIR",
    ),
    (
        "2 preempt without a reason",
        AttemptEnd(J, stop_request="preempt"),
        "requeue",
        None,
        "preempted",
        None,
        None,
        "QUEUED: preempted; it resumes with the same id and AIR_CHECKPOINT_DIR",
    ),
    (
        "3 GPU fault, infra retries left",
        AttemptEnd(J, signal="SIGTERM", infra=GPU, infra_retries=2, max_infra_retries=3),
        "requeue",
        None,
        "infra",
        None,
        None,
        "QUEUED: GPU fault while running (GPU 0: xid 79); GPU cordoned, the job restarts on"
        " healthy GPUs (failure_kind: infra, not its own code)",
    ),
    (
        "3 lost supervisor, infra retries left",
        AttemptEnd(J, infra=LOST, infra_retries=0, max_infra_retries=3),
        "requeue",
        None,
        "infra",
        None,
        None,
        "QUEUED: requeued after an infra failure (its supervisor died); it restarts with the"
        " same id and checkpoint folder",
    ),
    (
        "3 Ray could not run it, infra retries left",
        AttemptEnd(J, infra=RAY, max_infra_retries=1),
        "requeue",
        None,
        "infra",
        None,
        None,
        "QUEUED: Ray could not run it (JOB_SUPERVISOR_ACTOR_DIED: gone); resubmitted"
        " (failure_kind: infra, not its own code)",
    ),
    (
        "4 GPU fault, infra retries spent",
        AttemptEnd(J, exit_code=3, infra=GPU, infra_retries=3, max_infra_retries=3),
        "finish",
        JobStatus.FAILED,
        "infra",
        None,
        None,
        "FAILED (infra): GPU fault while running (GPU 0: xid 79); infra retries spent."
        " Next: `air gpus` and `air doctor`",
    ),
    (
        "4 lost supervisor, infra retries spent",
        AttemptEnd(J, infra=LOST, infra_retries=3, max_infra_retries=3),
        "finish",
        JobStatus.FAILED,
        "infra",
        None,
        None,
        "FAILED (infra): its supervisor died; infra retries spent."
        " Next: check `air doctor`, then relaunch",
    ),
    (
        "4 Ray could not run it, infra retries spent",
        AttemptEnd(J, exit_code=2, infra=RAY, max_infra_retries=0),
        "finish",
        JobStatus.FAILED,
        "infra",
        2,
        None,
        f"FAILED (infra): Ray could not run the job (JOB_SUPERVISOR_ACTOR_DIED: gone)."
        f" Next: read `air logs {J}` and check the cluster (`ray status`), then relaunch",
    ),
    (
        "5 timeout, even with retries left",
        AttemptEnd(J, signal="SIGTERM", timed_out=True, timeout_min=5, max_retries=2),
        "finish",
        JobStatus.TIMED_OUT,
        "user",
        None,
        "SIGTERM",
        "TIMED_OUT: ran past timeout_min=5 and was stopped."
        " Next: raise timeout_min or save checkpoints to AIR_CHECKPOINT_DIR and relaunch",
    ),
    (
        "6 exit 0",
        AttemptEnd(J, exit_code=0, max_retries=2),
        "finish",
        JobStatus.SUCCEEDED,
        None,
        0,
        None,
        "SUCCEEDED: exited 0",
    ),
    (
        "7 exit code, retries left",
        AttemptEnd(J, exit_code=3, user_retries=1, max_retries=2),
        "requeue",
        None,
        "user",
        3,
        None,
        "QUEUED: exited with code 3; retry 2 of 2",
    ),
    (
        "7 killed by a signal, retries left",
        AttemptEnd(J, signal="SIGKILL", max_retries=1),
        "requeue",
        None,
        "user",
        None,
        "SIGKILL",
        "QUEUED: was killed by SIGKILL; retry 1 of 1",
    ),
    (
        "8 exit code, retries spent",
        AttemptEnd(J, exit_code=3, user_retries=2, max_retries=2),
        "finish",
        JobStatus.FAILED,
        "user",
        3,
        None,
        f"FAILED: the command exited with code 3 (its own code failed)."
        f" Next: read `air logs {J}`, fix it, relaunch",
    ),
    (
        "8 killed by a signal, on Ray",
        AttemptEnd(J, signal="SIGSEGV", runner="Ray job raysub-1"),
        "finish",
        JobStatus.FAILED,
        "user",
        None,
        "SIGSEGV",
        f"FAILED: the command was killed by SIGSEGV (its own code failed; Ray job raysub-1)."
        f" Next: read `air logs {J}`, fix it, relaunch",
    ),
]


@pytest.mark.parametrize(
    ("end", "action", "status", "kind", "code", "sig", "message"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_classify(
    end: AttemptEnd,
    action: str,
    status: JobStatus | None,
    kind: str | None,
    code: int | None,
    sig: str | None,
    message: str,
) -> None:
    out = classify(end)
    assert out.action == action
    assert out.message == message
    assert (out.exit_code, out.signal) == (code, sig)
    if action == "finish":
        assert out.status == status and out.failure_kind == kind and out.kind is None
    else:
        assert out.status is None and out.kind == kind


@pytest.mark.parametrize(
    ("kind", "text", "code", "message"),
    [
        (
            "FileNotFoundError",
            "",
            127,
            "FAILED: command not found: 'trian.py'."
            " Next: check the program name and PATH, then relaunch",
        ),
        (
            "PermissionError",
            "",
            126,
            "FAILED: permission denied running 'trian.py'."
            " Next: make it executable or run it through its interpreter",
        ),
        (
            "NotADirectoryError",
            "no such workdir",
            126,
            "FAILED: no such workdir. Next: fix the job's command or workdir",
        ),
        ("OSError", "", 126, "FAILED: OSError. Next: fix the job's command or workdir"),
    ],
)
def test_start_failed(kind: str, text: str, code: int, message: str) -> None:
    out = start_failed(kind, text, "trian.py")
    assert (out.action, out.status, out.failure_kind) == ("finish", JobStatus.FAILED, "user")
    assert (out.exit_code, out.message) == (code, message)


def test_every_failure_says_what_to_do_next() -> None:
    for case in CASES:
        out = classify(case[1])
        if out.status in (JobStatus.FAILED, JobStatus.TIMED_OUT):
            assert " Next: " in out.message, case[0]
