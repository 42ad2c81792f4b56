"""launch_jobs (many jobs in one call) and the seed groups that list_jobs, wait_for_jobs and
compare_jobs give with ``group_by="seed"``: plain functions over ``air_skills.Client``."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field

from air_skills.batch import DEFAULT_SEED_KEY, MAX_ITEMS, expand
from air_skills.client import Client
from air_skills.errors import InvalidInput
from air_skills.models import JobInfo
from air_skills.runtime.store.batches import new_batch_id
from mcp_server.schemas import BatchReply, LaunchedJob, SeedGroup
from mcp_server.wording import mcp_wording

MAX_CONFIG_BYTES = 1_000_000
ROUTINE = ("QUEUED", "RUNNING")

GroupBy = Annotated[
    str | None,
    Field(min_length=1, max_length=200, description='"seed": n, mean, std per config'),
]


def launch_jobs(
    client: Client,
    jobs: Annotated[
        list[dict[str, Any]],
        Field(min_length=1, max_length=MAX_ITEMS, description="launch_job arguments each"),
    ],
    variants: Annotated[
        list[dict[str, Any]] | None,
        Field(max_length=MAX_ITEMS, description="over jobs[0]: {config: {...}, patch: ...} each"),
    ] = None,
    seeds: Annotated[
        list[int | str] | None,
        Field(max_length=MAX_ITEMS, description="one job per seed, in config[seed_key]"),
    ] = None,
    seed_key: Annotated[str, Field(min_length=1, max_length=200)] = DEFAULT_SEED_KEY,
    grid: Annotated[
        dict[str, list[Any]] | None, Field(description="{key: [values]}: a job per combination")
    ] = None,
    idempotency_key: Annotated[
        str | None, Field(min_length=1, max_length=150, description="item n gets KEY#n")
    ] = None,
    dry_run: bool = False,
    allow_duplicate: Annotated[
        bool | None, Field(description="for every item: run even if the same ran or runs")
    ] = None,
) -> BatchReply:
    """Launch many jobs: a list, or jobs=[base] x variants x seeds (x grid), all checked
    before any is queued; then wait_for_jobs([batch_id], group_by="seed")."""
    if variants and len(jobs) != 1:
        raise InvalidInput(
            f"variants apply to one base spec; jobs holds {len(jobs)}",
            hint="pass jobs=[base] with variants=[{config: {...}}, ...], or no variants",
        )
    specs = [_flat(s) for s in jobs]
    if allow_duplicate is not None:  # an item's own choice first
        specs = [{"allow_duplicate": allow_duplicate, **s} for s in specs]
    if seeds or grid or variants:  # every spec over the variants, grid and seeds
        flat_variants = [_flat(v) for v in variants or []]
        specs = [i for s in specs for i in expand(s, seeds, seed_key, grid, flat_variants)]
    batch_id = new_batch_id()
    infos = client.launch_many(
        specs, dry_run=dry_run, idempotency_key=idempotency_key, batch_id=batch_id
    )
    return BatchReply(
        jobs=[_launched(i) for i in infos],
        dry_run=dry_run,
        batch_id=None if dry_run else batch_id,
        counts=None if dry_run else counted(infos),
        message=mcp_wording(infos[0].message) if dry_run and infos else None,
    )


def counted(infos: list[JobInfo]) -> str:
    """``8 launched, 1 duplicate of job-...``: what the call did, item by item."""
    dup = [i.job_id for i in infos if i.message.startswith("DUPLICATE")]
    held = [i.job_id for i in infos if i.message.startswith("ALREADY LAUNCHED")]
    parts = [f"{len(infos) - len(dup) - len(held)} launched"]
    if dup:
        parts.append(f"{len(dup)} duplicate(s) of {', '.join(dup[:5])}" + ("..." * (len(dup) > 5)))
    if held:
        parts.append(f"{len(held)} already launched with their key ({', '.join(held[:5])})")
    return ", ".join(parts)


def _flat(item: dict[str, Any]) -> dict[str, Any]:
    """A launch_job-style item as JobSpec fields: ``advanced``'s fields inline, config sized."""
    if not isinstance(item, dict):
        raise InvalidInput("each job and variant is an object", hint="see launch_job's arguments")
    out = {k: v for k, v in item.items() if k not in ("advanced", "dry_run") and v is not None}
    out.update({k: v for k, v in (item.get("advanced") or {}).items() if v is not None})
    config = out.get("config")
    if config is not None and len(json.dumps(config, default=str)) > MAX_CONFIG_BYTES:
        raise InvalidInput(
            f"a config is larger than {MAX_CONFIG_BYTES // 1000} KB",
            hint="pass large inputs as files (data) and keep config to hyperparameters",
        )
    return out


def _launched(info: JobInfo) -> LaunchedJob:
    routine = info.status.value in ROUTINE and info.message.startswith(info.status.value)
    if info.message.startswith(("DUPLICATE", "ALREADY LAUNCHED")):  # the counts line says why
        word = "DUPLICATE" if info.message.startswith("DUPLICATE") else "ALREADY LAUNCHED"
        _, _, metrics = info.message.partition("its latest metrics: ")
        said = f"{word}, not queued" + (f"; latest {metrics[:80]}" if metrics else "")
        return LaunchedJob(
            job_id=info.job_id, name=info.name, status=info.status.value, message=said
        )
    return LaunchedJob(
        job_id=info.job_id,
        name=info.name,
        status=info.status.value,
        message=None if routine or info.job_id == "dry-run" else mcp_wording(info.message)[:200],
    )


def groups_of(
    client: Client,
    job_ids: list[str],
    metric: str | None,
    direction: str,
    seed_key: str = DEFAULT_SEED_KEY,
    around: list[str] | None = None,
) -> list[SeedGroup]:
    """The jobs' seed groups by ``metric`` (required: the groups' mean is of it); with
    ``around``, only the groups those jobs are in (each over all its members in job_ids)."""
    if not metric:
        raise InvalidInput("group_by needs a metric", hint="pass metric='val_loss' too")
    groups = client.seed_groups(job_ids, metric, direction, seed_key, around)  # type: ignore[arg-type]
    return [SeedGroup(**g) for g in groups]
