"""The results index (runtime/store/results_index.py): every job ranked, the index equal to
MLflow (the record) for jobs that succeeded, failed, diverged, were retried, or whose end a
kill cut short; `air doctor --rebuild` rebuilds it from MLflow."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pytest

from air_skills.models import JobSpec
from air_skills.runtime.store import results_index
from air_skills.runtime.store.results_index import MetricResult, Where, summarize
from air_skills.runtime.store.store import Store, new_job_id
from air_skills.status import JobStatus

PY = sys.executable

# A script that logs a metric curve into its job's MLflow run: CURVE is a comma-separated list
# of values (nan and inf allowed), one per step; EXIT its exit code.
LOGGER = """
import json, os, sys
import mlflow
cfg = json.load(open(os.environ["AIR_CONFIG_FILE"]))
with mlflow.start_run():
    for step, v in enumerate(cfg["curve"]):
        mlflow.log_metric("loss", float(v), step=step)
    mlflow.log_metric("acc", 0.5, step=0)
if cfg.get("hold"):  # logged: it waits to be cancelled
    open(os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "logged"), "w").close()
    __import__("time").sleep(120)
marker = os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "tried")
if cfg.get("fail_once") and not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit(3)
sys.exit(cfg.get("exit", 0))
"""


def _fill(store: Store, n: int, value_of, *, experiment: str = "lb", **spec: object) -> list[str]:
    """``n`` finished jobs, oldest first, whose ``loss`` curve ends at ``value_of(i)``: each
    recorded as a launch records it and indexed through the write a job's end uses."""
    ids = []
    data = JobSpec(command=["true"], experiment=experiment, **spec).model_dump(mode="json")  # type: ignore[arg-type]
    for i in range(n):
        job_id = new_job_id()
        jdir = store.home / "jobs" / job_id
        jdir.mkdir(parents=True)
        run_id = os.urandom(16).hex()
        cfg = {**data, "config": {"seed": i % 3, "i": i}}
        store.queue(
            cfg,
            job_id,
            str(jdir / "output.log"),
            f"j{i}",
            run_id=run_id,
            project="default",
            jdir=jdir,
        )
        with store.tx() as c:
            store.mark_running(c, job_id, [], 1, False)
            store.finish(job_id, JobStatus.SUCCEEDED, message="SUCCEEDED", exit_code=0, c=c)
        v = value_of(i)
        points = [(0, v + 1.0, 1), (1, v, 2), (2, v + 0.5, 3)]  # best at step 1, final at 2
        results_index.write(store, job_id, [summarize("loss", points)], final=True)  # type: ignore[list-item]
        ids.append(job_id)
    return ids


def test_summarize_keeps_non_finite_out_of_the_best() -> None:
    r = summarize("loss", [(0, 2.0, 1), (1, float("nan"), 2), (2, 1.0, 3), (3, float("inf"), 4)])
    assert r is not None
    assert (r.low, r.low_step, r.high, r.high_step, r.points) == (1.0, 2, 2.0, 0, 4)
    assert math.isinf(r.final) and not r.finite and r.final_step == 3
    assert r.score("minimize")["best"] == 1.0
    assert summarize("loss", [(0, 1.7976931348623157e308, 1)]).best("minimize") is None  # type: ignore[union-attr]
    assert summarize("loss", []) is None


def test_leaderboard_finds_the_oldest_of_1500(client) -> None:
    """The best of 1,500 finished jobs is the oldest: the leaderboard (any page size, either
    direction, best or latest) finds it, and paging walks every job exactly once."""
    store = client.store
    ids = _fill(store, 1500, lambda i: 0.001 if i == 0 else 1.0 + i / 1000)
    page = client.list(metric="loss", order_by="best", limit=10)
    assert page.items[0].job_id == ids[0] and page.total == 1500
    assert [i.job_id for i in page.items[1:4]] == ids[1:4]  # then the next lowest
    latest = client.list(metric="loss", order_by="latest", limit=1)
    assert latest.items[0].job_id == ids[0]  # its final value (0.501) is the lowest too
    top = client.list(metric="loss", order_by="best", direction="maximize", limit=1)
    assert top.items[0].job_id == ids[-1]
    seen, cursor = [], None
    while True:
        p = client.list(metric="loss", order_by="best", limit=400, cursor=cursor)
        seen += [i.job_id for i in p.items]
        cursor = p.next_cursor
        if cursor is None:
            break
    assert len(seen) == 1500 and set(seen) == set(ids)
    # A filter matching more than results_index.FEW jobs walks the ranking, one matching
    # fewer ranks its own jobs: the same order either way.
    broad = client.list(metric="loss", order_by="best", experiment="lb", limit=5)
    narrow = client.list(metric="loss", order_by="best", config={"seed": 0}, limit=5)
    assert [i.job_id for i in broad.items] == ids[:5] and broad.total == 1500
    assert [i.job_id for i in narrow.items] == ids[0:15:3] and narrow.total == 500
    # The scores the MCP tools and seed groups read come from the same rows.
    score = client.scores([ids[0]], "loss")[ids[0]]
    assert (score["best"], score["best_step"], score["latest"], score["step"]) == (
        0.001,
        1,
        0.501,
        2,
    )


