"""The job tools as plain functions over ``air_skills.Client``: no MCP in here.

Each takes the client first and typed, described parameters after it (their signatures are the
tool schemas); each returns a compact reply model (``mcp_server.schemas``) and raises
``AirError`` for a call that cannot be done. A failed training run is not an error:
``get_job`` returns it, FAILED, with its log tail.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from air_skills.client import Client
from air_skills.errors import AirError, InvalidInput, InvalidState, NotFound
from air_skills.runtime.results.finite import json_value
from air_skills.status import JobStatus
from mcp_server.schemas import (
    CompareReply,
    CompareRow,
    GpuList,
    JobReply,
    MetricsReply,
)
from mcp_server.tools.batch import GroupBy, groups_of
from mcp_server.tools.params import (
    AdvancedLaunch,
    Arg,
    Direction,
    JobId,
    MetricName,
    ShortText,
)
from mcp_server.tools.replies import job_reply, shown_status
from mcp_server.wording import job_not_found

MAX_CONFIG_BYTES = 1_000_000


def _json_size(config: dict[str, Any]) -> int:
    """The config's size as JSON; 0 when JSON cannot write it (JobSpec then says why)."""
    try:
        return len(json.dumps(config, default=str))
    except (RecursionError, ValueError):
        return 0


def launch_job(
    client: Client,
    command: Annotated[
        list[Arg],
        Field(
            min_length=1,
            max_length=1000,
            description='argv, e.g. ["python", "train.py"]; never run by a shell',
        ),
    ],
    name: Annotated[str | None, Field(max_length=200)] = None,
    workdir: Annotated[
        str | None, Field(max_length=4096, description="default: the server's folder")
    ] = None,
    config: Annotated[dict[str, Any] | None, Field(description="JSON in $AIR_CONFIG_FILE")] = None,
    gpus: Annotated[int, Field(ge=0, le=1024, description="GPUs per node")] = 0,
    procs: Annotated[
        int | Literal["gpu"],
        Field(description="per node: a torchrun gang (gpu: one per GPU)"),
    ] = 1,
    nodes: Annotated[int, Field(ge=1, le=1024, description="nodes (backend ray)")] = 1,
    cpus: Annotated[int | None, Field(ge=1, le=1024, description="thread cap")] = None,
    priority: Literal["low", "normal", "high"] = "normal",
    timeout_min: Annotated[float | None, Field(gt=0, description="time limit, minutes")] = None,
    max_retries: Annotated[int, Field(ge=0, le=100, description="retries after a failure")] = 0,
    stall_timeout_min: Annotated[float | None, Field(ge=0, description="idle min; 0: off")] = None,
    on_stall: Annotated[
        Literal["fail", "retry", "notify"] | None,
        Field(description="default: retry once if in a collective, else fail"),
    ] = None,
    env: Annotated[
        dict[str, Annotated[str, Field(max_length=100_000)]] | None,
        Field(),
    ] = None,
    experiment: Annotated[
        str | None, Field(max_length=500, description="MLflow experiment")
    ] = None,
    tags: Annotated[dict[str, ShortText] | None, Field(description="MLflow run tags")] = None,
    idempotency_key: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            description="same key and spec again: the first job",
        ),
    ] = None,
    track: Annotated[bool, Field(description="create an MLflow run")] = True,
    code: Annotated[
        Literal["snapshot", "live"],
        Field(description="snapshot: a copy of the code now; live: workdir"),
    ] = "snapshot",
    patch: Annotated[
        str | None,
        Field(max_length=4_000_000, description="a git diff applied to its snapshot"),
    ] = None,
    image: Annotated[
        str | None, Field(max_length=255, description="container image (podman/docker)")
    ] = None,
    sandbox: Literal["auto", "on", "off"] | None = None,  # None: AIR_SANDBOX (auto)
    advanced: Annotated[
        AdvancedLaunch | None, Field(description="data, backend, project, preemptible")
    ] = None,
    dry_run: Annotated[
        bool, Field(description="check spec, executable, script; launch nothing")
    ] = False,
    allow_duplicate: Annotated[
        bool | None, Field(description="run even if the same ran or runs")
    ] = None,
) -> JobReply:
    """Launch a job (queued until its GPUs are free). dry_run=true first catches a bad spec,
    executable or script; an idempotency_key makes retries safe."""
    if config is not None and _json_size(config) > MAX_CONFIG_BYTES:
        raise InvalidInput(
            f"config is larger than {MAX_CONFIG_BYTES // 1000} KB",
            hint="pass large inputs as files (data) and keep config to hyperparameters",
        )
    extra = advanced.model_dump(exclude_none=True, exclude_defaults=True) if advanced else {}
    given = {
        "command": command,
        "name": name,
        "workdir": workdir,
        "config": config,
        "gpus": gpus,
        "procs": procs,
        "nodes": nodes,
        "cpus": cpus,
        "priority": priority,
        "timeout_min": timeout_min,
        "max_retries": max_retries,
        "stall_timeout_min": stall_timeout_min,
        "on_stall": on_stall,
        "env": env,
        "experiment": experiment,
        "tags": tags,
        "idempotency_key": idempotency_key,
        "track": track,
        "code": code,
        "patch": patch,
        "image": image,
        "sandbox": sandbox,
        "allow_duplicate": allow_duplicate,
        **extra,
    }
    spec = {k: v for k, v in given.items() if v is not None}
    # strict: a dry run whose command would not start is an error an agent cannot miss
    return job_reply(client, client.launch(spec, dry_run=dry_run, strict=True))


