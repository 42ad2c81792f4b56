"""The tools' plain functions, called directly on a real Client: no MCP in these tests."""

from __future__ import annotations

import sys

import pytest

from air_skills import Client, JobStatus
from air_skills.errors import InvalidInput, InvalidState, NotFound
from mcp_server import tools
from mcp_server.schemas import JobReply
from mcp_server.wording import error_text

PY = sys.executable


def quick(client: Client, code: str = "print('hi')", **kw: object) -> str:
    reply = tools.launch_job(client, [PY, "-c", code], gpus=1, track=False, **kw)  # type: ignore[arg-type]
    return reply.job_id


def finished(client: Client, job_id: str) -> JobReply:
    reply = tools.wait_for_jobs(client, [job_id], timeout_s=60)
    assert reply.done, reply
    return reply.jobs[0]


def test_launch_get_list_and_a_failed_run_is_data(client: Client) -> None:
    ok = quick(client, name="good")
    bad = quick(client, "import sys; print('Traceback: boom'); sys.exit(3)", name="bad")
    assert finished(client, ok).status == JobStatus.SUCCEEDED
    failed = finished(client, bad)
    assert failed.status == JobStatus.FAILED and failed.failure_kind == "user"
    assert failed.exit_code == 3 and "Traceback: boom" in (failed.log_tail or "")
    again = tools.get_job(client, bad)  # not an error: data, with why and the tail
    assert again.status == JobStatus.FAILED and again.log_tail and again.message
    assert "`air " not in again.message  # speaks tools, not CLI
    page = tools.list_jobs(client, limit=1)
    assert [j.job_id for j in page.items] == [bad] and page.next_cursor
    rest = tools.list_jobs(client, limit=1, cursor=page.next_cursor)
    assert [j.job_id for j in rest.items] == [ok]
    assert [j.job_id for j in tools.list_jobs(client, status="FAILED").items] == [bad]


def test_dry_run_launches_nothing(client: Client) -> None:
    reply = tools.launch_job(client, [PY, "-c", "print(1)"], gpus=2, dry_run=True)
    assert reply.job_id == "dry-run" and "DRY RUN" in reply.message
    assert tools.list_jobs(client).items == []


def test_idempotency_key_returns_the_same_job(client: Client) -> None:
    a = tools.launch_job(client, [PY, "-c", "print(1)"], track=False, idempotency_key="k-1")
    b = tools.launch_job(client, [PY, "-c", "print(1)"], track=False, idempotency_key="k-1")
    assert a.job_id == b.job_id
    assert len(tools.list_jobs(client).items) == 1


def test_shell_metacharacters_are_passed_literally(client: Client, tmp_path) -> None:
    evil = f"; touch {tmp_path}/pwned && echo $HOME | cat `id` > {tmp_path}/x"
    reply = tools.launch_job(
        client, [PY, "-c", "import sys; print('ARG=' + sys.argv[1])", evil], track=False
    )
    assert finished(client, reply.job_id).status == JobStatus.SUCCEEDED
    assert f"ARG={evil}" in tools.get_logs(client, reply.job_id).text
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "x").exists()


def test_logs_page_with_tail_offset_and_a_byte_cap(client: Client) -> None:
    code = "for i in range(2000): print(f'line {i:04d} ' + 'x' * 40)"
    job = quick(client, code)
    finished(client, job)
    size = tools.get_logs(client, job, tail=1).size
    assert size == 2000 * 51
    last = tools.get_logs(client, job, tail=3)
    assert last.text.splitlines()[0].startswith("line 1997") and last.truncated
    assert "offset=" in (last.more or "")
    capped = tools.get_logs(client, job, tail=2000, max_bytes=1000)
    assert len(capped.text.encode()) <= 1000 and capped.text.endswith(
        "line 1999 " + "x" * 40 + "\n"
    )
    assert capped.text.startswith("line ")  # cut at a line start
    assert capped.next_offset == size and capped.offset == size - len(capped.text.encode())
    # read the whole log in pages of 8000 bytes: nothing lost, nothing repeated
    text, offset = "", 0
    while True:
        page = tools.get_logs(client, job, offset=offset, max_bytes=8000)
        text += page.text
        if page.next_offset >= page.size:
            assert page.more is None
            break
        assert page.more == f"more output: call get_logs with offset={page.next_offset}"
        offset = page.next_offset
    assert text.splitlines() == [f"line {i:04d} " + "x" * 40 for i in range(2000)]