def test_leaderboard_filters(client) -> None:
    store = client.store
    a = _fill(store, 30, lambda i: 1.0 + i)
    b = _fill(store, 5, lambda i: 0.5 + i, experiment="other")
    # a job of experiment lb without the metric comes last, after every ranked one
    bare = _fill(store, 1, lambda i: 0.0)
    store.conn.execute("DELETE FROM results WHERE job_id=?", (bare[0],))
    page = client.list(metric="loss", order_by="best", experiment="lb", limit=100)
    assert [i.job_id for i in page.items] == a + bare and page.total == 31
    assert client.list(metric="loss", order_by="best", limit=1).items[0].job_id == b[0]
    by_config = client.list(metric="loss", order_by="best", config={"seed": 1}, limit=100)
    seed_1 = [j for i, j in enumerate(a) if i % 3 == 1] + [j for i, j in enumerate(b) if i % 3 == 1]
    assert {i.job_id for i in by_config.items} == set(seed_1)
    assert client.list(metric="loss", order_by="best", study="nope", limit=5).items == []
    where = Where(experiment="other", status="SUCCEEDED")
    board = results_index.leaderboard(store, "loss", "best", "minimize", where, limit=2)
    assert [r.job_id for r, _ in board.rows] == b[:2] and board.ranked is None  # not counted
    board = results_index.leaderboard(store, "loss", "best", "minimize", where, limit=10)
    assert [r.job_id for r, _ in board.rows] == b and board.ranked == 5 and board.total == 5
    tail = results_index.leaderboard(
        store, "loss", "best", "minimize", Where(experiment="lb"), 5, 30
    )
    assert [r.job_id for r, _ in tail.rows] == bare and tail.ranked == 30  # counted: past them
    assert isinstance(board.rows[0][1], MetricResult)


def test_a_narrow_filter_ranks_ties_and_pages_as_the_whole_board(client) -> None:
    """One identity's jobs among many (fewer than results_index.FEW match): ranked from its
    own rows, ties in the order of the whole board (oldest first when minimising, newest
    first when maximising), paged by cursor; the jobs without the metric last."""
    store = client.store
    _fill(store, 40, lambda i: 1.0 + i % 4)  # others' jobs, interleaved
    mine = _fill(store, 9, lambda i: float(i % 3))  # values 0,1,2,0,1,2,...: ties
    with store.tx() as c:
        c.executemany("UPDATE jobs SET launched_by='ann' WHERE job_id=?", [(j,) for j in mine])
    whole = client.list(metric="loss", order_by="best", limit=1000)
    want = [i.job_id for i in whole.items if i.job_id in mine]
    assert want == [mine[i] for i in (0, 3, 6, 1, 4, 7, 2, 5, 8)]
    seen, cursor = [], None
    while True:
        p = client.list(metric="loss", order_by="best", launched_by="ann", limit=4, cursor=cursor)
        seen += [i.job_id for i in p.items]
        assert p.total == 9
        cursor = p.next_cursor
        if cursor is None:
            break
    assert seen == want
    top = client.list(metric="loss", order_by="best", direction="maximize", launched_by="ann")
    assert [i.job_id for i in top.items] == [mine[i] for i in (8, 5, 2, 7, 4, 1, 6, 3, 0)]


