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
MAX_SWEEP = 10_000  # jobs per `air launch` sweep (--seeds, --grid, --variants)
LAUNCH_GROUP = 100  # a batch's items queued in one transaction (launch_all's launch_group)
SHOWN_PROBLEMS = 20  # a refused batch names this many items' problems, then counts the rest
DEFAULT_SEED_KEY = "seed"
# Spec fields that do not make a job different for seed grouping: labels, not what ran.
LABELS = ("name", "idempotency_key", "tags", "experiment")
CHECK_ALIKE = ("config", "name", "idempotency_key", "tags")  # a dry-run check ignores these


VARIANT_FIELDS_REPLACED = ("config",)  # a variant's config is merged over the base's
DEFAULT = "default"  # a key a job's config leaves to the script: shown so, never as null


def expand(
    spec: Mapping[str, Any],
    seeds: list[Any] | None = None,
    seed_key: str = DEFAULT_SEED_KEY,
    grid: Mapping[str, list[Any]] | None = None,
    variants: Sequence[Mapping[str, Any]] | None = None,
    limit: int = MAX_ITEMS,
) -> list[dict[str, Any]]:
    """One spec per variant, grid point and seed (variants x grid x seeds, in that order).

    A variant holds config overrides (merged over the base's config) and/or any other field
    (a ``patch``, a ``name``...) that replaces the base's. Each item is named by what tells it
    apart from the others (``lr=0.003 seed=1``; a key a variant leaves out reads ``default``;
    variants with different patches add ``patch=base`` or ``patch=N`` (variant N's own), or
    the variant's own name). An idempotency key that would be on several items becomes
    ``KEY#n`` (n: the item's place).
    No seeds, grid or variants: the spec."""
    seeds = list(seeds or [])
    grid = dict(grid or {})
    variants = list(variants or [])
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
    bad = [n for n, v in enumerate(variants) if not isinstance(v, Mapping)]  # {}: the base
    if bad:
        raise InvalidInput(
            f"variant(s) {', '.join(map(str, bad))} are not objects of overrides",
            hint='each variant is {"config": {...}} and/or {"patch": "..."} (numbered from 0)',
        )
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    total = max(1, len(variants)) * len(points) * max(1, len(seeds))
    if total > limit:
        raise InvalidInput(
            f"{total} jobs asked ({max(1, len(variants))} variant(s) x {len(points)} grid"
            f" point(s) x {max(1, len(seeds))} seed(s)); at most {limit} per call",
            hint="fewer variants, seeds or grid values, or several calls",
        )
    if not seeds and not grid and not variants:
        return [dict(spec)]
    base_config = dict(spec.get("config") or {})
    # the config keys any variant or the grid sets: those that may tell items apart
    keys = list(dict.fromkeys([k for v in variants for k in (v.get("config") or {})] + list(grid)))
    patches = {json.dumps(v.get("patch", spec.get("patch")), default=str) for v in variants}
    out: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    for n_variant, variant in enumerate(variants or [{}]):
        own = {k: v for k, v in variant.items() if k not in VARIANT_FIELDS_REPLACED}
        config = {**base_config, **(variant.get("config") or {})}
        for point in points:
            for seed in seeds or [None]:
                item = {**dict(spec), **own}
                values = dict(point) if seed is None else {**point, seed_key: seed}
                item["config"] = {**config, **values}
                label = {"@name": variant.get("name")}
                label.update({k: item["config"].get(k, DEFAULT) for k in keys})
                if len(patches) > 1 and "name" not in variant:  # whose patch: base or its own
                    label["patch"] = n_variant if "patch" in variant else "base"
                if seed is not None:
                    label[seed_key] = seed
                out.append(item)
                shown.append(label)
    _name_items(out, shown, spec.get("name"))
    _key_items(out)
    return out


