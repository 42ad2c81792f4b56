"""Many jobs in one call (a list of specs, or one spec over seeds and a small grid) and their
results grouped over seeds: n, mean, std and members, best mean first. Pure functions."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from air_skills.errors import AirError, InvalidInput, InvalidSpec
from air_skills.models import JobInfo, JobSpec
from air_skills.runtime.store.records import JobRecord

MAX_ITEMS = 100  # jobs per launch_jobs call
DEFAULT_SEED_KEY = "seed"
# Spec fields that do not make a job different for seed grouping: labels, not what ran.
LABELS = ("name", "idempotency_key", "tags", "experiment")
CHECK_ALIKE = ("config", "name", "idempotency_key", "tags")  # a dry-run check ignores these


def expand(
    spec: Mapping[str, Any],
    seeds: list[Any] | None = None,
    seed_key: str = DEFAULT_SEED_KEY,
    grid: Mapping[str, list[Any]] | None = None,
) -> list[dict[str, Any]]:
    """One spec per grid point and seed: the point's values and the seed set in its config,
    its name suffixed with them (``base lr=0.1 seed=2``). No seeds and no grid: the spec."""
    seeds = list(seeds or [])
    grid = dict(grid or {})
    empty = [k for k, values in grid.items() if not values]
    if empty:
        raise InvalidInput(
            f"grid key(s) with no values: {', '.join(empty)}",
            hint="give each grid key a list of at least one value",
        )
    if seed_key in grid and seeds:
        raise InvalidInput(
            f"{seed_key!r} is both a grid key and the seed key",
            hint="pass the seeds as seeds, not in the grid",
        )
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    total = len(points) * max(1, len(seeds))
    if total > MAX_ITEMS:
        raise InvalidInput(
            f"{total} jobs asked ({len(points)} grid point(s) x {max(1, len(seeds))} seed(s));"
            f" at most {MAX_ITEMS} per call",
            hint="fewer seeds or grid values, or several calls",
        )
    base_name = spec.get("name")
    out = []
    for point in points:
        for seed in seeds or [None]:
            values = dict(point) if seed is None else {**point, seed_key: seed}
            item = dict(spec)
            item["config"] = {**(spec.get("config") or {}), **values}
            if values:
                label = " ".join(f"{k}={_short(v)}" for k, v in values.items())
                item["name"] = f"{base_name} {label}" if base_name else label
            out.append(item)
    return out


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def keyed(specs: list[dict[str, Any]], key: str | None) -> list[dict[str, Any]]:
    """Each spec with an idempotency key: its own, else ``KEY#n`` from the call's key."""
    if not key:
        return specs
    return [
        s if s.get("idempotency_key") else {**s, "idempotency_key": f"{key}#{n}"}
        for n, s in enumerate(specs)
    ]


def check_count(specs: list[Any]) -> None:
    if not specs:
        raise InvalidInput("no jobs to launch", hint="pass jobs=[...], or spec with seeds/grid")
    if len(specs) > MAX_ITEMS:
        raise InvalidInput(
            f"{len(specs)} jobs in one call; at most {MAX_ITEMS}", hint="split into several calls"
        )


def launch_all(
    specs: list[dict[str, Any]],
    check: Callable[[dict[str, Any]], JobInfo],
    launch: Callable[[dict[str, Any]], JobInfo] | None,
    idempotency_key: str | None = None,
) -> list[JobInfo]:
    """Check every spec (``check``: a strict dry run), then launch each (``launch``; None: a
    dry run, the checks' infos). Specs alike but for config, name, key and tags are checked
    once. Any refusal refuses the whole call, every problem named with its item number."""
    check_count(specs)
    specs = keyed([dict(s) for s in specs], idempotency_key)
    checked: dict[str, JobInfo] = {}
    problems, dry = [], []
    for n, spec in enumerate(specs):
        same = json.dumps({k: v for k, v in spec.items() if k not in CHECK_ALIKE}, default=str)
        try:
            parsed = JobSpec.parse(spec)  # the item's own fields, config included
            if same not in checked:
                checked[same] = check(spec)
            dry.append(checked[same].model_copy(update={"name": parsed.name or checked[same].name}))
        except AirError as exc:
            problems.append(f"item {n}: [{exc.code}] {exc.message}")
    if problems:
        raise InvalidSpec(
            f"{len(problems)} of {len(specs)} job(s) refused; nothing was launched:",
            problems=problems,
            hint="fix the items named (numbered from 0) and call again",
        )
    if launch is None:
        return dry
    return [launch(spec) for spec in specs]


