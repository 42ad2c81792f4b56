"""Reading a failed attempt's log: the NCCL signature table, torchrun's root cause, outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from air_skills.runtime.execution import gang
from air_skills.runtime.results import nccl
from air_skills.runtime.results.outcomes import AttemptEnd, InfraFailure, classify
from air_skills.status import JobStatus

# One line per row of nccl.SIGNATURES, as NCCL and torch print them.
NCCL_LINES = [
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
    "torch.distributed.DistBackendError: ncclSystemError: System call failed",
    "ncclInternalError: Internal check failed.",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 ms",
    "[Rank 1] NCCL communicator was aborted on rank 1.",
    "[PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck: collective timed out",
    "host:123:456 [0] NCCL WARN Connection closed by remote peer",
]
NOT_NCCL = [
    "using backend nccl on 8 GPUs",
    "NCCL_DEBUG=INFO set",
    "ValueError: loss is nan",
    "RuntimeError: CUDA out of memory.",
]


def test_every_signature_has_a_line() -> None:
    assert len(NCCL_LINES) == len(nccl.SIGNATURES)
    for (pattern, _), line in zip(nccl.SIGNATURES, NCCL_LINES, strict=True):
        assert pattern.search(line), (pattern.pattern, line)


@pytest.mark.parametrize("line", NCCL_LINES)
def test_nccl_lines_are_found(line: str) -> None:
    found = nccl.signature(["step 1", line, "exiting"])
    assert found is not None and found[0] == line


@pytest.mark.parametrize("line", NOT_NCCL)
def test_other_lines_are_not_nccl(line: str) -> None:
    assert nccl.signature([line]) is None


ROOT_CAUSE = """\
[rank0]: step 1
[rank1]: step 1
[rank1]: [rank1]: Traceback (most recent call last):
[rank1]: [rank1]: ValueError: bad batch
[rank0]: RuntimeError: Connection closed by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
t.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 12)
  error_file: <N/A>
============================================================
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.log"
    path.write_text(text)
    return str(path)


def test_root_cause_names_the_rank_its_code_and_last_error(tmp_path: Path) -> None:
    failure = gang.read_failure(write(tmp_path, ROOT_CAUSE.format(code=3)), 1, gang=True)
    assert (failure.rank, failure.exit_code, failure.signal) == (1, 3, None)
    assert failure.error_line == "ValueError: bad batch"
    assert failure.infra is None  # rank 0's complaint about its peer does not count


def test_rank_killed_by_a_signal_is_infra(tmp_path: Path) -> None:
    failure = gang.read_failure(write(tmp_path, ROOT_CAUSE.format(code=-9)), 1, gang=True)
    assert (failure.rank, failure.exit_code, failure.signal) == (1, None, 9)
    assert failure.infra is not None and failure.infra.source == "nccl"
    assert "rank 1 was killed by SIGKILL" in failure.infra.what


def test_only_the_last_attempt_counts(tmp_path: Path) -> None:
    text = NCCL_LINES[5] + "\n[air] attempt 2 on GPUs [0]\nValueError: mine\n"
    failure = gang.read_failure(write(tmp_path, text), 1, gang=False)
    assert failure.infra is None and failure.exit_code == 1


def test_single_process_nccl_line_is_infra(tmp_path: Path) -> None:
    failure = gang.read_failure(write(tmp_path, "x\n" + NCCL_LINES[0] + "\n"), 1, gang=False)
    assert failure.infra is not None and failure.infra.source == "nccl"


def test_nccl_outcome_wording_and_retry_marker() -> None:
    infra = InfraFailure("NCCL reported an error: 'NCCL error in: x'", "nccl")
    out = classify(AttemptEnd("job-1", exit_code=1, infra=infra))
    assert out.action == "requeue" and out.kind == "infra"
    assert nccl.MARK in out.message and "deep preflight" in out.message
    events = [{"kind": "started", "message": ""}]
    events.append({"kind": "requeued-infra", "message": out.message})
    assert nccl.retry_after_nccl(events)
    assert not nccl.retry_after_nccl(events + [{"kind": "requeued-user", "message": "x"}])
    spent = classify(AttemptEnd("job-1", exit_code=1, infra=infra, infra_retries=3))
    assert spent.status == JobStatus.FAILED and spent.failure_kind == "infra"
    assert nccl.MARK in spent.message and "Next:" in spent.message