def read_variants(path: str) -> list[dict[str, Any]]:
    """A file of variants (``air launch --variants``): a JSON or YAML list of objects, each
    config overrides and/or fields (``patch``; ``patch_file``: a diff read from a file
    beside it)."""
    from pathlib import Path

    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise InvalidInput(
            f"cannot read --variants {path}: {exc.strerror}", hint="give a JSON or YAML file"
        ) from None
    import yaml

    try:
        found = yaml.safe_load(text) if file.suffix in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidInput(
            f"--variants {path} is not valid JSON or YAML: {str(exc)[:200]}",
            hint='a list: [{"config": {"lr": 0.1}}, {"config": {"lr": 0.3}, "patch": "..."}]',
        ) from None
    if not isinstance(found, list):
        raise InvalidInput(
            f"--variants {path} holds {type(found).__name__}, not a list of variants",
            hint='a list: [{"config": {"lr": 0.1}}, {"config": {"lr": 0.3}}]',
        )
    out = []
    for item in found:
        if isinstance(item, dict) and "patch_file" in item:
            item = dict(item)
            item["patch"] = (file.parent / str(item.pop("patch_file"))).read_text()
        out.append(item)
    return out


def _name_items(items: list[dict[str, Any]], labels: list[dict[str, Any]], base: Any) -> None:
    """Each item named by the label values that differ between items."""
    varying = [k for k in labels[0] if len({_short(lb.get(k)) for lb in labels}) > 1]
    if len(labels) == 1:  # one item: what it sets
        varying = [k for k in labels[0] if k != "@name" and labels[0][k] != DEFAULT]
    for item, label in zip(items, labels, strict=True):
        parts = [
            str(label[k]) if k == "@name" else f"{k}={_short(label[k])}"
            for k in varying
            if label.get(k) is not None
        ]
        text = " ".join(parts)
        if text:
            item["name"] = f"{base} {text}" if base else text


def _key_items(items: list[dict[str, Any]]) -> None:
    """An idempotency key on several items becomes ``KEY#n``: each item its own, so a retry
    of the whole call finds every job and none conflicts with its sibling."""
    counts: dict[str, int] = {}
    for item in items:
        key = item.get("idempotency_key")
        if key:
            counts[key] = counts.get(key, 0) + 1
    for n, item in enumerate(items):
        key = item.get("idempotency_key")
        if key and counts[key] > 1:
            item["idempotency_key"] = f"{key}#{n}"


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


def check_count(specs: list[Any], limit: int = MAX_ITEMS) -> None:
    if not specs:
        raise InvalidInput("no jobs to launch", hint="pass jobs=[...], or spec with seeds/grid")
    if len(specs) > limit:
        raise InvalidInput(
            f"{len(specs)} jobs in one call; at most {limit}", hint="split into several calls"
        )


