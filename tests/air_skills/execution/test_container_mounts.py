"""Issue 25: a container job gets the sandbox's minimal mounts: its own folder, its code (a live
tree read-only), its data and writable folders; never AIR_HOME beyond its folder (air.db, the
MLflow store, the code store, other jobs), even where a mounted tree holds AIR_HOME. Real podman."""

from __future__ import annotations

import sys
from pathlib import Path

from air_skills import Client, JobSpec, JobStatus
from air_skills.tracking.mlflow import tracking_uri

LOOK = r"""
for p in "$AIR_HOME/air.db" "$STORE" "$AIR_HOME/code" "$AIR_HOME/jobs/$VICTIM/config.json" \
         /air/code/air_home/air.db; do
  if [ -e "$p" ]; then echo "SEEN $p"; else echo "HIDDEN $p"; fi
done
echo "JOBS $(ls "$AIR_HOME/jobs" | tr '\n' ' ')"
(echo forged > "$(dirname "$AIR_CONFIG_FILE")/env.json") 2>/dev/null && echo "WROTE env.json"
(echo x > /air/code/planted.txt) 2>/dev/null && echo "WROTE tree"
echo mine > "$AIR_CHECKPOINT_DIR/ok" && echo "WROTE own"
"""


def test_a_container_job_sees_no_air_home_beyond_its_own_folder(
    podman: str, client: Client, air_home: Path, tmp_path: Path
) -> None:
    victim = client.launch(  # another job's folder, on the host: its config and env files
        JobSpec(command=[sys.executable, "-c", "pass"], name="victim", track=False, code="live")
    )
    assert client.wait([victim.job_id], timeout_s=120)[0].status == JobStatus.SUCCEEDED
    store = "/" + tracking_uri(air_home).removeprefix("sqlite:///").lstrip("/")
    spec = JobSpec(
        command=["sh", "-c", LOOK],
        image=podman,
        code="live",
        workdir=str(tmp_path),  # a tree above AIR_HOME (tmp_path/air_home): mounted at /air/code
        env={"VICTIM": victim.job_id, "STORE": store},
        name="nosy",
    )
    info = client.launch(spec)
    done = client.wait([info.job_id], timeout_s=180)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert "SEEN" not in log and log.count("HIDDEN") == 5, log
    assert f"JOBS {info.job_id} " in log  # its own folder only
    assert "WROTE own" in log and "WROTE env.json" not in log and "WROTE tree" not in log
    assert (air_home / "jobs" / info.job_id / "checkpoints" / "ok").read_text() == "mine\n"
    assert not (tmp_path / "planted.txt").exists()
    assert (air_home / "air.db").exists()
