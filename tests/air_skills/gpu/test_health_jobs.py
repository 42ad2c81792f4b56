"""GPU health with real processes: preflight and runtime faults, cordons, infra retries, CLI.

Faults are injected through AIR_SIMULATED_GPU_FAULTS (re-read on every check), so the
supervisors' real health path runs; the jobs report CUDA_VISIBLE_DEVICES themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from air_skills import Client, JobInfo, JobSpec, JobStatus
from air_skills.errors import InvalidState

PY = sys.executable
AIR = str(Path(PY).parent / "air")
PRINT_GPUS = ["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"']


class Faults:
    """The faults file of one test; every write is seen by the next check."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, faults: dict[str, Any] | str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(faults if isinstance(faults, str) else json.dumps(faults))
        os.replace(tmp, self.path)  # a check never reads a half-written file


@pytest.fixture
def faults(air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Faults:
    path = tmp_path / "faults.json"
    path.write_text("{}")
    monkeypatch.setenv("AIR_SIMULATED_GPU_FAULTS", str(path))
    return Faults(path)


def spec(command: list[str], **kw: Any) -> JobSpec:
    kw.setdefault("track", False)
    return JobSpec(command=command, **kw)


def finished(client: Client, job_id: str, timeout_s: float = 60) -> JobInfo:
    (info,) = client.wait([job_id], timeout_s=timeout_s)
    assert info.status.is_terminal(), info
    return info


def air(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIR, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def gpu(client: Client, index: int) -> Any:
    return next(g for g in client.gpus() if g.index == index)


def test_fault_before_start_lands_on_another_gpu(client: Client, faults: Faults) -> None:
    faults.write({"0": [{"kind": "xid", "code": 79}]})
    info = finished(client, client.launch(spec(PRINT_GPUS, gpus=1)).job_id)
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.gpus and 0 not in info.gpus
    assert f"gpus={info.gpus[0]} order=PCI_BUS_ID" in client.logs(info.job_id).text
    assert info.attempts == 2
    bad = gpu(client, 0)
    assert bad.cordoned and bad.health == "unhealthy"
    assert "Xid 79" in bad.reason and "preflight" in bad.reason and info.job_id in bad.reason
    (requeue,) = [e for e in client.events(info.job_id) if e["kind"] == "requeued-infra"]
    assert requeue["failure_kind"] == "infra" and "Xid 79" in requeue["message"]


def test_fault_mid_run_requeues_and_finishes_elsewhere(
    client: Client, faults: Faults, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the job marks its start in tmp_path
    marker = tmp_path / "first-attempt-running"
    code = (
        "import os, sys, time\n"
        "print('attempt', os.environ['AIR_ATTEMPT'], 'on', os.environ['CUDA_VISIBLE_DEVICES'],"
        " flush=True)\n"
        "if os.environ['AIR_ATTEMPT'] == '1':\n"
        "    open(sys.argv[1], 'w').close()\n"
        "    time.sleep(300)\n"
    )
    launched = client.launch(spec([PY, "-c", code, str(marker)], gpus=1, track=True))
    assert launched.run_id
    wait_until(marker.exists)
    first = client.get(launched.job_id)
    assert first.status == JobStatus.RUNNING and len(first.gpus) == 1
    bad = first.gpus[0]
    faults.write({str(bad): [{"kind": "ecc", "count": 2}]})

    info = finished(client, launched.job_id)
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert info.job_id == launched.job_id and info.run_id == launched.run_id
    assert info.attempts == 2 and bad not in info.gpus
    log = client.logs(info.job_id).text
    assert f"attempt 1 on {bad}" in log and f"attempt 2 on {info.gpus[0]}" in log
    history = client.events(info.job_id)
    infra = [e for e in history if e["failure_kind"] == "infra"]
    assert len(infra) == 1 and infra[0]["kind"] == "requeued-infra"
    assert "while running" in infra[0]["message"] and "uncorrectable ECC" in infra[0]["message"]
    assert [e["kind"] for e in history][-1] == "succeeded"
    cordoned = gpu(client, bad)
    assert cordoned.cordoned and "while running" in cordoned.reason
    assert client.tracker.client.get_run(launched.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_hundred_launches_after_a_cordon_avoid_it(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SANDBOX", "off")  # the jobs write what they saw into tmp_path
    client.cordon(2, "fan failure")
    out = tmp_path / "seen"
    out.mkdir()
    write = ["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES" > "$0/$AIR_JOB_ID"', str(out)]
    ids = [client.launch(spec(write, gpus=1)).job_id for _ in range(100)]
    infos = client.wait(ids, timeout_s=240, any=False)
    assert all(i.status == JobStatus.SUCCEEDED for i in infos), [i.message for i in infos]
    seen = {p.name: p.read_text().strip() for p in out.iterdir()}
    assert sorted(seen) == sorted(ids)
    assert set(seen.values()) <= {"0", "1", "3"}
    assert all(2 not in i.gpus for i in infos)
    assert gpu(client, 2).cordoned and gpu(client, 2).reason == "fan failure"


def test_uncordon_refused_while_the_fault_persists(client: Client, faults: Faults) -> None:
    faults.write({"1": [{"kind": "row-remap", "pending": True}]})
    client.cordon(1, "remap pending")
    with pytest.raises(InvalidState) as refused:
        client.uncordon(1)
    assert "row remapping pending" in refused.value.message

    cli = air("uncordon", "1")
    assert cli.returncode == 1
    assert "still fails its check" in cli.stderr and "--force" in cli.stderr
    as_json = json.loads(air("uncordon", "1", "--json").stdout)
    assert as_json["error"]["code"] == "invalid-state"
    assert gpu(client, 1).cordoned

    forced = air("uncordon", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "forced past a failing check" in forced.stdout
    assert not gpu(client, 1).cordoned
    notes = client.store.read("SELECT message FROM events WHERE kind='uncordon'")
    assert "forced past a failing check: row-remap" in notes[-1]["message"]

    faults.write({})  # fixed: a plain uncordon works
    client.cordon(1, "maintenance")
    assert air("uncordon", "1").returncode == 0
    assert not gpu(client, 1).cordoned and gpu(client, 1).health == "ok"


def test_every_gpu_cordoned_jobs_wait_nothing_lost(client: Client, tmp_path: Path) -> None:
    for i in range(4):
        client.cordon(i, "maintenance")
    info = client.launch(spec(PRINT_GPUS, gpus=1))
    assert info.status == JobStatus.QUEUED
    assert "every GPU (4) is cordoned" in info.message and "nothing is lost" in info.message
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text('command: ["true"]\ngpus: 1\ntrack: false\n')
    cli = air("launch", str(spec_file))
    assert cli.returncode == 0 and "every GPU (4) is cordoned" in cli.stdout
    assert "nothing is lost" in air("status", info.job_id).stdout
    other = json.loads(air("launch", str(spec_file), "--json").stdout)
    assert other["status"] == "QUEUED" and "is cordoned" in other["message"]
    assert client.get(info.job_id).status == JobStatus.QUEUED
    client.uncordon(3)
    ids = [j.job_id for j in client.list().items]
    assert len(ids) == 3
    infos = client.wait(ids, timeout_s=60, any=False)
    assert [(i.status, i.gpus) for i in infos] == [(JobStatus.SUCCEEDED, [3])] * 3


def test_bad_faults_file_does_not_stop_jobs(client: Client, faults: Faults) -> None:
    faults.write('{"0": [{"kind": "xid", "code": 79}')  # cut short
    info = finished(client, client.launch(spec(PRINT_GPUS, gpus=1)).job_id)
    assert info.status == JobStatus.SUCCEEDED and info.gpus == [0]
    (warning,) = [e for e in client.events(info.job_id) if e["kind"] == "health-warning"]
    assert "AIR_SIMULATED_GPU_FAULTS" in warning["message"]
    assert "not valid JSON" in warning["message"]

    doctor = json.loads(air("doctor", "--json").stdout)
    (check,) = [c for c in doctor["checks"] if c["name"] == "faults file"]
    assert check["status"] == "fail" and "not valid JSON" in check["detail"]
    assert doctor["status"] == "fail"
    gpus = air("gpus")
    assert gpus.returncode == 0 and "is invalid" in gpus.stdout


def test_cli_reads_well_with_simulated_faults(client: Client, faults: Faults) -> None:
    faults.write(
        {
            "1": [{"kind": "xid", "code": 79}],
            "2": [{"kind": "throttle", "reasons": ["HW_THERMAL", "GPU_IDLE"]}],
            "3": [{"kind": "throttle", "reasons": ["GPU_IDLE", "SW_POWER_CAP"]}],
        }
    )
    client.cordon(0, "manual: reseat")
    table = air("gpus")
    assert table.returncode == 0, table.stderr
    assert "unhealthy" in table.stdout and "Xid 79" in table.stdout
    assert "GPU 0 is cordoned" in table.stdout and "air uncordon 0" in table.stdout
    listed = json.loads(air("gpus", "--json").stdout)
    assert [g["health"] for g in listed] == ["ok", "unhealthy", "unhealthy", "ok"]
    contract = {"index", "name", "memory_mb", "health", "cordoned", "reason", "job_ids"}
    assert contract <= set(listed[0])

    report = air("doctor", "--json")
    assert report.returncode == 0
    checks = {c["name"]: c for c in json.loads(report.stdout)["checks"]}
    assert checks["gpu 0"]["status"] == "warn" and "air uncordon 0" in checks["gpu 0"]["next"]
    assert checks["gpu 1"]["status"] == "fail" and "fallen off the bus" in checks["gpu 1"]["detail"]
    assert "reboot" in checks["gpu 1"]["next"]
    assert checks["gpu 2"]["status"] == "fail" and "HW_THERMAL" in checks["gpu 2"]["detail"]
    assert checks["gpu 3"]["status"] == "ok"  # idle and software power cap are benign
    text = air("doctor").stdout
    assert "FAIL  gpu 1" in text and "next:" in text


def test_cli_reads_well_with_no_gpu(air_home: Path) -> None:
    table = air("gpus", env={"AIR_SIMULATED_GPUS": "0"})
    assert table.returncode == 0 and "no GPUs" in table.stdout and "CPU jobs" in table.stdout
    doctor = json.loads(air("doctor", "--json", env={"AIR_SIMULATED_GPUS": "0"}).stdout)
    (check,) = [c for c in doctor["checks"] if c["name"] == "gpus"]
    assert check["status"] == "warn" and check["detail"].startswith("no GPUs")
    # Without the simulation: NVML on a GPU machine; here (no driver), said plainly.
    env = {k: v for k, v in os.environ.items() if k != "AIR_SIMULATED_GPUS"}
    real = subprocess.run([AIR, "gpus"], capture_output=True, text=True, env=env, timeout=120)
    assert real.returncode == 0
    assert "NVML" in real.stdout or "nvidia-ml-py" in real.stdout