def launch_all(
    specs: list[dict[str, Any]],
    check: Callable[[dict[str, Any]], JobInfo],
    launch: Callable[[dict[str, Any]], JobInfo] | None,
    idempotency_key: str | None = None,
    key_used: Callable[[str], bool] | None = None,
    launched: Callable[[list[tuple[int, JobInfo]]], None] | None = None,
    limit: int = MAX_ITEMS,
    launch_group: Callable[[list[dict[str, Any]]], list[JobInfo]] | None = None,
) -> list[JobInfo]:
    """Check every spec (``check``: a strict dry run), then launch each (``launch``; None: a
    dry run, the checks' infos). Specs alike but for config, name, key and tags are checked
    once; an item whose idempotency key is already used (``key_used``) is checked on its own,
    so a key reused for another spec refuses the call before anything is queued. A key on
    two items refuses it too. Any refusal refuses the whole call, every problem named with
    its item number. ``launched([(n, info), ...])`` is told of the items as they are queued.
    A launch that fails once some were queued says which were (their ids) and how to cancel
    them.
    ``launch_group``: launches LAUNCH_GROUP items at a time instead of ``launch`` (one
    transaction for them: a sweep of 1,000 is ten), all or none of each group."""
    check_count(specs, limit)
    specs = keyed([dict(s) for s in specs], idempotency_key)
    checked: dict[str, JobInfo] = {}
    problems, dry = [], []
    first_with: dict[str, int] = {}
    for n, spec in enumerate(specs):
        key = spec.get("idempotency_key")
        if key and key in first_with:
            problems.append(
                f"item {n}: [idempotency-conflict] idempotency key {key!r} is also item"
                f" {first_with[key]}'s: each job needs its own key"
            )
            continue
        if key:
            first_with[key] = n
        same = json.dumps({k: v for k, v in spec.items() if k not in CHECK_ALIKE}, default=str)
        if key and key_used is not None and key_used(key):
            same = f"{n}:{same}"  # checked against the job that holds the key
        try:
            parsed = JobSpec.parse(spec)  # the item's own fields, config included
            if same not in checked:
                checked[same] = check(spec)
            dry.append(checked[same].model_copy(update={"name": parsed.name or checked[same].name}))
        except AirError as exc:
            problems.append(f"item {n}: [{exc.code}] {exc.message}")
    if problems:
        shown = problems[:SHOWN_PROBLEMS]
        if len(problems) > len(shown):
            shown.append(f"... and {len(problems) - len(shown)} more item(s)")
        raise InvalidSpec(
            f"{len(problems)} of {len(specs)} job(s) refused; nothing was launched:",
            problems=shown,
            hint="fix the items named (numbered from 0) and call again",
        )
    if launch is None:
        return dry
    out: list[JobInfo] = []
    step = LAUNCH_GROUP if launch_group is not None else 1
    for n in range(0, len(specs), step):
        group = specs[n : n + step]
        try:
            infos = launch_group(group) if launch_group is not None else [launch(group[0])]
        except AirError as exc:
            if not out:
                raise
            ids = ", ".join(i.job_id for i in out)
            which = f"item {n}" if len(group) == 1 else f"items {n}-{n + len(group) - 1}"
            exc.message = (
                f"{which} failed after {len(out)} of {len(specs)} were queued ({ids}):"
                f" {exc.message}"
            )
            exc.hint = (
                "the queued ones run; cancel them by their batch id (cancel_job) or launch"
                f" items {n}-{len(specs) - 1} again once fixed. {exc.hint or ''}"
            ).strip()
            raise
        out += infos
        if launched is not None:
            launched([(n + k, info) for k, info in enumerate(infos)])
    return out


def seed_groups_of(
    rows: Sequence[JobRecord],
    scores: Mapping[str, Mapping[str, Any]],
    seed_key: str = DEFAULT_SEED_KEY,
    direction: str = "minimize",
) -> list[dict[str, Any]]:
    """``seed_groups`` of job records: the metric's final (latest) value of SUCCEEDED ones
    (a non-finite one, whatever the status, is a diverged run)."""
    values = {r.job_id: (scores.get(r.job_id) or {}).get("latest") for r in rows}
    jobs = [(r.job_id, r.spec_dict(), code_digest(r.code)) for r in rows]
    return seed_groups(jobs, values, seed_key, direction, {r.job_id: r.status for r in rows})


def code_digest(code: str | None) -> str | None:
    try:
        return (json.loads(code) or {}).get("digest") if code else None
    except ValueError:
        return None


def group_key(spec: Mapping[str, Any], digest: str | None, seed_key: str) -> str:
    """What a job ran but for its seed: spec (labels aside), config without the seed key, code."""
    same = {k: v for k, v in spec.items() if k not in LABELS and k != "config"}
    config = {k: v for k, v in (spec.get("config") or {}).items() if k != seed_key}
    return json.dumps([same, config, digest], sort_keys=True, default=str)