def seed_groups_of(
    rows: Sequence[JobRecord],
    scores: Mapping[str, Mapping[str, Any]],
    seed_key: str = DEFAULT_SEED_KEY,
    direction: str = "minimize",
) -> list[dict[str, Any]]:
    """``seed_groups`` of job records: the metric's final (latest) value of SUCCEEDED ones."""
    values = {
        r.job_id: (scores.get(r.job_id) or {}).get("latest")
        for r in rows
        if r.status == "SUCCEEDED"
    }
    jobs = [(r.job_id, r.spec_dict(), _digest(r.code)) for r in rows]
    return seed_groups(jobs, values, seed_key, direction)


def _digest(code: str | None) -> str | None:
    try:
        return (json.loads(code) or {}).get("digest") if code else None
    except ValueError:
        return None


def group_key(spec: Mapping[str, Any], code_digest: str | None, seed_key: str) -> str:
    """What a job ran but for its seed: spec (labels aside), config without the seed key, code."""
    same = {k: v for k, v in spec.items() if k not in LABELS and k != "config"}
    config = {k: v for k, v in (spec.get("config") or {}).items() if k != seed_key}
    return json.dumps([same, config, code_digest], sort_keys=True, default=str)


def seed_groups(
    jobs: Iterable[tuple[str, Mapping[str, Any], str | None]],
    values: Mapping[str, float | None],
    seed_key: str = DEFAULT_SEED_KEY,
    direction: str = "minimize",
) -> list[dict[str, Any]]:
    """Jobs (id, spec, code digest) grouped by all but their seed, best mean first.

    Each group: ``config`` (the keys that tell the groups apart; the whole config but the seed
    when there is one group), ``n`` (members with a finite value), ``mean``, ``std`` (sample;
    0 for one value), ``members`` and their ``values`` (None: no finite value yet)."""
    groups: dict[str, dict[str, Any]] = {}
    for job_id, spec, digest in jobs:
        group = groups.setdefault(
            group_key(spec, digest, seed_key),
            {"config": _without(spec.get("config") or {}, seed_key), "members": [], "values": []},
        )
        value = values.get(job_id)
        finite = value is not None and math.isfinite(value)
        group["members"].append(job_id)
        group["values"].append(value if finite else None)
    out = list(groups.values())
    varying = _varying([g["config"] for g in out])
    for g in out:
        got = [v for v in g["values"] if v is not None]
        g["n"] = len(got)
        g["mean"] = statistics.fmean(got) if got else None
        g["std"] = statistics.stdev(got) if len(got) > 1 else (0.0 if got else None)
        if len(out) > 1:
            g["config"] = {k: g["config"].get(k) for k in varying}
    sign = 1 if direction == "minimize" else -1
    out.sort(key=lambda g: (g["mean"] is None, sign * (g["mean"] or 0.0)))
    return out


def _without(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != key}


def _varying(configs: list[dict[str, Any]]) -> list[str]:
    keys = list(dict.fromkeys(k for c in configs for k in c))
    return [k for k in keys if len({json.dumps(c.get(k), default=str) for c in configs}) > 1]


def group_line(group: Mapping[str, Any], metric: str | None = None) -> str:
    """``lr=0.1: 0.37012 ± 0.0031 (n=3 of 3)``: one line of a seed table."""
    config = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in group["config"].items())
    n, total = group["n"], len(group["members"])
    if group["mean"] is None:
        value = "no value yet"
    else:
        value = f"{group['mean']:.5g} ± {group['std']:.2g}, mean of {n} run(s)"
        if n < total:
            value += f" ({total - n} without a value)"
    return f"{config or '(base)'}: {metric + ' ' if metric else ''}{value}"
