"""Issue 30: a spec's ``env`` cannot choose GPUs by another name than CUDA_VISIBLE_DEVICES
(NVIDIA_VISIBLE_DEVICES for the container runtime, HIP_/ROCR_VISIBLE_DEVICES for ROCm): the
runtime decides which GPUs a job sees. A real job reports its own environment."""

from __future__ import annotations

import json
import sys

import pytest

from air_skills import Client, JobSpec, JobStatus

PY = sys.executable
OTHER_NAMES = ("NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def test_spec_env_cannot_choose_gpus_by_another_name(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*OTHER_NAMES, "GPU_DEVICE_ORDINAL"):
        monkeypatch.delenv(name, raising=False)  # only the spec could set them
    # Printed to its log: a sandboxed job may not write outside its folder.
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    env = {name: "0,1,2,3" for name in (*OTHER_NAMES, "GPU_DEVICE_ORDINAL")}
    info = client.launch(
        JobSpec(command=[PY, "-c", code], gpus=1, track=False, env={**env, "MY_SETTING": "kept"})
    )
    done = client.wait([info.job_id], timeout_s=60)[0]
    assert done.status == JobStatus.SUCCEEDED, done.message
    seen = json.loads(client.logs(info.job_id).text.strip().splitlines()[-1])
    assert seen["CUDA_VISIBLE_DEVICES"] == ",".join(str(g) for g in done.gpus)
    assert [name for name in env if name in seen] == []
    assert seen["MY_SETTING"] == "kept"