def _mlflow_summary(client, run_id: str) -> dict[str, MetricResult]:
    """What MLflow, the record, holds for a run, summarised by the same rule."""
    mc = client.tracker.client
    out = {}
    for key in mc.get_run(run_id).data.metrics:
        hist = sorted(mc.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        out[key] = summarize(key, [(m.step, m.value, m.timestamp) for m in hist])
    return out


def _index_summary(store: Store, job_id: str) -> dict[str, MetricResult]:
    out = {}
    for key in ("loss", "acc"):
        found = results_index.read(store, [job_id], key)
        if job_id in found:
            out[key] = found[job_id]
    return out


def _same(a: dict[str, MetricResult], b: dict[str, MetricResult]) -> bool:
    def norm(r: MetricResult) -> tuple:
        final = "nan" if math.isnan(r.final) else r.final
        return (r.key, final, r.final_step, r.points, r.low, r.low_step, r.high, r.high_step)

    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


def _wait_ended(client, job_ids: list[str], timeout_s: float = 240) -> None:
    infos = client.wait(job_ids, timeout_s=timeout_s, any=False)
    assert all(i.status.is_terminal() for i in infos), [(i.job_id, i.status) for i in infos]


def _wait_indexed(store, job_ids: list[str], timeout_s: float = 240) -> None:
    """Until the ended jobs' own ends wrote their rows: a cancelled job's come from the home's
    tracking writer, after its run's end, just after the job's record."""
    deadline = time.monotonic() + timeout_s
    while any(store.row(j).results_at is None for j in job_ids):
        assert time.monotonic() < deadline, "an ended job's rows were never written"
        time.sleep(0.05)


def _launch(client, tmp_path: Path, config: dict, **spec: object) -> str:
    script = tmp_path / "logger.py"
    script.write_text(LOGGER)
    info = client.launch(
        {
            "command": [PY, str(script)],
            "workdir": str(tmp_path),
            "gpus": 0,
            "config": config,
            "sandbox": "off",  # what is tested is the index, not the sandbox
            **spec,
        }
    )
    return info.job_id


def test_index_equals_mlflow_for_every_kind_of_end(client, tmp_path: Path) -> None:
    """Succeeded, failed, diverged (nan then inf) and retried jobs: the index's rows, written by
    each job's own end, equal MLflow's histories summarised; `air doctor --rebuild`'s rebuild
    gives the same rows again."""
    jobs = {
        "ok": _launch(client, tmp_path, {"curve": [3, 1, 2]}),
        "failed": _launch(client, tmp_path, {"curve": [5, 4], "exit": 1}),
        "diverged": _launch(client, tmp_path, {"curve": [2, 1, "nan", "inf"]}),
        "retried": _launch(client, tmp_path, {"curve": [9, 8], "fail_once": True}, max_retries=1),
    }
    _wait_ended(client, list(jobs.values()))
    store = client.store
    for kind, job_id in jobs.items():
        row = store.row(job_id)
        assert row is not None and row.results_at is not None, kind  # written by the end
        assert _same(_index_summary(store, job_id), _mlflow_summary(client, row.run_id)), kind
    assert store.row(jobs["failed"]).status == "FAILED"  # type: ignore[union-attr]
    assert store.row(jobs["retried"]).status == "SUCCEEDED"  # type: ignore[union-attr]
    assert results_index.read(store, [jobs["retried"]], "loss")[jobs["retried"]].points == 4
    diverged = client.scores([jobs["diverged"]], "loss")[jobs["diverged"]]
    assert diverged["finite"] is False and diverged["best"] == 1.0
    board = client.list(metric="loss", order_by="latest", limit=10)
    assert board.items[-1].job_id == jobs["diverged"]  # a non-finite latest ranks last
    before = {j: _index_summary(store, j) for j in jobs.values()}
    result = type(client).rebuild(client.home)
    assert result["results_index"]["indexed"] == len(jobs)
    assert {j: _index_summary(store, j) for j in jobs.values()} == before


def test_a_kill_in_the_middle_of_a_jobs_end(client, tmp_path: Path, monkeypatch) -> None:
    """The supervisor is killed (SIGKILL) after the job's MLflow run ended, before the index
    was written (MLflow in the supervisor: AIR_TRACKING_WRITER=off, where the run ends before
    the record): the next read catches up from MLflow, and the two agree."""
    monkeypatch.setenv("AIR_TRACKING_WRITER", "off")
    monkeypatch.setenv("AIR_TEST_CRASH_AT", "end:run-ended")
    job_id = _launch(client, tmp_path, {"curve": [4, 2, 3]})
    store = client.store
    deadline = time.monotonic() + 240
    while True:  # the supervisor dies at the named point, the record still RUNNING
        row = store.row(job_id)
        assert row is not None
        pid = row.supervisor_pid
        if row.status == "RUNNING" and pid and not os.path.exists(f"/proc/{pid}"):
            break
        if row.status != "RUNNING" and row.status != "QUEUED":
            pytest.fail(f"the job ended without the kill: {row.status}")
        assert time.monotonic() < deadline, "the supervisor never reached the crash point"
        time.sleep(0.05)
    assert row.results_at is None
    monkeypatch.delenv("AIR_TEST_CRASH_AT")
    board = client.list(metric="loss", order_by="best", limit=5)  # reconciles, then catches up
    _wait_ended(client, [job_id])
    board = client.list(metric="loss", order_by="best", limit=5)
    assert [i.job_id for i in board.items] == [job_id]
    row = store.row(job_id)
    assert row is not None and row.results_at is not None
    assert _same(_index_summary(store, job_id), _mlflow_summary(client, str(row.run_id)))


def test_a_kill_after_the_record_before_the_runs_end(client, tmp_path: Path, monkeypatch) -> None:
    """A cancelled job's record comes first and its run's end (with the index's final rows) is
    queued for the home's tracking writer before it: a supervisor killed (SIGKILL) right after
    the record, before it waits for that end, leaves a CANCELLED record whose run the writer
    still ends KILLED, and the index equal to MLflow."""
    monkeypatch.setenv("AIR_TEST_CRASH_AT", "end:recorded")
    job_id = _launch(client, tmp_path, {"curve": [4, 2, 3], "hold": True})
    store = client.store
    deadline = time.monotonic() + 240
    from air_skills.home import job_dir

    while not (job_dir(client.home, job_id) / "checkpoints" / "logged").exists():
        row = store.row(job_id)
        assert row is not None and row.status in ("QUEUED", "RUNNING"), row
        assert time.monotonic() < deadline, "the job never logged its metrics"
        time.sleep(0.05)
    sup = store.row(job_id).supervisor_pid  # type: ignore[union-attr]
    info = client.cancel(job_id, wait_s=0)  # the record only: the supervisor dies after it
    while not (info.status.is_terminal() and sup and not os.path.exists(f"/proc/{sup}")):
        assert time.monotonic() < deadline, "the supervisor never reached the crash point"
        time.sleep(0.05)
        info = client.get(job_id)
    monkeypatch.delenv("AIR_TEST_CRASH_AT")
    assert info.status.value == "CANCELLED", info.message
    while client.tracker.client.get_run(str(info.run_id)).info.status != "KILLED":
        assert time.monotonic() < deadline, "the queued end was never applied"
        time.sleep(0.05)
    _wait_indexed(store, [job_id])  # written by the writer after the run's end
    board = client.list(metric="loss", order_by="best", limit=5)
    assert [i.job_id for i in board.items] == [job_id]
    assert _same(_index_summary(store, job_id), _mlflow_summary(client, str(info.run_id)))


def test_cli_leaderboard_fast_and_typer_agree(client) -> None:
    """`air ls --json --metric M --best` from a fresh process (cli/fast, no typer) prints what
    the typer command prints: every job ranked, each with its score."""
    import json
    import subprocess

    from typer.testing import CliRunner

    from air_skills.cli.app import app

    ids = _fill(client.store, 30, lambda i: 5.0 - i / 10)
    for args in (
        ["ls", "--json", "--metric", "loss", "--best", "--limit", "5"],
        ["ls", "--metric", "loss", "--latest", "--maximize", "--json"],
    ):
        fast = subprocess.run(
            [str(Path(PY).parent / "air"), *args], capture_output=True, text=True, timeout=120
        )
        assert fast.returncode == 0, fast.stderr
        typer_out = CliRunner().invoke(app, args)
        assert typer_out.exit_code == 0, typer_out.stderr
        assert fast.stdout == typer_out.stdout
    best = json.loads(
        subprocess.run(
            [str(Path(PY).parent / "air"), "ls", "--json", "--metric", "loss", "--best"],
            capture_output=True, text=True, timeout=120,
        ).stdout
    )  # fmt: skip
    assert best[0]["job_id"] == ids[-1] and best[0]["score"]["best"] == pytest.approx(2.1)