def test_gang_user_failure_message_names_rank() -> None:
    end = AttemptEnd("job-1", exit_code=3, rank=1, rank_error="ValueError: bad batch")
    out = classify(end)
    assert out.status == JobStatus.FAILED and out.exit_code == 3
    assert out.message.startswith("FAILED: the command's rank 1 exited with code 3")
    assert "'ValueError: bad batch'" in out.message


def test_torchrun_argv() -> None:
    argv = gang.torchrun_argv(["python3", "t.py", "--lr", "1"], 2, "/x", grace_s=2)
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"]
    assert "--standalone" in argv and argv[argv.index("--nproc-per-node") + 1] == "2"
    assert argv[-4:] == ["python3", "t.py", "--lr", "1"] and argv[-5] == "--no-python"
    # AIR_RENDEZVOUS_TIMEOUT_S (default 300) bounds both torchrun rendezvous kinds.
    assert argv[argv.index("--rdzv-conf") + 1] == "join_timeout=300,timeout=300"
    short = gang.torchrun_argv(["python3", "t.py"], 2, "/x", grace_s=2, rendezvous_s=4.2)
    assert short[short.index("--rdzv-conf") + 1] == "join_timeout=5,timeout=5"
    multi = gang.torchrun_argv(
        ["./train"], 4, "/x", grace_s=2, nnodes=2, node_rank=1, master_addr="10.0.0.1",
        master_port=29500,
    )  # fmt: skip
    assert "--standalone" not in multi and multi[1:3] == ["-m", "torch.distributed.run"]
    assert multi[multi.index("--node-rank") + 1] == "1"
    assert multi[multi.index("--master-addr") + 1] == "10.0.0.1"


def test_study_procs_per_trial_reaches_the_trial_spec() -> None:
    from types import SimpleNamespace

    from autoresearch.loop.trials import trial_spec
    from autoresearch.study.study import Study

    base = {
        "name": "s",
        "command": ["python", "t.py"],
        "search_space": {"lr": {"type": "float", "low": 0.1, "high": 1.0}},
        "objective": {"metric": "loss", "direction": "minimize"},
    }
    study = Study.model_validate({**base, "procs_per_trial": 2})
    state = SimpleNamespace(study_id=1, parent_run_id=None)
    trial = SimpleNamespace(number=0, source="tpe", config={"lr": 0.5}, attempt=0)
    assert trial_spec(study, state, trial, gpus=0).procs == 2  # type: ignore[arg-type]
    for bad in ({"procs_per_trial": 0}, {"procs_per_trial": "gpu", "gpus_per_trial": 0}):
        with pytest.raises(ValueError, match="procs_per_trial"):
            Study.model_validate({**base, **bad})


def test_ray_gang_log_lines_are_infra_and_say_whether_a_retry_may_place_it(
    tmp_path: Path,
) -> None:
    from air_skills.backends.ray import gang_driver, gangs

    died = "(driver) [air] node died: node 1 (127.0.0.1): ActorDiedError: the node died\n"
    infra, placeable = gangs.log_infra(write(tmp_path, "[rank0]: step 1\n" + died), 2)
    assert "a node of the 2-node gang died (node 1" in infra.what and infra.source == "ray"
    assert placeable  # the reconciler checks the cluster's fit before the retry
    plan = {"rendezvous_s": 30.0}
    line = gang_driver.never_joined([0, 2], 4, plan)
    assert line == (
        "[air] not joined: rendezvous timed out after 30 s: node ranks 0, 2 joined;"
        " node ranks 1, 3 never joined"
    )
    infra, placeable = gangs.log_infra(write(tmp_path, line + "\n"), 4)
    assert infra.what.startswith("rendezvous timed out after 30 s: node ranks 0, 2 joined")
    assert not placeable
    assert "no node joined; node rank 0 never joined" in gang_driver.never_joined([], 1, plan)