def seed_groups(
    jobs: Iterable[tuple[str, Mapping[str, Any], str | None]],
    values: Mapping[str, float | None],
    seed_key: str = DEFAULT_SEED_KEY,
    direction: str = "minimize",
    statuses: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Jobs (id, spec, code digest) grouped by all but their seed, best mean first.

    Each group: ``config`` (the keys that tell the groups apart, a key a group leaves to its
    script as ``default``; the whole config but the seed when there is one group), ``n``
    (members with a finite value), ``mean``, ``std`` (sample; 0 for one value), ``members``
    and their ``values`` (None: no value; ``"inf"``/``"nan"``: diverged), ``diverged`` (members
    whose value is non-finite: air_skills/runtime/results/finite.py) and ``failed`` (members
    that ended otherwise without a value). With ``statuses``, only SUCCEEDED members' finite
    values count. Never raises on a value: inf, nan and float max are diverged runs."""
    from air_skills.runtime.results.finite import is_finite_value, json_value

    groups: dict[str, dict[str, Any]] = {}
    for job_id, spec, digest in jobs:
        group = groups.setdefault(
            group_key(spec, digest, seed_key),
            {
                "config": _without(spec.get("config") or {}, seed_key),
                "members": [],
                "values": [],
                "diverged": 0,
                "failed": 0,
            },
        )
        value = values.get(job_id)
        status = (statuses or {}).get(job_id, "SUCCEEDED")
        group["members"].append(job_id)
        if value is not None and not is_finite_value(value):
            group["diverged"] += 1
            group["values"].append(json_value(value))
        elif value is not None and status == "SUCCEEDED":
            group["values"].append(float(value))
        else:
            group["failed"] += status in ENDED_WITHOUT_VALUE
            group["values"].append(None)
    out = list(groups.values())
    varying = _varying([g["config"] for g in out])
    for g in out:
        got = [v for v in g["values"] if isinstance(v, float)]
        g["n"] = len(got)
        g["mean"], g["std"] = _mean_std(got)
        if len(out) > 1:
            g["config"] = {k: g["config"].get(k, DEFAULT) for k in varying}
    sign = 1 if direction == "minimize" else -1
    out.sort(key=lambda g: (g["mean"] is None, sign * (g["mean"] or 0.0)))
    return out


ENDED_WITHOUT_VALUE = ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED")


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample std of finite values; values near float max do not overflow the mean
    (their std may read inf)."""
    if not values:
        return None, None
    n = len(values)
    try:
        mean = statistics.fmean(values)
    except OverflowError:  # fsum's intermediate overflow: the sum of the values over n
        mean = math.fsum(v / n for v in values)
    try:
        std = statistics.stdev(values) if n > 1 else 0.0
    except OverflowError:
        std = math.inf
    return mean, std


def _without(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != key}


def _varying(configs: list[dict[str, Any]]) -> list[str]:
    keys = list(dict.fromkeys(k for c in configs for k in c))
    return [k for k in keys if len({json.dumps(c.get(k), default=str) for c in configs}) > 1]


def group_line(group: Mapping[str, Any], metric: str | None = None) -> str:
    """``lr=0.1: 0.37012 ± 0.0031, mean of 2 run(s) (1 of 3 diverged)``: one line of a seed
    table."""
    from air_skills.runtime.results.finite import show_value

    config = " ".join(f"{k}={_shown(v)}" for k, v in group["config"].items())
    n, total = group["n"], len(group["members"])
    diverged, failed = group.get("diverged", 0), group.get("failed", 0)
    notes = []
    if diverged:
        notes.append(f"{diverged} of {total} diverged")
    if failed:
        notes.append(f"{failed} of {total} ended without a value")
    pending = total - n - diverged - failed
    if group["mean"] is None:
        value = "no value" + (f": {', '.join(notes)}" if notes else " yet")
        if notes and pending:
            value += f", {pending} not ended"
    else:
        value = (
            f"{show_value(group['mean'])} ± {show_value(group['std'], '.2g')}, mean of {n} run(s)"
        )
        if pending:
            notes.append(f"{pending} without a value yet")
        if notes:
            value += f" ({'; '.join(notes)})"
    return f"{config or '(base)'}: {metric + ' ' if metric else ''}{value}"


def _shown(value: Any) -> str:
    return DEFAULT if value == DEFAULT else json.dumps(value, default=str)
