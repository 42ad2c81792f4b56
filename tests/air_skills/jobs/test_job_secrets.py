"""Issue 37.5: a job never receives its launcher's secrets (AIR_MCP_TOKEN, API keys, cloud
credentials), sandboxed or not; it gets job_env.py's allow-list, air's variables and its own
spec's ``env``. The job itself dumps what it sees, and what it can read in its folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import job_env, sandbox

PY = sys.executable
SECRETS = {
    "AIR_MCP_TOKEN": "owner-token-5f1e9c",
    "ANTHROPIC_API_KEY": "sk-ant-api03-secret-7d2a",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0b4c",
    "HF_TOKEN": "hf_secret_93aa",
    "PGPASSWORD": "pg-secret-11",
}
# What the job sees: its environment, and its folder's env.json (read-only, when readable).
DUMP = r"""
import json, os
folder = os.path.dirname(os.environ["AIR_CHECKPOINT_DIR"])
try:  # read-only in its folder; unreadable where the job runs as another uid (air as root)
    saved = open(os.path.join(folder, "env.json")).read()
except PermissionError:
    saved = "unreadable"
out = {"env": dict(os.environ), "saved": saved}
json.dump(out, open(os.path.join(os.environ["AIR_CHECKPOINT_DIR"], "seen.json"), "w"))
"""


@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_job_never_receives_the_launchers_secrets(
    client: Client, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    if mode == "on" and sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # an ML switch: passed
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-secret-42@proxy:3128")  # carries one
    spec = JobSpec(
        command=[PY, "-c", DUMP],
        sandbox=mode,
        track=False,
        env={"WANDB_API_KEY": "given-by-the-spec"},  # a key the spec names: the job's own
    )
    info = client.launch(spec)
    assert client.wait([info.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    jdir = Path(client.store.row(info.job_id).log_path).parent
    seen = json.loads((jdir / "checkpoints" / "seen.json").read_text())
    text = json.dumps(seen)
    for name, value in SECRETS.items():
        assert name not in seen["env"] and value not in text, name
    assert "proxy-secret-42" not in text
    assert seen["env"]["HF_HUB_OFFLINE"] == "1"
    assert seen["env"]["WANDB_API_KEY"] == "given-by-the-spec"
    assert seen["env"]["AIR_JOB_ID"] == info.job_id


def test_the_allow_list_passes_what_ml_code_needs_and_no_secret() -> None:
    launched = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LC_ALL": "C.UTF-8",
        "TORCH_HOME": "/cache/torch",
        "NCCL_SOCKET_IFNAME": "eth0",
        "CUDA_CACHE_PATH": "/cache/cuda",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
        "MLFLOW_TRACKING_PASSWORD": "mlflow-secret",
        "NCCL_AUTH_KEY": "nccl-secret",
        "OPENAI_API_KEY": "sk-secret",
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/gcp.json",
        "AIR_MCP_TOKEN": "owner",
        "AIR_DATA_ROOTS": "/data",
        "SOMETHING_ELSE": "not listed",
    }
    got = job_env.job_environment(launched)
    assert set(got) == {
        "PATH",
        "HOME",
        "LC_ALL",
        "TORCH_HOME",
        "NCCL_SOCKET_IFNAME",
        "CUDA_CACHE_PATH",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
    }
    # a job that logs to a tracking server itself gets MLflow's credentials, and only those
    direct = job_env.job_environment(launched, direct_tracking=True)
    assert set(direct) - set(got) == {"MLFLOW_TRACKING_PASSWORD"}
    kept = job_env.launch_environment(launched)  # what env.json holds: settings, no secret
    assert kept["AIR_DATA_ROOTS"] == "/data" and "AIR_MCP_TOKEN" not in kept
    assert "OPENAI_API_KEY" not in kept and "AIR_MCP_TOKEN" not in job_env.PASSTHROUGH_AIR_SETTINGS
