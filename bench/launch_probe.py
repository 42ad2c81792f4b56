"""The launch probe shared by bench/launch.py and bench/launch_ray.py: a job whose first
instruction records the time, and one timed launch through Popen or the Client."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

JOB_CODE = "import sys,time;open(sys.argv[1],'w').write(repr(time.time()))"


def job_command(out: Path) -> list[str]:
    """The job: a bare interpreter whose first instruction records the time."""
    return [sys.executable, "-S", "-c", JOB_CODE, str(out)]


def _read_stamp(path: Path, deadline_s: float = 30.0) -> float:
    """The job's timestamp. Looked for every 10 ms: the figure is the job's own clock reading,
    and polling faster would only take CPU from the job while it starts."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            text = path.read_text()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"the job never wrote {path}")
        time.sleep(0.01)


def raw_once(out: Path) -> float:
    """Seconds from Popen called to the job's first instruction."""
    t0 = time.time()
    proc = subprocess.Popen(job_command(out), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    proc.wait()
    return _read_stamp(out) - t0


def air_once(client: object, out: Path, track: bool) -> tuple[float, float]:
    """(seconds to the job's first instruction, seconds until launch() returned)."""
    from air_skills import JobSpec, JobStatus

    # Live code: the launch's own cost; a snapshot's is bench/snapshot.py's and cli_launch.py's.
    spec = JobSpec(command=job_command(out), gpus=1, track=track, name="bench-launch", code="live")
    t0 = time.time()
    info = client.launch(spec)  # type: ignore[attr-defined]
    returned = time.time() - t0
    first = _read_stamp(out) - t0
    (done,) = client.wait([info.job_id], timeout_s=60, any=False)  # type: ignore[attr-defined]
    if done.status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"bench job {done.job_id} ended {done.status}: {done.message}")
    return first, returned
