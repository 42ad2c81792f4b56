"""MLflow tracking of jobs, with a real sqlite store and a real `mlflow server`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.errors import NotFound, UnknownMetric
from air_skills.runtime.results.summary_block import parse_summary
from air_skills.tracking.mlflow import downsample

PY = sys.executable

STEP_LOGGER = """
import mlflow
with mlflow.start_run():
    for step in range(50):
        mlflow.log_metric("val_loss", 2.0 / (step + 1), step=step)
        mlflow.log_metric("lr", 0.1, step=step)
print("---")
print("val_loss: 0.04")
print("tokens: 12345")
"""


def launch_and_wait(client: Client, command: list[str], **kw: object):
    info = client.launch(JobSpec(command=command, **kw))  # type: ignore[arg-type]
    infos = client.wait([info.job_id], timeout_s=120)
    assert infos[0].status.is_terminal(), infos[0]
    return infos[0]


def mlflow_run(client: Client, run_id: str):
    return client.tracker.client.get_run(run_id)


@pytest.mark.slow
def test_job_logs_per_step_metrics_and_history_reads_back(client: Client) -> None:
    info = launch_and_wait(
        client,
        [PY, "-c", STEP_LOGGER],
        config={"lr": 0.1, "model": {"depth": 2}},
        experiment="exp-a",
        tags={"team": "x"},
    )
    assert info.status == JobStatus.SUCCEEDED, client.logs(info.job_id).text
    run = mlflow_run(client, info.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["air.job_id"] == info.job_id and run.data.tags["team"] == "x"
    assert run.data.params == {"lr": "0.1", "model.depth": "2"}
    m = client.metrics(info.job_id, keys=["val_loss"], history=True, max_points=10)
    assert m.latest["val_loss"] == pytest.approx(2.0 / 50)
    points = m.history["val_loss"]
    assert len(points) <= 10 and points[0] == [0.0, 2.0] and points[-1][0] == 49
    # The script logged val_loss itself: the summary value does not overwrite it;
    # "tokens" only came from the summary block.
    assert m.latest["tokens"] == 12345


@pytest.mark.slow
def test_summary_only_job(client: Client) -> None:
    code = "print('training...'); print('---'); print('val_loss: 1.5'); print('note: fast')"
    info = launch_and_wait(client, [PY, "-c", code])
    assert info.status == JobStatus.SUCCEEDED
    assert client.metrics(info.job_id).latest == {"val_loss": 1.5}
    assert "not numeric" in info.message and "note" in info.message


@pytest.mark.slow
def test_failed_job_run_failed(client: Client) -> None:
    info = launch_and_wait(client, [PY, "-c", "raise SystemExit(2)"])
    assert mlflow_run(client, info.run_id).info.status == "FAILED"


@pytest.mark.slow
def test_cancelled_job_run_killed(client: Client) -> None:
    info = client.launch(
        JobSpec(command=[PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    )
    wait_until(lambda: "up" in client.logs(info.job_id).text)
    info = client.cancel(info.job_id)
    assert info.status == JobStatus.CANCELLED
    assert mlflow_run(client, info.run_id).info.status == "KILLED"


@pytest.mark.slow
def test_unknown_metric_lists_known_keys(client: Client) -> None:
    info = launch_and_wait(client, [PY, "-c", "print('---'); print('acc: 0.9')"])
    with pytest.raises(UnknownMetric) as exc:
        client.metrics(info.job_id, keys=["val_loss"], history=True)
    assert "acc" in exc.value.hint and exc.value.context["valid_keys"] == ["acc"]


def test_job_without_run(client: Client) -> None:
    info = launch_and_wait(client, [PY, "-c", "pass"], track=False)
    with pytest.raises(NotFound, match="no MLflow run"):
        client.metrics(info.job_id)


@pytest.mark.slow
def test_concurrent_launches_into_new_experiment(air_home: Path) -> None:
    code = (
        "import sys; from air_skills import Client, JobSpec\n"
        "print(Client().launch(JobSpec(command=['true'], experiment='brand-new')).run_id)\n"
    )
    procs = [
        subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-500:] for o in outs]
    client = Client(air_home)
    exps = client.tracker.client.search_experiments(filter_string="name = 'brand-new'")
    assert len(exps) == 1
    runs = client.tracker.client.search_runs([exps[0].experiment_id])
    assert len(runs) == 8 and {o[0].decode().strip() for o in outs} == {r.info.run_id for r in runs}


def test_tracking_server_down_job_still_runs(client: Client, monkeypatch) -> None:
    port = free_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    client = Client(client.home)
    info = client.launch(JobSpec(command=[PY, "-c", "print('ran')"]))
    assert "tracking unavailable" in info.message and info.run_id is None
    info = client.wait([info.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED and "ran" in client.logs(info.job_id).text


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root}/db.sqlite",
            "--default-artifact-root",
            str(root / "artifacts"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return True
        except OSError:
            assert proc.poll() is None, "mlflow server exited"
            return False

    try:
        wait_until(healthy, timeout_s=120, every_s=0.3)
        yield url
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_http_tracking_server(client: Client, mlflow_server: str, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    client = Client(client.home)
    info = launch_and_wait(client, [PY, "-c", STEP_LOGGER])
    assert info.status == JobStatus.SUCCEEDED, client.logs(info.job_id).text
    assert client.tracker.uri == mlflow_server
    assert client.metrics(info.job_id).latest["val_loss"] == pytest.approx(0.04)


def test_http_tracking_server_run_made_over_rest(
    client: Client, mlflow_server: str, monkeypatch
) -> None:
    """As the CLI launches: the run is made over REST (no MLflow import), the supervisor
    completes it, and the job's first metric lands in it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    client = Client(client.home)
    client.runtime.make_runs_here = False
    launched = client.launch(
        JobSpec(command=[PY, "-c", STEP_LOGGER], config={"lr": 0.1}, tags={"team": "z"})
    )
    assert launched.run_id  # known at launch
    info = client.wait([launched.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED, client.logs(info.job_id).text
    run = mlflow_run(client, launched.run_id)
    assert run.data.params == {"lr": "0.1"} and run.data.tags["team"] == "z"
    assert run.data.tags["air.job_id"] == info.job_id and run.info.status == "FINISHED"
    history = client.metrics(info.job_id, keys=["val_loss"], history=True).history["val_loss"]
    assert history[0] == [0.0, 2.0]  # the first metric is in the run


def test_tracking_server_down_cli_launch_still_runs(client: Client, monkeypatch) -> None:
    port = free_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    client = Client(client.home)
    client.runtime.make_runs_here = False
    info = client.launch(JobSpec(command=[PY, "-c", "print('ran')"]))
    assert "tracking unavailable" in info.message and info.run_id is None
    info = client.wait([info.job_id], timeout_s=120)[0]
    assert info.status == JobStatus.SUCCEEDED and "ran" in client.logs(info.job_id).text


# --- pure parts --------------------------------------------------------------------------------


def test_parse_summary_last_block_wins() -> None:
    text = "---\nold: 1\n...\n---\nval_loss: 0.5\nname: abc\nsteps: 10\n"
    assert parse_summary(text) == ({"val_loss": 0.5, "steps": 10.0}, ["name"])
    assert parse_summary("no block here") == ({}, [])


def test_downsample_keeps_first_last_min_max() -> None:
    points = [(i, float((i * 37) % 101), 0) for i in range(1000)]
    points[500] = (500, -5.0, 0)
    points[700] = (700, 999.0, 0)
    kept = downsample(points, 20)
    assert len(kept) <= 20
    steps = [p[0] for p in kept]
    assert {0, 999, 500, 700} <= set(steps) and steps == sorted(steps)


def test_compare_jobs(client: Client) -> None:
    code = (
        "import json, os; c = json.load(open(os.environ['AIR_CONFIG_FILE']));"
        " print('---'); print('val_loss:', c['lr'] * 10)"
    )
    a = launch_and_wait(client, [PY, "-c", code], config={"lr": 0.1, "depth": 2})
    b = launch_and_wait(client, [PY, "-c", code], config={"lr": 0.01, "depth": 2})
    table = client.compare([a.job_id, b.job_id], metric="val_loss")
    assert [row["job_id"] for row in table] == [a.job_id, b.job_id]
    assert table[0]["diff"] == {} and table[1]["diff"] == {"lr": 0.01}
    assert table[1]["latest"] == pytest.approx(0.1) and table[1]["best"] == pytest.approx(0.1)


@pytest.mark.slow
def test_air_ui_serves_the_run_to_its_token_only_and_ends_on_sigterm(client: Client) -> None:
    """Issue 37.16: jobs share loopback, so the UI needs the token printed in its URL, and a
    state change from another origin is refused; it listens on loopback only (37.14); SIGTERM
    ends it with nothing left serving (issue 38: its MLflow server outlived it)."""
    import re
    import signal
    import threading
    import urllib.error

    from listening import beyond_loopback, process_tree

    info = launch_and_wait(client, [PY, "-c", "print('---'); print('val_loss: 0.5')"])
    port = free_port()
    air = str(Path(PY).parent / "air")
    proc = subprocess.Popen(
        [air, "ui", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/api/2.0/mlflow/runs/get?run_id={info.run_id}"

    def call(url: str, method: str = "GET", **headers: str) -> tuple[int, bytes]:
        req = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def token() -> str | None:
        assert proc.poll() is None, "air ui exited"
        found = re.search(rf"http://127\.0\.0\.1:{port}/\?token=(\S+)", "".join(lines))
        return found.group(1) if found else None

    def served() -> bytes | None:
        try:
            status, body = call(url, Authorization=f"Bearer {secret}")
        except OSError:
            assert proc.poll() is None, "air ui exited"
            return None
        # the summary metric may land a moment after the job's end is recorded
        return body if status == 200 and b'"val_loss"' in body else None

    try:
        secret = wait_until(token, timeout_s=120, every_s=0.2)
        body = json.loads(wait_until(served, timeout_s=120, every_s=0.3))
        assert body["run"]["data"]["metrics"][0]["key"] == "val_loss"
        assert call(url)[0] == 401  # what a job on loopback gets
        assert call(url, Authorization="Bearer wrong")[0] == 401
        assert call(url + f"&token={secret}")[0] == 200  # the printed URL opens it
        delete = f"{base}/api/2.0/mlflow/runs/delete"
        evil = {"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}
        status, _ = call(delete, "POST", Authorization=f"Bearer {secret}", **evil)
        assert status == 403
        assert json.loads(served() or b"{}")["run"]["info"]["lifecycle_stage"] == "active"
        assert not beyond_loopback(process_tree(proc.pid))
        tree = process_tree(proc.pid)
        proc.send_signal(signal.SIGTERM)  # air's own pid, not its group
        proc.wait(timeout=60)
        with pytest.raises(OSError):
            call(url, Authorization=f"Bearer {secret}")
        assert not [p for p in tree if Path(f"/proc/{p}").exists()], "left running"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    printed = "".join(lines)
    assert "live study pages: autoresearch serve" in printed  # issue 27: the link to them