def test_logs_never_split_a_character(client: Client) -> None:
    job = quick(client, "print('é' * 3000)")
    finished(client, job)
    page = tools.get_logs(client, job, offset=0, max_bytes=1001)
    assert "\ufffd" not in page.text and page.next_offset - page.offset == len(page.text.encode())


def test_cancel_is_idempotent_but_refuses_a_finished_job(client: Client) -> None:
    sleeper = quick(client, "import time; time.sleep(120)")
    tools.wait_for_jobs(client, [sleeper], timeout_s=0)
    cancelled = tools.cancel_job(client, sleeper, reason="test")
    assert cancelled.status == JobStatus.CANCELLED
    assert tools.cancel_job(client, sleeper).status == JobStatus.CANCELLED  # again: same answer
    done = quick(client)
    finished(client, done)
    with pytest.raises(InvalidState) as err:
        tools.cancel_job(client, done)
    assert "get_job" in err.value.hint


@pytest.mark.parametrize(
    "job_id", ["job-0000000000", "../../etc/passwd", "job-\x00", "x" * 100_000]
)
def test_unknown_and_path_like_job_ids_are_not_found(client: Client, job_id: str) -> None:
    for call in (tools.get_job, tools.get_logs, tools.cancel_job, tools.get_metrics):
        with pytest.raises(NotFound) as err:
            call(client, job_id)
        text = error_text(err.value)
        assert text.startswith("[not-found] ") and "list_jobs" in text and len(text) < 1000


def test_bad_specs_are_refused_with_every_problem(client: Client) -> None:
    with pytest.raises(InvalidInput) as err:
        tools.launch_job(client, ["echo", "a\x00b"], env={"A=B": "1"})
    assert err.value.code == "invalid-spec"
    assert "NUL" in err.value.message and "environment" in err.value.message
    with pytest.raises(InvalidInput) as err:
        tools.launch_job(client, [PY, "-c", "1"], gpus=5)
    assert err.value.code == "insufficient-gpus"
    with pytest.raises(InvalidInput):
        tools.launch_job(client, [PY], config={"blob": "x" * 2_000_000})


def test_gpus_and_wait_timeout(client: Client) -> None:
    gpus = tools.list_gpus(client).gpus
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    sleeper = quick(client, "import time; time.sleep(120)")
    seen: list[tuple[int, int, str]] = []
    reply = tools.wait_for_jobs(
        client, [sleeper], timeout_s=0.3, on_progress=lambda *a: seen.append(a)
    )
    assert reply.timed_out and not reply.done and seen and seen[0][:2] == (0, 1)
    assert sleeper in tools.list_gpus(client).gpus[reply.jobs[0].gpus[0]].job_ids
    tools.cancel_job(client, sleeper)


def test_study_tools_need_exactly_one_source(client: Client) -> None:
    with pytest.raises(InvalidInput):
        tools.start_study(client)
    with pytest.raises(InvalidInput):
        tools.start_study(client, study_file="a.yaml", study={"name": "x"})


def test_a_stopped_wait_ends_its_thread(client: Client) -> None:
    """The server sets `stop` when the caller goes away: the waiting thread must not linger."""
    import threading

    from helpers import wait_until

    sleeper = quick(client, "import time; time.sleep(120)")
    stop = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            tools.wait_for_jobs(client, [sleeper], timeout_s=120, stop=stop)
        except Exception as exc:  # recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    stop.set()
    wait_until(lambda: not thread.is_alive(), timeout_s=10)
    assert isinstance(outcome[0], tools.WaitAborted)
    tools.cancel_job(client, sleeper)


def test_metrics_of_an_untracked_job_point_to_the_log(client: Client) -> None:
    job = quick(client, "print('---'); print('loss: 1.5')")
    finished(client, job)
    with pytest.raises(NotFound) as err:
        tools.get_metrics(client, job)
    assert "MLflow run" in err.value.message and "get_logs" in err.value.hint