def get_job(client: Client, job_id: JobId, metric: MetricName = None) -> JobReply:
    """A job: status and why (log tail if it failed), config, run, next step; with metric,
    its latest and best."""
    try:
        info = client.get(job_id)
        scores = client.scores([job_id], metric) if metric else {}
    except NotFound as exc:
        raise job_not_found(exc) from None
    return job_reply(client, info, scores.get(job_id))


def get_metrics(
    client: Client,
    job_id: JobId,
    keys: Annotated[
        list[Annotated[str, Field(max_length=250)]] | None,
        Field(max_length=50, description="metric keys (default: all)"),
    ] = None,
    history: Annotated[bool, Field(description="also [step, value] histories")] = False,
    max_points: Annotated[
        int, Field(ge=2, le=1000, description="most points per history (downsampled)")
    ] = 50,
) -> MetricsReply:
    """A job's metrics: each key's latest value, a downsampled history if asked; works while
    it runs."""
    try:
        client.check_read(job_id)  # another project's metrics: its owner's grant only
        metrics = client.metrics(job_id, keys=keys, history=history, max_points=max_points)
    except NotFound as exc:
        if exc.context.get("job_id") and "MLflow run" not in exc.message:
            raise job_not_found(exc) from None
        exc.hint = f"read its printed summary with get_logs (job_id={job_id})"
        raise
    latest = metrics.latest if not keys else {k: metrics.latest[k] for k in keys}
    status = note = None
    if not latest:  # nothing logged yet: say what the job is doing, not an empty map
        info = client.get(job_id)
        status = shown_status(info)
        note = (
            f"no metric logged yet ({status}); call again later or wait_for_jobs"
            if not info.status.is_terminal()
            else f"the job ended {status} without logging a metric; read get_logs"
        )
    return MetricsReply(
        job_id=metrics.job_id,
        run_id=metrics.run_id,
        latest={k: json_value(v) for k, v in latest.items()},
        history={k: [[s, json_value(v)] for s, v in h] for k, h in metrics.history.items()},
        status=status,
        note=note,
    )


