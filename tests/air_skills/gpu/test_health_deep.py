"""The deep preflight: torch matmul against the CPU, an allocation, and an all-reduce.

On this CPU machine the simulated GPUs are checked on CPU with gloo, through the same code
as NCCL on real GPUs; simulated faults corrupt the matmul or hang a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from air_skills import Client, JobSpec, JobStatus
from air_skills.gpu import deep_check as preflight
from air_skills.gpu.deep_check import deep_check, deep_preflight_faults, faults_from_results

pytest.importorskip("torch")

AIR = str(Path(sys.executable).parent / "air")


@pytest.fixture
def faults(air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "faults.json"
    path.write_text("{}")
    monkeypatch.setenv("AIR_SIMULATED_GPU_FAULTS", str(path))
    return path


def by_name(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in results}


def test_two_gpus_pass_with_gloo(faults: Path) -> None:
    results = by_name(deep_check([0, 1]))
    assert sorted(results) == [
        "all-reduce gpus 0,1",
        "gpu 0 alloc",
        "gpu 0 matmul",
        "gpu 1 alloc",
        "gpu 1 matmul",
    ]
    assert all(r["status"] == "ok" for r in results.values()), results
    assert "matches the CPU" in results["gpu 1 matmul"]["detail"]
    assert results["all-reduce gpus 0,1"]["detail"].startswith("gloo, 2 ranks")
    assert results["all-reduce gpus 0,1"]["gpus"] == [0, 1]


def test_failed_checks_become_faults_on_their_gpus() -> None:
    results = [
        {"name": "gpu 0 matmul", "status": "ok", "detail": "", "gpu": 0, "check": "matmul"},
        {"name": "gpu 1 alloc", "status": "fail", "detail": "OOM", "gpu": 1, "check": "alloc"},
        {
            "name": "all-reduce",
            "status": "fail",
            "detail": "hung",
            "gpus": [2, 3],
            "check": "all-reduce",
        },
        {"name": "deep check", "status": "warn", "detail": "no torch"},
    ]
    faults = faults_from_results(results)
    assert [(f.index, f.kind, f.detail, f.critical) for f in faults] == [
        (1, "deep-preflight", "alloc: OOM", True),
        (2, "deep-preflight", "all-reduce: hung", True),
        (3, "deep-preflight", "all-reduce: hung", True),
    ]


def test_hung_gpu_is_caught_by_the_timeout(faults: Path) -> None:
    faults.write_text(json.dumps({"0": [{"kind": "hang"}]}))
    results = by_name(deep_check([0], timeout_s=3))
    (result,) = results.values()
    assert result["status"] == "fail" and "did not finish within 3s" in result["detail"]


def test_no_torch_is_a_warning_not_a_fault(
    faults: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda name: None)
    (result,) = deep_check([0])
    assert result["status"] == "warn" and "torch is not installed" in result["detail"]
    log = tmp_path / "job.log"
    assert deep_preflight_faults([0], str(log)) == []
    assert "torch is not installed" in log.read_text()
    assert deep_check([])[0]["status"] == "warn"


def test_supervisor_honours_deep_preflight(client: Client, faults: Path) -> None:
    faults.write_text(json.dumps({"0": [{"kind": "matmul-corrupt"}]}))
    job = JobSpec(
        command=["sh", "-c", 'echo "on $CUDA_VISIBLE_DEVICES"'],
        gpus=1,
        deep_preflight=True,
        track=False,
    )
    (info,) = client.wait([client.launch(job).job_id], timeout_s=120)
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.gpus and 0 not in info.gpus and info.attempts == 2
    bad = next(g for g in client.gpus() if g.index == 0)
    assert bad.cordoned and "deep-preflight: matmul" in bad.reason
    log = client.logs(info.job_id).text
    assert "[air] deep preflight on GPUs [0]" in log and "fail" in log
    assert f"[air] deep preflight on GPUs [{info.gpus[0]}]" in log
    kinds = [e["failure_kind"] for e in client.events(info.job_id)]
    assert "infra" in kinds


def test_doctor_deep_json(faults: Path) -> None:
    faults.write_text(json.dumps({"1": [{"kind": "matmul-corrupt"}]}))
    env = {**os.environ, "AIR_SIMULATED_GPUS": "2"}
    done = subprocess.run(
        [AIR, "doctor", "--deep", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    checks = by_name(report["checks"])
    assert checks["gpu 0 matmul"]["status"] == "ok"
    assert checks["gpu 1 matmul"]["status"] == "fail"
    assert "differs from the CPU result" in checks["gpu 1 matmul"]["detail"]
    assert checks["gpu 1 matmul"]["next"]
    assert checks["all-reduce gpus 0,1"]["status"] == "ok"
    assert report["status"] == "fail"
