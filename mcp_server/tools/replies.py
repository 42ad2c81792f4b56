"""Job replies as the tools return them: the info, the shown status, config, a failure's tail."""

from __future__ import annotations

import os
from typing import Any

from air_skills.client import Client
from air_skills.errors import AirError
from air_skills.gpu.hardware import hardware_class
from air_skills.home import job_dir
from air_skills.models import JobInfo
from air_skills.runtime.results.finite import is_finite_value, json_value
from air_skills.status import JobStatus
from mcp_server.render import clean_output
from mcp_server.schemas import JobReply, MetricScore
from mcp_server.wording import mcp_wording

FAILED_TAIL_LINES = 12
FAILED_TAIL_CHARS = 1_000
SHORT_ID = 12
# autoresearch cancels a pruned trial's job with this reason (autoresearch/loop/watch.py): the job
# is CANCELLED in the store, and shown as PRUNED, as the study itself calls it.
PRUNED_MARK = "pruned by the median rule"


def shown_status(info: JobInfo) -> str:
    """The job's status; PRUNED for a job that a study's early stopping cancelled."""
    if info.status == JobStatus.CANCELLED and PRUNED_MARK in info.message:
        return "PRUNED"
    return info.status.value


def log_tail(client: Client, job_id: str) -> str | None:
    """The last lines of a job's log, cut to FAILED_TAIL_CHARS (None when there is none)."""
    try:
        client.check_read(job_id)  # another project's log: not in its reply
        text = clean_output(client.logs(job_id, tail=FAILED_TAIL_LINES).text)
    except AirError:
        return None
    text = text.rstrip("\n")
    if len(text) > FAILED_TAIL_CHARS:
        text = "..." + text[-FAILED_TAIL_CHARS:]
    return text or None


def job_config(client: Client, job_id: str) -> dict[str, Any] | None:
    """The config the job was launched with (None when it has none)."""
    row = client.store.row(job_id)
    return (row.spec_dict().get("config") or None) if row is not None else None


def to_score(score: dict[str, Any] | None) -> MetricScore | None:
    """A job's metric as replies show it: non-finite values (inf, nan, MLflow's float-max
    clamp) as "inf"/"-inf"/"nan" strings, and such a latest value marks the run diverged."""
    if not score:
        return None
    fields = {k: json_value(score.get(k)) for k in ("latest", "step", "best", "best_step")}
    latest = score.get("latest")
    diverged = latest is not None and not is_finite_value(latest)
    return MetricScore(**fields, diverged=diverged or None)


def _holds_anything(folder: str) -> bool:
    """Whether a folder holds an entry: opened without following a link (it is the job's to
    write), never read further."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        with os.scandir(fd) as entries:
            return next(entries, None) is not None
    finally:
        os.close(fd)


def written_outputs(client: Client, info: JobInfo) -> list[str]:
    """The job's outputs (JobInfo.outputs) as a reply names them: its AIR_CHECKPOINT_DIR, which
    air makes for every job, once the job wrote into it; the folders the job made itself always.
    An empty checkpoint folder named in every reply cost get_job ~200 of its 1,000 bytes."""
    if not info.outputs:  # a dry run ("dry-run" is no job id) or a job with no folder yet
        return []
    own = os.fspath(job_dir(client.home, info.job_id) / "checkpoints")
    return [p for p in info.outputs if p != own or _holds_anything(p)]


def job_reply(client: Client, info: JobInfo, score: dict[str, Any] | None = None) -> JobReply:
    """The reply for one job: the failure's log tail, its config, the asked metric."""
    tail = None
    if info.status in (JobStatus.FAILED, JobStatus.TIMED_OUT):
        tail = log_tail(client, info.job_id)
    fields = info.model_dump()
    fields["message"] = mcp_wording(info.message)
    fields["status"] = shown_status(info)
    if fields.get("code"):  # short ids, as `git log --oneline` shows them: enough to tell apart
        code = fields["code"]
        code["digest"] = code["digest"][:SHORT_ID]
        code["commit"] = code["commit"][:SHORT_ID] if code.get("commit") else None
    # The class says what a result compares with; the details are one `air status` away.
    fields["hardware"] = hardware_class(info.hardware) if info.hardware else None
    fields["outputs"] = written_outputs(client, info) or None
    return JobReply(
        **fields, log_tail=tail, config=job_config(client, info.job_id), score=to_score(score)
    )