def compare_jobs(
    client: Client,
    job_ids: Annotated[
        list[Annotated[str, Field(max_length=200)]],
        Field(min_length=2, max_length=20, description="job ids"),
    ],
    metric: Annotated[
        str | None, Field(max_length=250, description="metric to compare (default: all latest)")
    ] = None,
    at_step: Annotated[
        int | None,
        Field(ge=0, description="also the value at this step (or the last before)"),
    ] = None,
    direction: Direction = "minimize",
    group_by: GroupBy = None,
) -> CompareReply:
    """Config and command diffs against the first job, a metric's latest and best; at_step:
    values at equal steps (to cancel a loser early)."""
    try:
        for job_id in job_ids:  # another project's configs and metrics: its owner's grant only
            client.check_read(job_id)
        rows = client.compare(list(job_ids), metric=metric, at_step=at_step, direction=direction)
    except NotFound as exc:
        raise job_not_found(exc) from None
    for row in rows[1:]:
        try:
            row["code"] = client.code.short_diff(rows[0]["job_id"], row["job_id"])
        except AirError as exc:  # a snapshot gone (air gc): the rest of the comparison stands
            row["code"] = exc.message
    for row in rows:  # inf, nan, MLflow's float-max clamp: shown as such, never a number
        for k in ("latest", "best"):
            value = row.get(k)
            if isinstance(value, dict):
                row[k] = {m: json_value(v) for m, v in value.items()}
            elif value is not None:
                row[k] = json_value(value)
        at = row.get("at_step")
        if isinstance(at, dict) and at.get("value") is not None:
            at["value"] = json_value(at["value"])
    groups = groups_of(client, list(job_ids), metric, direction, group_by) if group_by else None
    return CompareReply(
        metric=metric, at_step=at_step, rows=[CompareRow(**r) for r in rows], groups=groups
    )


def cancel_job(
    client: Client,
    job_id: JobId,
    reason: Annotated[str | None, Field(max_length=500, description="why, for the record")] = None,
) -> JobReply:
    """Cancel a queued or running job, or a batch_id's (SIGTERM, then SIGKILL). Idempotent;
    a job that ended otherwise (SUCCEEDED, FAILED, TIMED_OUT) is an error."""
    from air_skills.runtime.store.batches import is_batch_id

    if is_batch_id(job_id):
        return _cancel_batch(client, job_id, reason)
    try:
        return job_reply(client, client.cancel(job_id, reason=reason))
    except NotFound as exc:
        raise job_not_found(exc) from None
    except InvalidState as exc:
        info = client.get(job_id)
        if info.status == JobStatus.CANCELLED:
            return job_reply(client, info)
        exc.hint = f"nothing to do; read the job with get_job (job_id={job_id})"
        raise


def _cancel_batch(client: Client, batch_id: str, reason: str | None) -> JobReply:
    """A batch's cancel as one reply: what each of its jobs is now, counted."""
    from collections import Counter
    from datetime import UTC, datetime

    infos = client.cancel_batch(batch_id, reason=reason)
    counts = Counter(i.status.value for i in infos)
    said = ", ".join(f"{n} {s}" for s, n in counts.most_common())
    live = counts.get("RUNNING", 0)
    return JobReply(
        job_id=batch_id,
        name=f"batch of {len(infos)} job(s)",
        status="CANCELLED" if not live else "RUNNING",
        message=f"now: {said}"
        + (f"; {live} running told to stop (wait_for_jobs on the batch)" if live else ""),
        created_at=min((i.created_at for i in infos), default=datetime.now(UTC)),
    )


def list_gpus(client: Client) -> GpuList:
    """GPUs (health, cordons and why, jobs on each), CPU-slot and GPU capacity (used,
    queued), excluded Slurm nodes."""
    notes = client.excluded_nodes()
    gpus = client.gpus()
    if not gpus:  # say why (no NVML, AIR_SIMULATED_GPUS not in this server's environment)
        from air_skills.gpu.providers import provider

        notes = [
            f"no GPUs: {provider().note}; CPU jobs (gpus: 0) still run. A simulated pool:"
            " AIR_SIMULATED_GPUS=N in the server's environment (`air mcp-config` copies the"
            " shell's AIR_* settings into the client's config)",
            *notes,
        ]
    return GpuList(gpus=gpus, capacity=client.capacity(), notes=notes or None)
